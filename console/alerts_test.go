package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/keybrake/keybrake/internal/kbtest"
)

// The Alerts page lists the alert API's rules, endpoints and deliveries, and
// its "send test alert" button queues a test delivery that the sender then
// delivers, signed, to the endpoint.
func TestAlertsPage(t *testing.T) {
	s := MustConsole(t, nil)
	hook := kbtest.NewWebhook(t, "", s.Now)
	resp, out := adminJSON(t, s.URL(), "POST", "/vault/alerts/endpoints", `{"url":"`+hook.URL+`"}`)
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		t.Fatalf("create endpoint: %d %s", resp.StatusCode, out)
	}
	var ep struct {
		ID     string `json:"id"`
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal(out, &ep); err != nil || ep.ID == "" {
		t.Fatalf("endpoint answer %s: %v", out, err)
	}
	hook.Secret = ep.Secret
	c := newClient(t, s.URL())
	csrf := c.signIn()
	_, page := c.do("GET", "/console/alerts", nil, nil)
	for _, want := range []string{"Rules", "Webhook endpoints", ep.ID, "Send test alert to " + ep.ID, "Delivery log"} {
		if !strings.Contains(page, want) {
			t.Fatalf("the Alerts page lacks %q", want)
		}
	}
	if strings.Contains(page, ep.Secret) && ep.Secret != "" {
		t.Fatal("the Alerts page shows the endpoint's signing secret")
	}
	resp, _ = c.do("POST", "/console/alerts/test", url.Values{"csrf": {csrf}, "endpoint": {ep.ID}}, nil)
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.Contains(loc, "test=sent") {
		t.Fatalf("test alert: %d to %q", resp.StatusCode, loc)
	}
	if err := s.SendAlerts(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(hook.Acked()) != 1 || hook.BadSignatures() != 0 {
		t.Fatalf("the endpoint acknowledged %v with %d bad signatures, want one signed test alert", hook.Acked(), hook.BadSignatures())
	}
	_, page = c.do("GET", "/console/alerts", nil, nil)
	if !strings.Contains(page, "delivered") {
		t.Fatalf("the delivery log does not show the delivered test alert")
	}
	// A forged endpoint id never reaches the admin API's path.
	resp, _ = c.do("POST", "/console/alerts/test", url.Values{"csrf": {csrf}, "endpoint": {"../keys"}}, nil)
	if loc := resp.Header.Get("Location"); !strings.Contains(loc, "test=failed") {
		t.Fatalf("forged endpoint: redirected to %q", loc)
	}
}

// adminJSON calls the admin API with the admin token.
func adminJSON(t *testing.T, base, method, path, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+kbtest.AdminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp, []byte(b.String())
}

// A named admin token signs in to the console and acts as itself: a viewer
// sees keys but cannot create one (the admin API's role applies), an admin
// creates one and the admin audit log names it.
func TestNamedTokensSignIn(t *testing.T) {
	s := MustConsole(t, nil)
	token := func(name, role string) string {
		resp, out := adminJSON(t, s.URL(), "POST", "/vault/admin_tokens", `{"name":"`+name+`","role":"`+role+`"}`)
		var v struct {
			Token string `json:"token"`
		}
		if resp.StatusCode != http.StatusCreated || json.Unmarshal(out, &v) != nil || v.Token == "" {
			t.Fatalf("create %s token: %d %s", role, resp.StatusCode, out)
		}
		return v.Token
	}
	viewer, ops := token("grafana", "viewer"), token("ops", "admin")

	c := newClient(t, s.URL())
	csrf := c.signInWith(viewer)
	if resp, page := c.do("GET", "/console/keys", nil, nil); resp.StatusCode != http.StatusOK || !strings.Contains(page, "Keys") {
		t.Fatalf("viewer's keys page: %d", resp.StatusCode)
	}
	resp, page := c.do("POST", "/console/keys", url.Values{"csrf": {csrf}, "label": {"by-viewer"}, "daily_usd_cap": {"5"}}, nil)
	if resp.StatusCode == http.StatusSeeOther || !strings.Contains(strings.ToLower(page), "viewer") {
		t.Fatalf("a viewer created a key through the console: %d", resp.StatusCode)
	}

	c = newClient(t, s.URL())
	csrf = c.signInWith(ops)
	resp, _ = c.do("POST", "/console/keys", url.Values{"csrf": {csrf}, "label": {"by-ops"}, "daily_usd_cap": {"5"}}, nil)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("ops could not create a key: %d", resp.StatusCode)
	}
	_, audit := adminJSON(t, s.URL(), "GET", "/vault/audit?limit=20", "")
	if !strings.Contains(string(audit), `"ops"`) || !strings.Contains(string(audit), "key.create") {
		t.Fatalf("the admin audit log does not name ops for the key it created: %s", audit)
	}
}
