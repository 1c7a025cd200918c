package http_test

import "testing"

// TestAttackStripeRefunds_ApplicationFeeReturned: a refund with
// refund_application_fee=true also returns the charge's application fee
// (in proportion to the amount refunded) from the platform's balance to the
// connected account. keybrake priced the refund alone and settled it at the
// refund's amount, so the fee left the platform uncounted, while the same
// money through application_fees.refund is unpriced. It is refused now,
// on every refund path; false (the default) is forwarded as before.
func TestAttackStripeRefunds_ApplicationFeeReturned(t *testing.T) {
	e, u := MustOpenRecorded(t)
	a := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"]}`)
	// A charge the operator's own backend made, outside keybrake.
	_, ch := directPost(t, e, "/v1/charges", "amount=5000&currency=usd&source=tok_visa")
	mustRefuseUnforwarded(t, e, u, a.secret, "/v1/refunds", "charge="+id(ch)+"&amount=1000&refund_application_fee=true", "refund_application_fee")
	mustRefuseUnforwarded(t, e, u, a.secret, "/v1/refunds", "charge="+id(ch)+"&amount=1000&refund_application_fee=1", "refund_application_fee")
	mustRefuseUnforwarded(t, e, u, a.secret, "/v1/refunds", "charge="+id(ch)+"&amount=1000&refund_application_fee=", "refund_application_fee")
	mustRefuseUnforwarded(t, e, u, a.secret, "/v1/charges/"+id(ch)+"/refund", "amount=1000&refund_application_fee=true", "refund_application_fee")
	mustRefuseUnforwarded(t, e, u, a.secret, "/v1/charges/"+id(ch)+"/refunds", "amount=1000&refund_application_fee=true", "refund_application_fee")
	a.must(t, 200, "POST", "/v1/refunds", "charge="+id(ch)+"&amount=1000&refund_application_fee=false")
}
