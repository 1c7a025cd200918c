package stripesim

import (
	"net/http"
	"time"
)

// authorizationWindow is how long an uncaptured card authorization holds the
// money before Stripe releases it.
const authorizationWindow = 7 * 24 * time.Hour

// An authorization, an uncaptured charge, moves through these states:
//
//	authorized --capture(amount)--> captured (amount_captured = amount; the rest released into amount_refunded)
//	authorized --cancel PaymentIntent--> released (refunded, amount_refunded = amount)
//	authorized --7 days pass--> released (refunded, amount_refunded = amount; its PaymentIntent canceled, reason automatic)
//
// A released authorization keeps status succeeded and captured false, as on
// Stripe. The functions below follow the same order.

// captureLocked captures amount of the authorization ch and releases the
// rest, as Stripe reports a partial capture: the uncaptured remainder is
// counted in amount_refunded.
func captureLocked(ch *Charge, amount int64) {
	ch.Captured, ch.AmountCaptured = true, amount
	ch.AmountRefunded += ch.Amount - amount
	ch.Refunded = ch.AmountRefunded >= ch.Amount
}

// releaseLocked releases the whole authorization ch.
func releaseLocked(ch *Charge) {
	ch.AmountRefunded, ch.Refunded = ch.Amount, true
}

// expireAuthorizationsLocked releases the authorizations older than
// authorizationWindow at now, and cancels their PaymentIntents. The caller
// holds s.mu.
func (s *Server) expireAuthorizationsLocked(now time.Time) {
	for id, ch := range s.st.uncaptured {
		if !authorized(ch) {
			delete(s.st.uncaptured, id)
			continue
		}
		expires := time.Unix(ch.Created, 0).Add(authorizationWindow)
		if now.Before(expires) {
			continue
		}
		releaseLocked(ch)
		delete(s.st.uncaptured, id)
		if pi := s.st.paymentIntents[ch.PaymentIntent]; pi != nil && pi.Status == piRequiresCapture && pi.LatestCharge == ch.ID {
			pi.Status, pi.CancellationReason, pi.CanceledAt, pi.AmountCapturable = piCanceled, "automatic", expires.Unix(), 0
		}
	}
}

// authorized reports whether ch holds money that can still be captured.
func authorized(ch *Charge) bool {
	return ch.Status == "succeeded" && !ch.Captured && !ch.Refunded
}

// captureCharge serves POST /v1/charges/{id}/capture: all of an
// authorization, or part of it (amount), the rest being released. A charge
// of a PaymentIntent is captured through its PaymentIntent, which succeeds.
func captureCharge(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "amount", "application_fee", "application_fee_amount", "receipt_email",
		"statement_descriptor", "statement_descriptor_suffix", "transfer_data", "transfer_group"); aerr != nil {
		return nil, aerr
	}
	ch, ok := lookup(s.st, s.st.charges, c.scope, c.id)
	if !ok {
		return nil, errNoSuch(http.StatusNotFound, "charge", "id", c.id)
	}
	switch {
	case ch.Captured:
		return nil, invalid("charge_already_captured", "", "Charge %s has already been captured.", ch.ID)
	case ch.Status != "succeeded":
		return nil, invalid("", "", "Charge %s cannot be captured because its status is %s.", ch.ID, ch.Status)
	case ch.Refunded:
		return nil, invalid("charge_expired_for_capture", "",
			"Charge %s cannot be captured: its authorization was released or has expired.", ch.ID)
	}
	amount := ch.Amount
	if n, ok, aerr := amountParam(f, "amount"); aerr != nil {
		return nil, aerr
	} else if ok {
		if n > ch.Amount {
			return nil, invalid("amount_too_large", "amount",
				"The amount to capture (%d) must be less than or equal to the original amount (%d).", n, ch.Amount)
		}
		if aerr := checkAmount("amount", n, ch.Currency, false); aerr != nil {
			return nil, aerr
		}
		amount = n
	}
	captureLocked(ch, amount)
	if pi := s.st.paymentIntents[ch.PaymentIntent]; pi != nil && pi.Status == piRequiresCapture {
		pi.Status, pi.AmountReceived, pi.AmountCapturable = piSucceeded, amount, 0
	}
	return ch, nil
}
