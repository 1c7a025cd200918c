package http_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
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

// escapeFirst writes id with its first byte after the prefix's '_'
// percent-encoded: in_%41bc for in_Abc, the same object to Stripe.
func escapeFirst(id string) string {
	i := strings.IndexByte(id, '_') + 1
	return id[:i] + fmt.Sprintf("%%%02X", id[i]) + id[i+1:]
}

// TestAttackStripe_EscapedObjectIDDodgesCustomerScope: a key limited to
// one customer, with allow_unpriced to pay that customer's invoices, paid
// another customer's open $900 invoice by writing its id with a letter
// percent-encoded (POST /v1/invoices/in_%41bc/pay): keybrake named the
// operation from the decoded id, but looked for that id in the raw path
// to find the object whose customer it checks, found nothing there, and
// checked none. Stripe decodes the path and paid the invoice. The object
// is now found by the decoded path, and looked up as Stripe reads it.
func TestAttackStripe_EscapedObjectIDDodgesCustomerScope(t *testing.T) {
	e := MustOpen(t)
	openInvoice := func(t *testing.T) (customer, invoice string) {
		_, cus := directPost(t, e, "/v1/customers", "email=payer@example.com&invoice_settings[default_payment_method]=pm_card_visa")
		directPost(t, e, "/v1/invoiceitems", "customer="+id(cus)+"&amount=90000&currency=usd")
		_, inv := directPost(t, e, "/v1/invoices", "customer="+id(cus)+"&auto_advance=false&pending_invoice_items_behavior=include")
		if _, fin := directPost(t, e, "/v1/invoices/"+id(inv)+"/finalize", ""); fin["status"] != "open" {
			t.Fatalf("finalize: %v", fin)
		}
		return id(cus), id(inv)
	}
	mine, myInvoice := openInvoice(t)
	_, theirs := openInvoice(t)
	a := newAttacker(t, e, `{"total_usd_cap":10,"allowed_endpoints":["*"],"allow_unpriced":true,"allowed_customers":["`+mine+`"]}`)
	a.must(t, http.StatusForbidden, "POST", "/v1/invoices/"+escapeFirst(theirs)+"/pay", "")
	a.must(t, http.StatusForbidden, "POST", "/v1/invoices/"+escapeFirst(theirs)+"/send", "")
	a.must(t, 200, "POST", "/v1/invoices/"+escapeFirst(myInvoice)+"/pay", "")
	for _, inv := range e.Sim.GroundTruth().Invoices {
		if inv.ID == theirs && inv.AmountPaid > 0 {
			t.Fatalf("another customer's invoice %s was paid: %d", theirs, inv.AmountPaid)
		}
	}
}
