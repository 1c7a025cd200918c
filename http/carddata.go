package http

import (
	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

// refuseCardData returns EINVALID naming the parameter when form carries
// raw card or bank account data (stripe.CardData). The proxy calls it right
// after parsing, so such a request is neither stored (a reservation keeps
// the body it forwards) nor forwarded: keybrake stays out of PCI scope, as
// Stripe keeps secret-key integrations out of it by refusing raw card
// numbers by default.
func refuseCardData(form *stripe.Form) error {
	param, found := stripe.CardData(form)
	if !found {
		return nil
	}
	return keybrake.ErrorParam(param, "keybrake does not accept raw card data: %s carries a card number, card security code or bank account number. Collect payment details client-side with Stripe.js or Elements and send the token or PaymentMethod it creates (tok_…, pm_…); Stripe itself refuses raw card numbers from secret-key integrations by default. Nothing was stored or sent to Stripe.", param)
}
