package http_test

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
)

// A key created without allowed_endpoints may take payments, not call all of
// Stripe; the default is stored on the key and announced in the 201.
func TestAdmin_DefaultEndpoints(t *testing.T) {
	e := MustOpen(t)
	t.Run("OKDefaultAnnounced", func(t *testing.T) {
		resp, body := e.Admin(t, "POST", "/vault/keys", `{"daily_usd_cap":10}`)
		if resp.StatusCode != 201 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		var v struct {
			ID               string   `json:"id"`
			VaultKey         string   `json:"vault_key"`
			AllowedEndpoints []string `json:"allowed_endpoints"`
			Notices          []string `json:"notices"`
		}
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(v.AllowedEndpoints, keybrake.DefaultEndpoints()) {
			t.Fatalf("allowed_endpoints = %v", v.AllowedEndpoints)
		}
		if len(v.Notices) != 1 || !strings.Contains(v.Notices[0], "allowed_endpoints was not given") || !strings.Contains(v.Notices[0], "charges.create") {
			t.Fatalf("notices = %q", v.Notices)
		}
		k, err := e.Store.FindKeyByID(context.Background(), v.ID)
		if err != nil || !reflect.DeepEqual(k.AllowedEndpoints, keybrake.DefaultEndpoints()) {
			t.Fatalf("stored %v, %v", k.AllowedEndpoints, err)
		}
		h := map[string]string{"Authorization": "Bearer " + v.VaultKey}
		for _, tc := range []struct {
			path, body string
			status     int
			msg        string
		}{
			{"/stripe/v1/charges", "amount=100&currency=usd&source=tok_visa", 200, ""},
			{"/stripe/v1/customers", "email=a%40b.c", 200, ""},
			{"/stripe/v1/payouts", "amount=100&currency=usd", 403, "may not call payouts.create"},
			{"/stripe/v1/transfers", "amount=100&currency=usd&destination=acct_1", 403, "may not call transfers.create"},
			{"/stripe/v1/webhook_endpoints", "url=https%3A%2F%2Fx.example&enabled_events[]=*", 403, "may not call webhook_endpoints.create"},
		} {
			resp, out := e.Do(t, "POST", tc.path, tc.body, h)
			if resp.StatusCode != tc.status || !strings.Contains(string(out), tc.msg) {
				t.Fatalf("%s: status %d, want %d with %q: %s", tc.path, resp.StatusCode, tc.status, tc.msg, out)
			}
		}
	})
	t.Run("OKExplicitHasNoNotice", func(t *testing.T) {
		_, body := e.Admin(t, "POST", "/vault/keys", `{"allowed_endpoints":["charges.create"]}`)
		if strings.Contains(string(body), "notices") {
			t.Fatalf("body = %s", body)
		}
	})
	t.Run("OKAllEndpoints", func(t *testing.T) {
		_, secret := e.CreateKey(t, `{"allowed_endpoints":["*"],"daily_usd_cap":10}`)
		h := map[string]string{"Authorization": "Bearer " + secret}
		if resp, out := e.Do(t, "POST", "/stripe/v1/products", "name=x", h); resp.StatusCode == 403 {
			t.Fatalf("products.create: %d %s", resp.StatusCode, out)
		}
		// Every operation is allowed, but one keybrake cannot price is
		// still refused without allow_unpriced.
		if resp, out := e.Do(t, "POST", "/stripe/v1/subscriptions", "customer=cus_1", h); resp.StatusCode != 403 || !strings.Contains(string(out), "cannot price") {
			t.Fatalf("subscriptions.create: %d %s", resp.StatusCode, out)
		}
	})
	for name, tc := range map[string]struct{ method, body string }{
		"ErrEmpty":          {"POST", `{"allowed_endpoints":[]}`},
		"ErrNull":           {"POST", `{"allowed_endpoints":null}`},
		"ErrStarNotAlone":   {"POST", `{"allowed_endpoints":["*","charges.create"]}`},
		"ErrStarPattern":    {"POST", `{"allowed_endpoints":["charges.*"]}`},
		"ErrPatchEmpty":     {"PATCH", `{"allowed_endpoints":[]}`},
		"ErrPatchNull":      {"PATCH", `{"allowed_endpoints":null}`},
		"ErrSecretReadsStr": {"POST", `{"allow_secret_reads":"yes"}`},
		"ErrSecretReadsNil": {"PATCH", `{"allow_secret_reads":null}`},
	} {
		t.Run(name, func(t *testing.T) {
			path := "/vault/keys"
			if tc.method == "PATCH" {
				id, _ := e.CreateKey(t, `{"allowed_endpoints":["charges.create"]}`)
				path += "/" + id
			}
			resp, out := e.Admin(t, tc.method, path, tc.body)
			if resp.StatusCode != 400 || !strings.Contains(string(out), `"param"`) {
				t.Fatalf("status %d: %s", resp.StatusCode, out)
			}
		})
	}
}

// Secrets Stripe returns only on expansion are refused unless the key has
// allow_secret_reads; the refusal names the expansion and forwards nothing.
func TestProxy_SecretReads(t *testing.T) {
	rec := &recorder{next: http.DefaultTransport}
	e := MustOpen(t, func(s *khttp.Server) { s.Transport = rec })
	id, secret := e.CreateKey(t, `{"allowed_endpoints":["*"]}`)
	h := map[string]string{"Authorization": "Bearer " + secret}
	reqs := []struct{ method, path, body string }{
		{"GET", "/stripe/v1/issuing/cards/ic_1?expand[]=number", ""},
		{"GET", "/stripe/v1/issuing/cards/ic_1?expand[]=cvc", ""},
		{"GET", "/stripe/v1/issuing/cards?expand[]=data.number", ""},
		{"GET", "/stripe/v1/treasury/financial_accounts/fa_1?expand[]=financial_addresses.aba.account_number", ""},
		{"GET", "/stripe/v1/apps/secrets/find?name=k&scope[type]=account&expand[]=payload", ""},
		{"GET", "/stripe/v1/apps/secrets?scope[type]=account&expand[]=data.payload", ""},
	}
	for _, r := range reqs {
		resp, out := e.Do(t, r.method, r.path, r.body, h)
		if resp.StatusCode != 403 || !strings.Contains(string(out), "may not read secrets") {
			t.Fatalf("%s: status %d: %s", r.path, resp.StatusCode, out)
		}
	}
	if sent := rec.sent(); len(sent) != 0 {
		t.Fatalf("refused secret reads reached the upstream: %s", sent)
	}
	// Without the expansion the same objects are readable.
	if resp, out := e.Do(t, "GET", "/stripe/v1/issuing/cards/ic_1?expand[]=cardholder", "", h); resp.StatusCode == 403 {
		t.Fatalf("plain read refused: %s", out)
	}
	resp, out := e.Admin(t, "PATCH", "/vault/keys/"+id, `{"allow_secret_reads":true}`)
	if resp.StatusCode != 200 || !strings.Contains(string(out), `"allow_secret_reads": true`) {
		t.Fatalf("patch: %d %s", resp.StatusCode, out)
	}
	for _, r := range reqs {
		if resp, out := e.Do(t, r.method, r.path, r.body, h); resp.StatusCode == 403 {
			t.Fatalf("%s refused with allow_secret_reads: %s", r.path, out)
		}
	}
}
