package stripe

import "encoding/json"

// Outcome states: what an upstream object says about its money.
const (
	OutcomeSettled  = "settled"  // money moved: Amount is what moved
	OutcomeHeld     = "held"     // money can still move without another request through keybrake: Amount is the most that can
	OutcomeReleased = "released" // the object ended without moving money
)

// Outcome is what a Stripe object in a 2xx answer says about the money of
// the request that produced it.
type Outcome struct {
	State    string // OutcomeSettled, OutcomeHeld or OutcomeReleased
	Object   string // the object type: "payment_intent", "charge", "refund", …
	ID       string
	Amount   int64 // in minor units of Currency; see State
	Currency string
	Known    bool // false when the body carried no amount and currency: the reserved amount stands
}

// wireObject is the part of a Stripe object ReadOutcome reads.
type wireObject struct {
	ID               string `json:"id"`
	Object           string `json:"object"`
	Status           string `json:"status"`
	Amount           *int64 `json:"amount"`
	AmountCapturable int64  `json:"amount_capturable"`
	AmountReceived   int64  `json:"amount_received"`
	AmountCaptured   *int64 `json:"amount_captured"`
	Captured         *bool  `json:"captured"`
	Refunded         bool   `json:"refunded"`
	Currency         string `json:"currency"`
}

// ReadOutcome reads the money an object in a 2xx answer moved, or can still
// move:
//
//   - a payment intent that succeeded moved amount_received; one canceled
//     moved amount_received (zero: released); any other status
//     (requires_payment_method, requires_confirmation, requires_action,
//     processing, requires_capture) can still move the larger of amount and
//     amount_capturable, with its client secret or a capture: held.
//   - a charge that failed moved nothing; an uncaptured one that is not
//     refunded (its authorization is alive) is held at its amount, one
//     refunded before capture is released; a captured one moved
//     amount_captured (its amount when the field is absent).
//   - any other object with an amount (refund, transfer, payout) moved it.
//
// An object without an amount and a currency is not Known: the caller keeps
// what it reserved.
func ReadOutcome(body []byte) Outcome {
	var o wireObject
	if err := json.Unmarshal(body, &o); err != nil || o.Amount == nil || o.Currency == "" {
		return Outcome{ID: o.ID, Object: o.Object}
	}
	out := Outcome{Object: o.Object, ID: o.ID, Currency: o.Currency, Amount: *o.Amount, Known: true, State: OutcomeSettled}
	switch o.Object {
	case "payment_intent":
		switch o.Status {
		case "succeeded":
			out.Amount = o.AmountReceived
		case "canceled":
			out.Amount = o.AmountReceived
			if out.Amount == 0 {
				out.State = OutcomeReleased
			}
		default:
			out.State = OutcomeHeld
			out.Amount = max(*o.Amount, o.AmountCapturable)
		}
	case "charge":
		switch {
		case o.Status == "failed":
			out.State, out.Amount = OutcomeReleased, 0
		case o.Captured != nil && !*o.Captured && o.Refunded:
			out.State, out.Amount = OutcomeReleased, 0
		case o.Captured != nil && !*o.Captured:
			out.State = OutcomeHeld
		case o.AmountCaptured != nil:
			out.Amount = *o.AmountCaptured
		}
	}
	return out
}

// HoldsObject reports whether op acts on an existing object whose money
// keybrake holds, so it settles against the object's hold rather than
// pricing anew: confirming, updating, capturing, canceling a payment intent
// or incrementing its authorization, and capturing a charge. Such requests
// are serialised per object (HoldService.LockObject).
func HoldsObject(op Operation) bool {
	switch op.Name {
	case "payment_intents.confirm", "payment_intents.update", "payment_intents.capture",
		"payment_intents.cancel", "payment_intents.increment_authorization", "charges.capture":
		return op.ID != ""
	}
	return false
}

// Raises reports whether op with form can raise what its object can move:
// an update that sets amount or currency, an increment of an authorization,
// a confirmation at another amount than the intent's (amount_to_confirm).
func Raises(op Operation, form *Form) bool {
	switch op.Name {
	case "payment_intents.update":
		return form != nil && (form.Has("amount") || form.Has("currency"))
	case "payment_intents.confirm":
		return form != nil && form.Has(amountToConfirm)
	case "payment_intents.increment_authorization":
		return true
	}
	return false
}

// amountToConfirm is the confirm parameter (API 2026-04-22, secret keys
// only) that confirms an intent at another amount than its own, a
// surcharge added for one: the intent then moves that amount.
const amountToConfirm = "amount_to_confirm"

// MadeBy returns the operation that creates the object an operation on an
// existing money object (HoldsObject) acts on: payment_intents.create for
// every write to a payment intent, charges.create for charges.capture; ""
// for any other. A policy bounding what the creation makes movable must
// also bound what a later write raises it to.
func MadeBy(name string) string {
	switch name {
	case "payment_intents.confirm", "payment_intents.update", "payment_intents.capture",
		"payment_intents.cancel", "payment_intents.increment_authorization":
		return "payment_intents.create"
	case "charges.capture":
		return "charges.create"
	}
	return ""
}
