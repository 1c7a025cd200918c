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

// TestAttackStripeTreasury_FeaturesReopenCardSpending: the features of a
// Treasury financial account decide which money can leave it without a
// request through keybrake: card_issuing lets the cards attached to it draw
// its funds (Stripe approves authorizations within the cards' spending
// controls), financial_addresses[aba] lets an outside party pull them by
// ACH debit. treasury.financial_accounts.update with features is unpriced,
// but POST /v1/treasury/financial_accounts/{id}/features, the same change,
// was free: an operator who had turned card_issuing off to stop the cards
// had it turned back on by a key without allow_unpriced. It is unpriced now
// unless it only turns features off.
func TestAttackStripeTreasury_FeaturesReopenCardSpending(t *testing.T) {
	e, u := MustOpenRecorded(t)
	a := newAttacker(t, e, `{"total_usd_cap":10,"allowed_endpoints":["*"]}`)
	for _, body := range []string{
		"card_issuing[requested]=true",
		"financial_addresses[aba][requested]=true",
		"intra_stripe_flows[requested]=true",
		"outbound_payments[ach][requested]=true",
		"card_issuing[requested]=false&outbound_transfers[us_domestic_wire][requested]=true",
		"card_issuing[requested]=",
		"card_issuing[requested]=1",
	} {
		before := u.writesUpstream()
		if status, v := a.call(t, "POST", "/v1/treasury/financial_accounts/fa_1/features", body); status != 403 {
			t.Errorf("features %q: %d %v, want the unpriced 403", body, status, v)
		}
		if n := u.writesUpstream() - before; n != 0 {
			t.Errorf("features %q: %d writes went upstream, want none", body, n)
		}
	}
	// Turning features off, or asking for deposit insurance, stays free.
	for _, body := range []string{
		"card_issuing[requested]=false&financial_addresses[aba][requested]=false",
		"deposit_insurance[requested]=true&expand[]=card_issuing",
	} {
		before := u.writesUpstream()
		a.call(t, "POST", "/v1/treasury/financial_accounts/fa_1/features", body)
		if u.writesUpstream() != before+1 {
			t.Errorf("features %q was not forwarded", body)
		}
	}
}
