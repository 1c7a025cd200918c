package http_test

import (
	"encoding/json"
	"net/http"
	"testing"
)

// writesUpstream counts the requests other than GET that went upstream:
// what was forwarded, leaving out the lookups keybrake priced with.
func (u *Upstream) writesUpstream() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, r := range u.reqs {
		if r.Method != http.MethodGet {
			n++
		}
	}
	return n
}

// mustRefuseUnforwarded sends a form POST with a vault key and asserts a
// Stripe-shaped 400 naming param, with nothing but lookups sent upstream.
func mustRefuseUnforwarded(t *testing.T, e *Env, u *Upstream, secret, path, body, param string) {
	t.Helper()
	before := u.writesUpstream()
	resp, out := e.DoRaw(t, "POST", "/stripe"+path, body,
		Header{"Authorization", "Bearer " + secret}, Header{"Content-Type", "application/x-www-form-urlencoded"})
	var v struct {
		Error struct{ Type, Param, Message string }
	}
	_ = json.Unmarshal(out, &v)
	if resp.StatusCode != http.StatusBadRequest || v.Error.Type != "invalid_request_error" || v.Error.Param != param {
		t.Fatalf("POST %s %q: %d %s, want a 400 naming %s", path, body, resp.StatusCode, out, param)
	}
	if n := u.writesUpstream() - before; n != 0 {
		t.Fatalf("POST %s %q: %d writes went upstream, want none", path, body, n)
	}
}

// A refund that named a small charge and a large payment intent (the body
// of POST /v1/refunds, or a legacy /v1/charges/{id}/refund(s) path with a
// payment_intent param, which Stripe's API documents on those paths) was
// priced at the charge alone and forwarded: which of the two Stripe
// refunds keybrake cannot know, and refunding the intent would move 50.00
// under a 1.00 reservation. A refund names one payment now; two are
// refused before Stripe sees them.
func TestAttackStripe_RefundNamesTwoPayments(t *testing.T) {
	e, u := MustOpenRecorded(t)
	a := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"]}`)
	ch := a.must(t, 200, "POST", "/v1/charges", "amount=100&currency=usd&source=tok_visa")["id"].(string)
	pi := a.must(t, 200, "POST", "/v1/payment_intents", "amount=5000&currency=usd&payment_method=pm_card_visa&confirm=true")["id"].(string)
	mustRefuseUnforwarded(t, e, u, a.secret, "/v1/refunds", "charge="+ch+"&payment_intent="+pi, "payment_intent")
	mustRefuseUnforwarded(t, e, u, a.secret, "/v1/refunds", "payment_intent="+pi+"&charge="+ch+"&amount=100", "payment_intent")
	mustRefuseUnforwarded(t, e, u, a.secret, "/v1/charges/"+ch+"/refund", "payment_intent="+pi, "payment_intent")
	mustRefuseUnforwarded(t, e, u, a.secret, "/v1/charges/"+ch+"/refunds", "payment_intent="+pi+"&amount=100", "payment_intent")
	// Each alone is still refunded.
	a.must(t, 200, "POST", "/v1/refunds", "charge="+ch)
	a.must(t, 200, "POST", "/v1/refunds", "payment_intent="+pi+"&amount=1000")
}

// A refund's amount is in the currency of the payment refunded, which
// keybrake looks up; refunds.create also takes a currency parameter (for
// a refund from a customer's balance). One that said another currency
// than the payment's was priced in the payment's (100000 of a yen charge,
// about 670.00) while the request named 1000.00 of dollars. It is refused
// now; the payment's own currency, in any case, is forwarded.
func TestAttackStripe_RefundInOtherCurrency(t *testing.T) {
	e, u := MustOpenRecorded(t)
	a := newAttacker(t, e, `{"total_usd_cap":2000,"allowed_endpoints":["*"]}`)
	ch := a.must(t, 200, "POST", "/v1/charges", "amount=150000&currency=jpy&source=tok_visa")["id"].(string)
	mustRefuseUnforwarded(t, e, u, a.secret, "/v1/refunds", "charge="+ch+"&amount=100000&currency=usd", "currency")
	mustRefuseUnforwarded(t, e, u, a.secret, "/v1/charges/"+ch+"/refunds", "amount=100000&currency=usd", "currency")
	before := u.writesUpstream()
	a.call(t, "POST", "/v1/refunds", "charge="+ch+"&amount=1000&currency=JPY") // the simulator takes no currency; Stripe does
	if u.writesUpstream() != before+1 {
		t.Fatal("a refund in the charge's own currency was not forwarded")
	}
}
