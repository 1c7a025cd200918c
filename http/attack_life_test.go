package http_test

import (
	"testing"

	stripego "github.com/stripe/stripe-go/v82"
)

// Red-team of objects' lifecycles, races and idempotency (branch rt-life).

// payment_intents.confirm takes amount_to_confirm (Stripe API 2026-04-22,
// secret keys only): the intent is confirmed at that amount instead of its
// own, a surcharge added for one. keybrake settled a confirm against the
// intent's hold without reading it, and priced an intent it did not hold
// at its looked-up amount: a $25 key held $10 and confirmed $1,000.00,
// which the answer then counted in full (ALARM) after it had moved.
func TestAttackLife_AmountToConfirm(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":25,"allowed_endpoints":["*"]}`)
		held := a.must(t, 200, "POST", "/v1/payment_intents", "amount=1000&currency=usd&payment_method=pm_card_visa")
		a.must(t, 429, "POST", "/v1/payment_intents/"+id(held)+"/confirm", "amount_to_confirm=100000")
		// An intent made outside keybrake: nothing held, priced by lookup.
		outside, err := e.Direct().V1PaymentIntents.Create(t.Context(), &stripego.PaymentIntentCreateParams{
			Amount: stripego.Int64(500), Currency: stripego.String("usd"), PaymentMethod: stripego.String("pm_card_visa")})
		if err != nil {
			t.Fatal(err)
		}
		a.must(t, 429, "POST", "/v1/payment_intents/"+outside.ID+"/confirm", "amount_to_confirm=100000")
		a.wantMoneyComplete(t, 2500)
		// Within the cap it is a raise like any other, counted first.
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(held)+"/confirm", "amount_to_confirm=1500")
		if got := a.e.Spend(t, a.keyID).Total; got != 15_000_000 {
			t.Fatalf("counted %s after confirming $15.00 of a $10.00 hold", got)
		}
		a.wantMoneyComplete(t, 2500)
	})
}
