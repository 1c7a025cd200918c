package http_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	khttp "github.com/keybrake/keybrake/http"
)

// Stripe's subscription integration creates the subscription with
// payment_behavior=default_incomplete and confirms its first invoice's
// payment intent in the browser, with the client secret from
// latest_invoice.confirmation_secret (latest_invoice.payment_intent before
// API 2025-03-31). A key with allow_unpriced, which may create the
// subscription and receives every invoice's hosted page, got that secret
// nulled: the intent is nobody's hold. The secret of an intent that pays
// an invoice is kept for such a key, wherever the answer carries it; a
// key without allow_unpriced, and a standalone intent for every key, still
// get null.
func TestSecret_AllowUnpricedKeepsInvoiceIntentSecret(t *testing.T) {
	up := &invoiceIntents{}
	e := MustOpen(t, up.option(t))
	_, unpriced := e.CreateKey(t, `{"total_usd_cap":100,"allowed_endpoints":["*"],"allow_unpriced":true}`)
	_, capped := e.CreateKey(t, `{"total_usd_cap":100,"allowed_endpoints":["*"]}`)
	do := func(secret, method, path, body string) []byte {
		t.Helper()
		h := map[string]string{"Authorization": "Bearer " + secret}
		if method == "POST" {
			h["Content-Type"] = "application/x-www-form-urlencoded"
		}
		resp, out := e.Do(t, method, path, body, h)
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, out)
		}
		return out
	}
	calls := []struct{ method, path, body string }{
		{"POST", "/v1/subscriptions", "customer=cus_1&items[0][price]=price_1&payment_behavior=default_incomplete&expand[]=latest_invoice.confirmation_secret"},
		{"POST", "/v1/subscriptions", "customer=cus_1&items[0][price]=price_1&payment_behavior=default_incomplete&expand[]=latest_invoice.payment_intent"},
		{"GET", "/v1/invoices/in_sub?expand[]=confirmation_secret", ""},
		{"GET", "/v1/invoices/in_sub?expand[]=payment_intent", ""},
		{"GET", "/v1/payment_intents/pi_sub", ""},
	}
	for _, c := range calls {
		if out := do(unpriced, c.method, c.path, c.body); !bytes.Contains(out, []byte("pi_sub_secret_s")) {
			t.Errorf("%s %s: a key with allow_unpriced lost its invoice's payment secret: %s", c.method, c.path, out)
		}
		if c.method == "GET" {
			if out := do(capped, c.method, c.path, c.body); bytes.Contains(out, []byte("pi_sub_secret_s")) {
				t.Errorf("GET %s: a key without allow_unpriced received an invoice's payment secret", c.path)
			}
		}
	}
	for _, secret := range []string{unpriced, capped} {
		if out := do(secret, "GET", "/v1/payment_intents/pi_alone", ""); bytes.Contains(out, []byte("pi_alone_secret_a")) {
			t.Errorf("a standalone foreign intent's secret passed: %s", out)
		}
	}
}

// invoiceIntents stands in front of the simulator as keybrake's upstream
// and answers, in Stripe's shapes, a default_incomplete subscription, its
// open first invoice and that invoice's payment intent (which the
// simulator lacks), and a standalone intent made outside keybrake.
type invoiceIntents struct{ sim *url.URL }

func (u *invoiceIntents) option(tb testing.TB) Option {
	return func(s *khttp.Server) {
		u.sim = s.Upstream
		srv := httptest.NewServer(u)
		tb.Cleanup(srv.Close)
		s.Upstream = mustURL(tb, srv.URL)
	}
}

func (u *invoiceIntents) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	expand := strings.Join(append(r.Form["expand[]"], r.Form["expand[0]"]...), ",")
	intent := func(id, invoice string) map[string]any {
		pi := map[string]any{"object": "payment_intent", "id": id, "amount": 90000, "currency": "usd",
			"status": "requires_payment_method", "client_secret": id + "_secret_" + id[3:4]}
		if invoice != "" {
			pi["invoice"] = invoice // before API 2025-03-31
		}
		return pi
	}
	inv := map[string]any{"object": "invoice", "id": "in_sub", "status": "open", "amount_due": 90000, "currency": "usd",
		"hosted_invoice_url": "https://invoice.stripe.com/i/sub", "payment_intent": "pi_sub", "confirmation_secret": nil}
	if strings.Contains(expand, "confirmation_secret") {
		inv["confirmation_secret"] = map[string]any{"type": "payment_intent", "client_secret": "pi_sub_secret_s"}
	}
	if strings.Contains(expand, "payment_intent") {
		inv["payment_intent"] = intent("pi_sub", "in_sub")
	}
	switch path := r.URL.Path; {
	case r.Method == "POST" && path == "/v1/subscriptions":
		writeJSON(w, map[string]any{"object": "subscription", "id": "sub_1", "status": "incomplete", "latest_invoice": inv})
	case r.Method == "GET" && path == "/v1/invoices/in_sub":
		writeJSON(w, inv)
	case r.Method == "GET" && path == "/v1/payment_intents/pi_sub":
		writeJSON(w, intent("pi_sub", "in_sub"))
	case r.Method == "GET" && path == "/v1/payment_intents/pi_alone":
		writeJSON(w, intent("pi_alone", ""))
	default:
		httputil.NewSingleHostReverseProxy(u.sim).ServeHTTP(w, r)
	}
}
