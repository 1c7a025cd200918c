package http

import (
	"fmt"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

// LeftoverTeller is a Vendor whose refusals (4xx) may leave behind an
// object that can still move money without keybrake: Stripe answers a
// declined payment_intents.create with confirm=true 402, but the intent
// exists and its client secret confirms it again with another card. Such a
// refusal is not a release: the request path and the resolver settle the
// reservation as the object's hold.
type LeftoverTeller interface {
	// Leftover reads a 4xx answer: the outcome of the object it left
	// behind, ok=false when it left none.
	Leftover(req *VendorRequest, body []byte) (out VendorOutcome, ok bool)
}

var _ LeftoverTeller = (*stripeVendor)(nil)

// Leftover reads the payment intent a Stripe error carries
// (stripe.ReadErrorOutcome).
func (v *stripeVendor) Leftover(req *VendorRequest, body []byte) (VendorOutcome, bool) {
	return v.s.stripeLeftover(body)
}

// stripeLeftover is Leftover for the request path and the resolver.
func (s *Server) stripeLeftover(body []byte) (VendorOutcome, bool) {
	o, ok := stripe.ReadErrorOutcome(body)
	if !ok {
		return VendorOutcome{}, false
	}
	out := stripeOutcome(s.Rates, o)
	if out.State == keybrake.StateReleased {
		return VendorOutcome{}, false
	}
	return out, true
}

// leftoverReason is the audit reason of a refusal that left a money object
// behind.
func leftoverReason(status int, reason string) string {
	return fmt.Sprintf("upstream answered %d but the object stays: %s", status, reason)
}
