package stripe

import "encoding/json"

// ReadErrorOutcome reads the payment intent a Stripe error answer carries
// (error.payment_intent: a confirmation that failed, such as a declined
// card on payment_intents.create with confirm=true). The intent outlives
// the error: unless it is canceled it is back in requires_payment_method
// and can be confirmed again with its client secret and another payment
// method, without keybrake, so its outcome is held (ReadOutcome). ok is
// false when the answer carries no payment intent with an amount.
func ReadErrorOutcome(body []byte) (o Outcome, ok bool) {
	var e struct {
		Error struct {
			PaymentIntent json.RawMessage `json:"payment_intent"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || len(e.Error.PaymentIntent) == 0 {
		return Outcome{}, false
	}
	o = ReadOutcome(e.Error.PaymentIntent)
	if !o.Known || o.Object != "payment_intent" {
		return Outcome{}, false
	}
	return o, true
}

// ReadOutcomeOf is ReadOutcome for the answer to operation op. The legacy
// refund, charges.refund, answers the charge rather than the refund, and a
// captured charge's amount is not what the refund moved: the answer is not
// Known, so the amount reserved for the refund stands. A charge it left
// uncaptured and refunded moved nothing, as ReadOutcome says.
func ReadOutcomeOf(op string, body []byte) Outcome {
	o := ReadOutcome(body)
	if op == "charges.refund" && o.Object == "charge" && o.State == OutcomeSettled {
		return Outcome{ID: o.ID, Object: o.Object}
	}
	return o
}
