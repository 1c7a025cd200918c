package http_test

import (
	"testing"
	"time"
)

// invoices.create was free with auto_advance=false: the draft "cannot
// finalize or collect by itself". But creating it also takes the
// customer's pending invoice items when pending_invoice_items_behavior is
// include, or when it is not sent under a Stripe-Version before 2022-08-01
// (the default was include_and_require), and those items then never reach
// the invoice that would have billed them. A pending credit (a negative
// item: a goodwill refund, a downgrade's proration) parked on a draft
// that never advances raises what the customer's next invoice collects by
// itself (a subscription's renewal, the operator's monthly run), like
// deleting the credit (invoiceitems.delete, unpriced). A key capped at $10
// without allow_unpriced took a $500 credit away: the next invoice charged
// the customer $1,000 instead of $500, $500 nobody counted. A free draft
// now needs pending_invoice_items_behavior=exclude, sent.
func TestAttackInvoices_DraftTakesPendingCredit(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":10,"allowed_endpoints":["*"]}`)
		_, cus := directPost(t, e, "/v1/customers", "invoice_settings[default_payment_method]=pm_card_visa")
		directPost(t, e, "/v1/invoiceitems", "customer="+id(cus)+"&amount=-50000&currency=usd&description=goodwill")
		include, _ := a.call(t, "POST", "/v1/invoices", "customer="+id(cus)+"&auto_advance=false&pending_invoice_items_behavior=include")
		legacy, _ := a.call(t, "POST", "/v1/invoices", "customer="+id(cus)+"&auto_advance=false", Header{"Stripe-Version", "2020-08-27"})
		// A draft that leaves the pending items alone stays free.
		a.must(t, 200, "POST", "/v1/invoices", "customer="+id(cus)+"&auto_advance=false&pending_invoice_items_behavior=exclude")

		// The operator's next invoice: the month's $1,000 less the credit.
		directPost(t, e, "/v1/invoiceitems", "customer="+id(cus)+"&amount=100000&currency=usd&description=plan")
		directPost(t, e, "/v1/invoices", "customer="+id(cus)+"&auto_advance=true&pending_invoice_items_behavior=include")
		e.Sim.Advance(3 * time.Hour)
		if moved := e.movedCents(); moved != 50000 {
			t.Fatalf("the next invoice charged %d cents; the operator billed 50000 (the credit was taken by the key's draft)", moved)
		}
		if include != 403 || legacy != 403 {
			t.Fatalf("drafts taking the pending items: %d (include), %d (Stripe-Version 2020-08-27, not sent); want 403", include, legacy)
		}
		if got := e.Spend(t, a.keyID).Total; got != 0 {
			t.Fatalf("spend %s", got)
		}
	})
}
