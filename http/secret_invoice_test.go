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
	up := &intentPages{}
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

// intentPages stands in front of the simulator as keybrake's upstream
// and answers, in Stripe's shapes, a default_incomplete subscription, its
// open first invoice and that invoice's payment intent (which the
// simulator lacks), a standalone intent made outside keybrake, and intents
// made outside keybrake that wait for their payer (requires_action) on a
// 3-D Secure page, an OXXO voucher and a bank transfer.
type intentPages struct{ sim *url.URL }

func (u *intentPages) option(tb testing.TB) Option {
	return func(s *khttp.Server) {
		u.sim = s.Upstream
		srv := httptest.NewServer(u)
		tb.Cleanup(srv.Close)
		s.Upstream = mustURL(tb, srv.URL)
	}
}

func (u *intentPages) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
	case r.Method == "GET" && path == "/v1/payment_intents":
		data := []any{}
		for id, action := range nextActions {
			pi := intent(id, "")
			pi["status"], pi["next_action"] = "requires_action", action
			data = append(data, pi)
		}
		writeJSON(w, map[string]any{"object": "list", "data": data, "has_more": false, "url": path})
	default:
		httputil.NewSingleHostReverseProxy(u.sim).ServeHTTP(w, r)
	}
}

// nextActions are the next_action of intents waiting for their payer, by
// intent: each carries a page on which anybody completes the payment.
var nextActions = map[string]map[string]any{
	"pi_3ds": {"type": "redirect_to_url", "redirect_to_url": map[string]any{
		"url": "https://hooks.stripe.com/redirect/authenticate/src_3ds?client_secret=src_client_secret_3ds", "return_url": "https://shop.test/done"}},
	"pi_oxxo": {"type": "oxxo_display_details", "oxxo_display_details": map[string]any{
		"expires_after": 1796000000, "hosted_voucher_url": "https://payments.stripe.com/oxxo/voucher/test_oxxo", "number": "12345678901234657890123456789012"}},
	"pi_bank": {"type": "display_bank_transfer_instructions", "display_bank_transfer_instructions": map[string]any{
		"amount_remaining": 90000, "currency": "usd", "hosted_instructions_url": "https://payments.stripe.com/bank_transfers/instructions/test_bank",
		"reference": "REF123", "type": "us_bank_transfer"}},
}

// A key allowed to read payment intents had the client_secret of an
// intent made outside keybrake nulled, but not its next_action: an intent
// waiting for its payer (requires_action) carries the page that completes
// the payment, a 3-D Secure or wallet redirect, a cash voucher, bank
// transfer instructions, and whoever opens it pays the $900 its creator
// chose, which no cap of the key counts, as with a checkout session's url.
// The next_action of every intent whose secret is nulled is nulled too.
func TestAttackSecret_ForeignIntentNextAction(t *testing.T) {
	up := &intentPages{}
	e := MustOpen(t, up.option(t))
	for _, policy := range []string{`{"total_usd_cap":100,"allowed_endpoints":["*"]}`, `{"total_usd_cap":100,"allowed_endpoints":["*"],"allow_unpriced":true}`} {
		_, secret := e.CreateKey(t, policy)
		resp, body := e.Do(t, "GET", "/v1/payment_intents", "", map[string]string{"Authorization": "Bearer " + secret})
		if resp.StatusCode != 200 {
			t.Fatalf("list: %d %s", resp.StatusCode, body)
		}
		for _, page := range []string{"hooks.stripe.com/redirect", "src_client_secret_3ds", "oxxo/voucher", "12345678901234657890123456789012", "bank_transfers/instructions", "REF123"} {
			if bytes.Contains(body, []byte(page)) {
				t.Errorf("%s: the list passed %s", policy, page)
			}
		}
		for _, pi := range mustJSON(t, body)["data"].([]any) {
			if m := pi.(map[string]any); m["next_action"] != nil || m["client_secret"] != nil || m["amount"] == nil {
				t.Errorf("%s: %v", policy, m)
			}
		}
	}
}
