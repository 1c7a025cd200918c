package http_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/keybrake/keybrake"
)

func chargeParams(amount int64, currency string) *stripego.ChargeCreateParams {
	return &stripego.ChargeCreateParams{Amount: stripego.Int64(amount), Currency: stripego.String(currency), Source: &stripego.PaymentSourceSourceParams{Token: stripego.String("tok_visa")}}
}

func TestProxy_ChargeThroughVaultKey(t *testing.T) {
	e := MustOpen(t)
	id, secret := e.CreateKey(t, `{"vendor":"stripe","label":"nats-billing-run-2026-11","daily_usd_cap":250,"allowed_endpoints":["/v1/charges","/v1/payment_intents"],"expires_at":"2026-11-30T00:00:00Z"}`)
	sc := e.Stripe(secret)

	t.Run("OK", func(t *testing.T) {
		ch, err := sc.V1Charges.Create(context.Background(), chargeParams(2000, "usd"))
		if err != nil {
			t.Fatal(err)
		}
		if ch.Status != stripego.ChargeStatusSucceeded || ch.Amount != 2000 {
			t.Fatalf("charge = %+v", ch)
		}
		if got := e.Spend(t, id).Day; got != 20*keybrake.MicrosPerUSD {
			t.Fatalf("daily spend = %s, want 20.00", got)
		}
		// The object upstream carries keybrake's idempotency key in metadata.
		gt := e.Sim.GroundTruth().Charges
		if len(gt) != 1 || gt[0].Metadata["keybrake_idempotency_key"] == "" {
			t.Fatalf("ground truth = %+v", gt)
		}
	})
	t.Run("ReadPassesThrough", func(t *testing.T) {
		gt := e.Sim.GroundTruth().Charges[0]
		ch, err := sc.V1Charges.Retrieve(context.Background(), gt.ID, nil)
		if err != nil || ch.ID != gt.ID {
			t.Fatalf("retrieve = %v, %v", ch, err)
		}
	})
	t.Run("SimulatorHeader", func(t *testing.T) {
		resp, _ := e.Do(t, "GET", "/stripe/v1/charges", "", map[string]string{"Authorization": "Bearer " + secret})
		if resp.Header.Get("Keybrake-Upstream") != "simulator" {
			t.Fatalf("Keybrake-Upstream = %q", resp.Header.Get("Keybrake-Upstream"))
		}
		if resp.Header.Get("Request-Id") == "" {
			t.Fatal("no upstream Request-Id passed through")
		}
	})
	t.Run("ErrForbiddenEndpoint", func(t *testing.T) {
		_, err := sc.V1Customers.Create(context.Background(), &stripego.CustomerCreateParams{})
		se := StripeErr(t, err, http.StatusForbidden)
		if !strings.Contains(se.Msg, "customers.create") || !strings.Contains(se.Msg, "/v1/charges") {
			t.Fatalf("message = %q, want the operation and the allowlist", se.Msg)
		}
	})
	t.Run("BasicAuth", func(t *testing.T) {
		req, _ := http.NewRequest("GET", e.Server.URL()+"/stripe/v1/charges", nil)
		req.SetBasicAuth(secret, "")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status = %d", resp.StatusCode)
		}
	})
	t.Run("V1PathWithoutPrefix", func(t *testing.T) {
		resp, _ := e.Do(t, "GET", "/v1/charges", "", map[string]string{"Authorization": "Bearer " + secret})
		if resp.StatusCode != 200 {
			t.Fatalf("status = %d", resp.StatusCode)
		}
	})
}

func TestProxy_Auth(t *testing.T) {
	e := MustOpen(t)
	id, secret := e.CreateKey(t, `{"daily_usd_cap":10,"expires_at":"2026-11-29T13:00:00Z"}`)
	for name, auth := range map[string]string{
		"ErrNoKey":       "",
		"ErrBogusKey":    "Bearer vault_key_doesnotexist000000000000000000",
		"ErrStripeKey":   "Bearer sk_test_123",
		"ErrMalformed":   "Basic !!!notbase64",
		"ErrEmptyBearer": "Bearer ",
	} {
		t.Run(name, func(t *testing.T) {
			resp, body := e.Do(t, "POST", "/stripe/v1/charges", "amount=100&currency=usd&source=tok_visa", map[string]string{"Authorization": auth})
			if resp.StatusCode != 401 {
				t.Fatalf("status = %d %s", resp.StatusCode, body)
			}
			var v struct {
				Error struct{ Type, Message string }
			}
			if json.Unmarshal(body, &v) != nil || v.Error.Type != "invalid_request_error" || v.Error.Message == "" {
				t.Fatalf("body = %s", body)
			}
		})
	}
	if n := len(e.Sim.GroundTruth().Charges); n != 0 {
		t.Fatalf("%d charges reached the upstream without a valid key", n)
	}
	t.Run("ErrExpired", func(t *testing.T) {
		e.Clock.Advance(2 * 60 * 60 * 1e9)
		_, err := e.Stripe(secret).V1Charges.Create(context.Background(), chargeParams(100, "usd"))
		se := StripeErr(t, err, 401)
		if !strings.Contains(se.Msg, "expired") {
			t.Fatalf("message = %q", se.Msg)
		}
	})
	t.Run("ErrRevokedOnNextRequest", func(t *testing.T) {
		_, secret2 := e.CreateKey(t, `{"daily_usd_cap":10}`)
		sc := e.Stripe(secret2)
		if _, err := sc.V1Charges.Create(context.Background(), chargeParams(100, "usd")); err != nil {
			t.Fatal(err)
		}
		keys, _, _ := e.Store.FindKeys(context.Background(), keybrake.KeyFilter{Limit: 10})
		var id2 string
		for _, k := range keys {
			if k.ID != id {
				id2 = k.ID
			}
		}
		if resp, body := e.Admin(t, "POST", "/vault/keys/"+id2+"/revoke", ""); resp.StatusCode != 200 {
			t.Fatalf("revoke: %d %s", resp.StatusCode, body)
		}
		_, err := sc.V1Charges.Create(context.Background(), chargeParams(100, "usd"))
		se := StripeErr(t, err, 401)
		if !strings.Contains(se.Msg, "revoked") {
			t.Fatalf("message = %q", se.Msg)
		}
	})
}

func TestProxy_CapExact(t *testing.T) {
	e := MustOpen(t)
	id, secret := e.CreateKey(t, `{"daily_usd_cap":"10.00"}`)
	sc := e.Stripe(secret)
	ctx := context.Background()
	if _, err := sc.V1Charges.Create(ctx, chargeParams(950, "usd")); err != nil {
		t.Fatal(err)
	}
	t.Run("ErrOneCentOver", func(t *testing.T) {
		_, err := sc.V1Charges.Create(ctx, chargeParams(51, "usd"))
		se := StripeErr(t, err, http.StatusTooManyRequests)
		for _, want := range []string{"daily", "$10.00", "$9.50 spent", "$0.50 left", "2026-11-30T00:00:00Z"} {
			if !strings.Contains(se.Msg, want) {
				t.Fatalf("message %q lacks %q", se.Msg, want)
			}
		}
	})
	t.Run("ErrOverCapHeaders", func(t *testing.T) {
		resp, body := e.Do(t, "POST", "/stripe/v1/charges", "amount=51&currency=usd&source=tok_visa", map[string]string{"Authorization": "Bearer " + secret})
		if resp.StatusCode != 429 || resp.Header.Get("Stripe-Should-Retry") != "false" {
			t.Fatalf("status %d retry %q: %s", resp.StatusCode, resp.Header.Get("Stripe-Should-Retry"), body)
		}
		for h, want := range map[string]string{"Keybrake-Window": "daily", "Keybrake-Cap-Usd": "10.00", "Keybrake-Spent-Usd": "9.50", "Keybrake-Remaining-Usd": "0.50", "Keybrake-Resets-At": "2026-11-30T00:00:00Z"} {
			if got := resp.Header.Get(h); got != want {
				t.Errorf("%s = %q, want %q", h, got, want)
			}
		}
	})
	t.Run("OKExactlyOnCap", func(t *testing.T) {
		if _, err := sc.V1Charges.Create(ctx, chargeParams(50, "usd")); err != nil {
			t.Fatal(err)
		}
		if got := e.Spend(t, id).Day; got != 10*keybrake.MicrosPerUSD {
			t.Fatalf("spend = %s", got)
		}
	})
	if n, cents := e.SucceededCents("usd"); n != 2 || cents != 1000 {
		t.Fatalf("upstream has %d charges for %d cents, want 2 for 1000", n, cents)
	}
}

func TestProxy_Concurrent200(t *testing.T) {
	e := MustOpen(t)
	id, secret := e.CreateKey(t, `{"total_usd_cap":"50.00","daily_usd_cap":"75"}`)
	sc := e.Stripe(secret)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, refused, other := 0, 0, 0
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := sc.V1Charges.Create(context.Background(), chargeParams(100, "usd"))
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				ok++
			} else if se, isSE := err.(*stripego.Error); isSE && se.HTTPStatusCode == 429 {
				refused++
			} else {
				other++
				t.Errorf("unexpected error: %v", err)
			}
		}()
	}
	wg.Wait()
	if ok != 50 || refused != 150 || other != 0 {
		t.Fatalf("ok=%d refused=%d other=%d, want 50/150/0", ok, refused, other)
	}
	if got := e.Spend(t, id).Total; got != 50*keybrake.MicrosPerUSD {
		t.Fatalf("spend = %s", got)
	}
	if n, cents := e.SucceededCents("usd"); n != 50 || cents != 5000 {
		t.Fatalf("upstream: %d charges, %d cents", n, cents)
	}
}
