package stripesim

import (
	"net/http"
	"slices"
	"strings"

	"github.com/keybrake/keybrake/stripe"
)

// PaymentIntent statuses.
const (
	piRequiresPaymentMethod = "requires_payment_method"
	piRequiresConfirmation  = "requires_confirmation"
	piRequiresAction        = "requires_action"
	piRequiresCapture       = "requires_capture"
	piProcessing            = "processing"
	piSucceeded             = "succeeded"
	piCanceled              = "canceled"
)

// Parameters PaymentIntent endpoints accept and ignore beyond those they use.
var piIgnored = []string{"receipt_email", "statement_descriptor", "statement_descriptor_suffix",
	"setup_future_usage", "off_session", "return_url", "transfer_group", "on_behalf_of",
	"application_fee_amount", "transfer_data", "error_on_requires_action", "use_stripe_sdk",
	"mandate_data", "shipping", "payment_method_options", "payment_method_types"}

// createPaymentIntent serves POST /v1/payment_intents, confirming at once
// when confirm=true.
func createPaymentIntent(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, append([]string{"amount", "currency", "customer", "payment_method", "confirm",
		"capture_method", "confirmation_method", "description", "metadata", "automatic_payment_methods"},
		piIgnored...)...); aerr != nil {
		return nil, aerr
	}
	amount, aerr := requiredAmount(f, "amount")
	if aerr != nil {
		return nil, aerr
	}
	currency, aerr := currencyParam(f)
	if aerr != nil {
		return nil, aerr
	}
	if aerr := checkAmount("amount", amount, currency, true); aerr != nil {
		return nil, aerr
	}
	pi := &PaymentIntent{ID: newID("pi"), Object: "payment_intent", Amount: amount, Currency: currency,
		Created: c.now.Unix(), CaptureMethod: "automatic_async", ConfirmationMethod: "automatic",
		PaymentMethodTypes: []string{"card"}, Status: piRequiresPaymentMethod, Account: c.account}
	pi.ClientSecret = pi.ID + "_secret_" + newID("s")[2:]
	if aerr := setCaptureMethod(f, pi); aerr != nil {
		return nil, aerr
	}
	if pi.ConfirmationMethod, aerr = optional(f, "confirmation_method"); aerr != nil {
		return nil, aerr
	} else if pi.ConfirmationMethod == "" {
		pi.ConfirmationMethod = "automatic"
	} else if pi.ConfirmationMethod != "automatic" && pi.ConfirmationMethod != "manual" {
		return nil, invalid("", "confirmation_method", "Invalid confirmation_method: must be one of automatic or manual")
	}
	if pi.Description, aerr = optional(f, "description"); aerr != nil {
		return nil, aerr
	}
	md, aerr := metadataParam(f)
	if aerr != nil {
		return nil, aerr
	}
	pi.Metadata = mergeMetadata(nil, md)
	if aerr := setCustomer(s, c, pi); aerr != nil {
		return nil, aerr
	}
	if aerr := setPaymentMethod(f, pi); aerr != nil {
		return nil, aerr
	}
	confirm, aerr := boolParam(f, "confirm", false)
	if aerr != nil {
		return nil, aerr
	}
	if confirm && pi.PaymentMethod == "" {
		return nil, errMissingPaymentMethod()
	}
	s.st.PaymentIntents = append(s.st.PaymentIntents, pi)
	s.st.paymentIntents[pi.ID] = pi
	s.st.Owners[pi.ID] = c.scope
	if confirm {
		if aerr := s.confirm(c, pi); aerr != nil {
			return nil, aerr
		}
	}
	return pi, nil
}

func setCaptureMethod(f *stripe.Form, pi *PaymentIntent) *apiError {
	cm, aerr := optional(f, "capture_method")
	if aerr != nil || cm == "" {
		return aerr
	}
	if cm != "automatic" && cm != "automatic_async" && cm != "manual" {
		return invalid("", "capture_method", "Invalid capture_method: must be one of automatic, automatic_async, or manual")
	}
	pi.CaptureMethod = cm
	return nil
}

func setCustomer(s *Server, c *call, pi *PaymentIntent) *apiError {
	cus, aerr := optional(c.form, "customer")
	if aerr != nil || cus == "" {
		return aerr
	}
	if _, ok := lookup(s.st, s.st.customers, c.scope, cus); !ok {
		return errNoSuch(http.StatusBadRequest, "customer", "customer", cus)
	}
	pi.Customer = cus
	return nil
}

// setPaymentMethod attaches payment_method, moving the PaymentIntent to
// requires_confirmation.
func setPaymentMethod(f *stripe.Form, pi *PaymentIntent) *apiError {
	pm, aerr := optional(f, "payment_method")
	if aerr != nil || pm == "" {
		return aerr
	}
	if !knownCard("payment_method", pm) {
		return errNoSuchCard("payment_method", pm)
	}
	pi.PaymentMethod = pm
	if pi.Status == piRequiresPaymentMethod {
		pi.Status = piRequiresConfirmation
	}
	return nil
}

func errMissingPaymentMethod() *apiError {
	return invalid("payment_intent_unexpected_state", "payment_method",
		"You cannot confirm this PaymentIntent because it's missing a payment method. "+
			"Update the PaymentIntent with a payment method and then confirm it again.")
}

func errPIState(verb string, pi *PaymentIntent, allowed ...string) *apiError {
	return errUnexpectedState("payment_intent_unexpected_state",
		"You cannot %s this PaymentIntent because it has a status of %s. Only a PaymentIntent with one of the following statuses may be %s: %s.",
		verb, pi.Status, pastTense(verb), strings.Join(allowed, ", "))
}

func pastTense(verb string) string {
	if strings.HasSuffix(verb, "e") {
		return verb + "d"
	}
	return verb + "ed"
}

// confirm charges the PaymentIntent's payment method. A decline leaves the
// failed charge in place, puts the PaymentIntent back to
// requires_payment_method and answers 402 with the PaymentIntent embedded.
func (s *Server) confirm(c *call, pi *PaymentIntent) *apiError {
	ch, decline := s.newCharge(c, chargeSpec{amount: pi.Amount, currency: pi.Currency, customer: pi.Customer,
		card: pi.PaymentMethod, description: pi.Description, metadata: pi.Metadata,
		capture: pi.CaptureMethod != "manual", paymentIntent: pi.ID})
	pi.LatestCharge = ch.ID
	if decline != "" {
		aerr := declineError(ch, decline)
		pi.Status = piRequiresPaymentMethod
		pi.PaymentMethod = ""
		pi.LastPaymentError = &PaymentError{Type: typeCard, Code: aerr.Code, DeclineCode: decline,
			Message: aerr.Message, Charge: ch.ID}
		snapshot := *pi
		aerr.PaymentIntent = &snapshot
		return aerr
	}
	pi.LastPaymentError = nil
	if pi.CaptureMethod == "manual" {
		pi.Status, pi.AmountCapturable = piRequiresCapture, pi.Amount
	} else {
		pi.Status, pi.AmountReceived = piSucceeded, pi.Amount
	}
	return nil
}

// retrievePaymentIntent serves GET /v1/payment_intents/{id}.
func retrievePaymentIntent(s *Server, c *call) (any, *apiError) {
	if aerr := allow(c.form, "client_secret"); aerr != nil {
		return nil, aerr
	}
	pi, aerr := s.paymentIntent(c)
	if aerr != nil {
		return nil, aerr
	}
	if secret, ok, aerr := str(c.form, "client_secret"); aerr != nil {
		return nil, aerr
	} else if ok {
		if aerr := checkClientSecret(pi, secret); aerr != nil {
			return nil, aerr
		}
	}
	return pi, nil
}

func (s *Server) paymentIntent(c *call) (*PaymentIntent, *apiError) {
	pi, ok := lookup(s.st, s.st.paymentIntents, c.scope, c.id)
	if !ok {
		return nil, errNoSuch(http.StatusNotFound, "payment_intent", "id", c.id)
	}
	return pi, nil
}

// updatePaymentIntent serves POST /v1/payment_intents/{id}. The amount,
// currency and payment method change only before confirmation.
func updatePaymentIntent(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, append([]string{"amount", "currency", "customer", "payment_method",
		"capture_method", "description", "metadata"}, piIgnored...)...); aerr != nil {
		return nil, aerr
	}
	pi, aerr := s.paymentIntent(c)
	if aerr != nil {
		return nil, aerr
	}
	upd := *pi // validate everything on a copy, then commit at once
	editable := []string{piRequiresPaymentMethod, piRequiresConfirmation, piRequiresAction}
	if f.Has("amount") || f.Has("currency") || f.Has("payment_method") || f.Has("capture_method") {
		if !slices.Contains(editable, pi.Status) {
			return nil, errPIState("update", pi, editable...)
		}
	}
	if n, ok, aerr := amountParam(f, "amount"); aerr != nil {
		return nil, aerr
	} else if ok {
		upd.Amount = n
	}
	if f.Has("currency") {
		if upd.Currency, aerr = currencyParam(f); aerr != nil {
			return nil, aerr
		}
	}
	if f.Has("amount") || f.Has("currency") {
		if aerr := checkAmount("amount", upd.Amount, upd.Currency, true); aerr != nil {
			return nil, aerr
		}
	}
	if aerr := setCaptureMethod(f, &upd); aerr != nil {
		return nil, aerr
	}
	if f.Has("description") {
		if upd.Description, aerr = optional(f, "description"); aerr != nil {
			return nil, aerr
		}
	}
	if md, aerr := metadataParam(f); aerr != nil {
		return nil, aerr
	} else if v, _ := f.Tree["metadata"].(string); f.Has("metadata") && v == "" && len(md) == 0 {
		upd.Metadata = map[string]string{}
	} else if md != nil {
		upd.Metadata = mergeMetadata(pi.Metadata, md)
	}
	if aerr := setCustomer(s, c, &upd); aerr != nil {
		return nil, aerr
	}
	if aerr := setPaymentMethod(f, &upd); aerr != nil {
		return nil, aerr
	}
	*pi = upd
	return pi, nil
}

// confirmPaymentIntent serves POST /v1/payment_intents/{id}/confirm, with
// the secret key or, from a browser, with a publishable key and the
// client_secret; a client_secret sent must match either way. The secret
// key may send amount_to_confirm: that amount, not the intent's, is
// confirmed (a surcharge), and becomes the intent's amount.
func confirmPaymentIntent(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, append([]string{"payment_method", "capture_method", "client_secret", "amount_to_confirm"}, piIgnored...)...); aerr != nil {
		return nil, aerr
	}
	pi, aerr := s.paymentIntent(c)
	if aerr != nil {
		return nil, aerr
	}
	if secret, ok, aerr := str(f, "client_secret"); aerr != nil {
		return nil, aerr
	} else if ok {
		if aerr := checkClientSecret(pi, secret); aerr != nil {
			return nil, aerr
		}
	}
	confirmable := []string{piRequiresPaymentMethod, piRequiresConfirmation, piRequiresAction}
	if !slices.Contains(confirmable, pi.Status) {
		return nil, errPIState("confirm", pi, confirmable...)
	}
	upd := *pi
	if n, ok, aerr := amountParam(f, "amount_to_confirm"); aerr != nil {
		return nil, aerr
	} else if ok {
		if f.Has("client_secret") {
			return nil, invalid("", "amount_to_confirm", "amount_to_confirm can only be sent with a secret key.")
		}
		if aerr := checkAmount("amount_to_confirm", n, upd.Currency, true); aerr != nil {
			return nil, aerr
		}
		upd.Amount = n
	}
	if aerr := setCaptureMethod(f, &upd); aerr != nil {
		return nil, aerr
	}
	if aerr := setPaymentMethod(f, &upd); aerr != nil {
		return nil, aerr
	}
	if upd.PaymentMethod == "" {
		return nil, errMissingPaymentMethod()
	}
	*pi = upd
	if aerr := s.confirm(c, pi); aerr != nil {
		return nil, aerr
	}
	return pi, nil
}

// capturePaymentIntent serves POST /v1/payment_intents/{id}/capture, for
// all or part (amount_to_capture) of an authorised amount.
func capturePaymentIntent(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "amount_to_capture", "metadata", "application_fee_amount", "statement_descriptor",
		"statement_descriptor_suffix", "final_capture", "transfer_data"); aerr != nil {
		return nil, aerr
	}
	pi, aerr := s.paymentIntent(c)
	if aerr != nil {
		return nil, aerr
	}
	if pi.Status != piRequiresCapture {
		return nil, errPIState("capture", pi, piRequiresCapture)
	}
	amount := pi.AmountCapturable
	if n, ok, aerr := amountParam(f, "amount_to_capture"); aerr != nil {
		return nil, aerr
	} else if ok {
		if n > pi.AmountCapturable {
			return nil, invalid("amount_too_large", "amount_to_capture",
				"The amount_to_capture (%d) must be less than or equal to the amount_capturable (%d).", n, pi.AmountCapturable)
		}
		if aerr := checkAmount("amount_to_capture", n, pi.Currency, false); aerr != nil {
			return nil, aerr
		}
		amount = n
	}
	md, aerr := metadataParam(f)
	if aerr != nil {
		return nil, aerr
	}
	if md != nil {
		pi.Metadata = mergeMetadata(pi.Metadata, md)
	}
	if ch := s.st.charges[pi.LatestCharge]; ch != nil {
		captureLocked(ch, amount)
	}
	pi.Status, pi.AmountReceived, pi.AmountCapturable = piSucceeded, amount, 0
	return pi, nil
}

// cancelPaymentIntent serves POST /v1/payment_intents/{id}/cancel. An
// uncaptured authorisation is released: its charge is refunded in full.
func cancelPaymentIntent(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "cancellation_reason"); aerr != nil {
		return nil, aerr
	}
	pi, aerr := s.paymentIntent(c)
	if aerr != nil {
		return nil, aerr
	}
	cancelable := []string{piRequiresPaymentMethod, piRequiresCapture, piRequiresConfirmation, piRequiresAction, piProcessing}
	if !slices.Contains(cancelable, pi.Status) {
		return nil, errPIState("cancel", pi, cancelable...)
	}
	reason, aerr := optional(f, "cancellation_reason")
	if aerr != nil {
		return nil, aerr
	}
	switch reason {
	case "", "duplicate", "fraudulent", "requested_by_customer", "abandoned":
	default:
		return nil, invalid("", "cancellation_reason",
			"Invalid cancellation_reason: must be one of duplicate, fraudulent, requested_by_customer, or abandoned")
	}
	if pi.Status == piRequiresCapture {
		if ch := s.st.charges[pi.LatestCharge]; ch != nil {
			releaseLocked(ch)
		}
	}
	pi.Status, pi.CancellationReason, pi.CanceledAt, pi.AmountCapturable = piCanceled, reason, c.now.Unix(), 0
	return pi, nil
}

// incrementAuthorization serves POST
// /v1/payment_intents/{id}/increment_authorization: amount is the new total
// to hold, above the current amount, on a manual-capture PaymentIntent that
// requires capture. Its charge's amount grows with it, as on Stripe.
func incrementAuthorization(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "amount", "description", "metadata", "statement_descriptor",
		"application_fee_amount", "transfer_data"); aerr != nil {
		return nil, aerr
	}
	pi, aerr := s.paymentIntent(c)
	if aerr != nil {
		return nil, aerr
	}
	if pi.Status != piRequiresCapture || pi.CaptureMethod != "manual" {
		return nil, errUnexpectedState("payment_intent_unexpected_state",
			"You cannot increment the authorization of this PaymentIntent because it has a status of %s and capture_method %s. "+
				"Only a PaymentIntent with capture_method manual and status requires_capture may have its authorization incremented.",
			pi.Status, pi.CaptureMethod)
	}
	amount, aerr := requiredAmount(f, "amount")
	if aerr != nil {
		return nil, aerr
	}
	if amount <= pi.Amount {
		return nil, invalid("", "amount",
			"The amount (%d) must be greater than the PaymentIntent's current amount (%d): it is the new total to authorize.", amount, pi.Amount)
	}
	if aerr := checkAmount("amount", amount, pi.Currency, true); aerr != nil {
		return nil, aerr
	}
	upd := *pi
	if f.Has("description") {
		if upd.Description, aerr = optional(f, "description"); aerr != nil {
			return nil, aerr
		}
	}
	md, aerr := metadataParam(f)
	if aerr != nil {
		return nil, aerr
	}
	if md != nil {
		upd.Metadata = mergeMetadata(pi.Metadata, md)
	}
	upd.Amount, upd.AmountCapturable = amount, amount
	*pi = upd
	if ch := s.st.charges[pi.LatestCharge]; ch != nil {
		ch.Amount = amount
	}
	return pi, nil
}
