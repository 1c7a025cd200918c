package stripesim

import (
	"net/http"
	"strings"
)

// testCards maps Stripe's test tokens and test payment methods to the issuer
// decline code they produce, "" for a card that succeeds.
var testCards = map[string]string{
	"tok_visa": "", "tok_visa_debit": "", "tok_mastercard": "", "tok_amex": "", "tok_discover": "",
	"tok_chargeDeclined":                  "generic_decline",
	"tok_chargeDeclinedInsufficientFunds": "insufficient_funds",
	"tok_chargeDeclinedFraudulent":        "fraudulent",
	"tok_chargeDeclinedLostCard":          "lost_card",
	"tok_chargeDeclinedStolenCard":        "stolen_card",
	"pm_card_visa":                        "", "pm_card_visa_debit": "", "pm_card_mastercard": "", "pm_card_amex": "", "pm_card_discover": "",
	"pm_card_chargeDeclined":                  "generic_decline",
	"pm_card_chargeDeclinedInsufficientFunds": "insufficient_funds",
	"pm_card_chargeDeclinedFraudulent":        "fraudulent",
	"pm_card_chargeDeclinedLostCard":          "lost_card",
	"pm_card_chargeDeclinedStolenCard":        "stolen_card",
	// A verified US bank account (ACH debit, legacy Charges API): the
	// charge is accepted "pending", as on Stripe, until the bank settles it.
	"btok_us_verified": "",
}

// bankSource reports whether src is a bank account token: its charge is
// pending, not succeeded, and cannot be left uncaptured.
func bankSource(src string) bool { return strings.HasPrefix(src, "btok_") }

// defaultCard is what a customer without a saved card pays with.
const defaultCard = "tok_visa"

// declineMessages are the messages Stripe shows the customer per decline code.
var declineMessages = map[string]string{
	"generic_decline":    "Your card was declined.",
	"insufficient_funds": "Your card has insufficient funds.",
	"fraudulent":         "Your card was declined.",
	"lost_card":          "Your card was declined.",
	"stolen_card":        "Your card was declined.",
}

// knownCard reports whether src is a test token or payment method the
// simulator knows, accepting only the kind its parameter takes.
func knownCard(param, src string) bool {
	_, ok := testCards[src]
	if param == "payment_method" {
		return ok && strings.HasPrefix(src, "pm_")
	}
	return ok && (strings.HasPrefix(src, "tok_") || bankSource(src))
}

func errNoSuchCard(param, src string) *apiError {
	kind := "token"
	if param == "payment_method" {
		kind = "PaymentMethod"
	}
	return errNoSuch(http.StatusBadRequest, kind, param, src)
}

// authorize returns the outcome of charging card, and the decline code when
// the issuer declines it.
func authorize(card string) (*Outcome, string) {
	code := testCards[card]
	if code == "" {
		return &Outcome{NetworkStatus: "approved_by_network", RiskLevel: "normal", RiskScore: 32,
			SellerMessage: "Payment complete.", Type: "authorized"}, ""
	}
	msg := "The bank returned the decline code `" + code + "`."
	if code == "generic_decline" {
		msg = "The bank did not return any further details with this decline."
	}
	return &Outcome{NetworkStatus: "declined_by_network", Reason: code, RiskLevel: "normal", RiskScore: 32,
		SellerMessage: msg, Type: "issuer_declined"}, code
}

// declineError is the 402 card_error naming the failed charge.
func declineError(ch *Charge, declineCode string) *apiError {
	e := newError(http.StatusPaymentRequired, typeCard, "card_declined", "", "%s", declineMessages[declineCode])
	e.DeclineCode = declineCode
	e.Charge = ch.ID
	return e
}
