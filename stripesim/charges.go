package stripesim

import "net/http"

// chargeSpec is what a new charge needs, from POST /v1/charges or from the
// confirmation of a PaymentIntent.
type chargeSpec struct {
	amount        int64
	currency      string
	customer      string
	card          string // test token or payment method
	description   string
	metadata      map[string]string
	capture       bool
	paymentIntent string
}

// newCharge records a charge, declined or not: a declined charge exists with
// status failed, as on Stripe. The caller holds s.mu.
func (s *Server) newCharge(c *call, spec chargeSpec) (*Charge, string) {
	outcome, decline := authorize(spec.card)
	ch := &Charge{
		ID: newID("ch"), Object: "charge", Amount: spec.amount, Currency: spec.currency,
		Created: c.now.Unix(), Customer: spec.customer, Description: spec.description,
		Metadata: mergeMetadata(nil, spec.metadata), Outcome: outcome, PaymentIntent: spec.paymentIntent,
		PaymentMethod: spec.card, Account: c.account,
	}
	if spec.paymentIntent == "" {
		ch.PaymentMethod = newID("card")
	}
	switch {
	case bankSource(spec.card):
		// A bank debit is accepted, not yet paid: pending until the bank
		// settles it (days later on Stripe; the simulator never does).
		ch.PaymentMethod = newID("ba")
		ch.Status, ch.Captured, ch.AmountCaptured = "pending", true, spec.amount
	case decline != "":
		ch.Status = "failed"
		ch.FailureCode = "card_declined"
		ch.FailureMessage = declineMessages[decline]
	default:
		ch.Status, ch.Paid, ch.Captured = "succeeded", true, spec.capture
		if spec.capture {
			ch.AmountCaptured = spec.amount
		}
	}
	s.st.Charges = append(s.st.Charges, ch)
	s.st.charges[ch.ID] = ch
	if authorized(ch) {
		s.st.uncaptured[ch.ID] = ch
	}
	s.st.Owners[ch.ID] = c.scope
	return ch, decline
}

// createCharge serves POST /v1/charges.
func createCharge(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "amount", "currency", "customer", "source", "description", "metadata", "capture",
		"receipt_email", "statement_descriptor", "statement_descriptor_suffix", "transfer_group",
		"on_behalf_of", "application_fee_amount", "shipping", "transfer_data", "radar_options"); aerr != nil {
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
	spec := chargeSpec{amount: amount, currency: currency}
	if spec.metadata, aerr = metadataParam(f); aerr != nil {
		return nil, aerr
	}
	if spec.description, aerr = optional(f, "description"); aerr != nil {
		return nil, aerr
	}
	if spec.capture, aerr = boolParam(f, "capture", true); aerr != nil {
		return nil, aerr
	}
	if spec.customer, aerr = optional(f, "customer"); aerr != nil {
		return nil, aerr
	}
	var cus *Customer
	if spec.customer != "" {
		var ok bool
		if cus, ok = lookup(s.st, s.st.customers, c.scope, spec.customer); !ok {
			return nil, errNoSuch(http.StatusBadRequest, "customer", "customer", spec.customer)
		}
	}
	if spec.card, aerr = optional(f, "source"); aerr != nil {
		return nil, aerr
	}
	switch {
	case spec.card != "" && !knownCard("source", spec.card):
		return nil, errNoSuchCard("source", spec.card)
	case spec.card == "" && cus == nil:
		return nil, invalid("parameter_missing", "source", "Must provide source or customer.")
	case spec.card == "" && cus.DefaultSource != "":
		spec.card = cus.DefaultSource
	case spec.card == "":
		spec.card = defaultCard
	}
	if bankSource(spec.card) && !spec.capture {
		return nil, invalid("", "capture", "A charge on a bank account cannot be uncaptured: remove capture=false.")
	}
	ch, decline := s.newCharge(c, spec)
	if decline != "" {
		return nil, declineError(ch, decline)
	}
	return ch, nil
}

// updateCharge serves POST /v1/charges/{id}: its description and
// metadata (a key sent empty is unset, metadata= clears them all, as on
// Stripe). Its amount is not editable.
func updateCharge(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "description", "metadata", "receipt_email"); aerr != nil {
		return nil, aerr
	}
	ch, ok := lookup(s.st, s.st.charges, c.scope, c.id)
	if !ok {
		return nil, errNoSuch(http.StatusNotFound, "charge", "id", c.id)
	}
	upd := *ch
	if v, sent, aerr := str(f, "description"); aerr != nil {
		return nil, aerr
	} else if sent {
		upd.Description = v
	}
	if _, _, aerr := str(f, "receipt_email"); aerr != nil {
		return nil, aerr
	}
	md, aerr := metadataParam(f)
	if aerr != nil {
		return nil, aerr
	}
	if _, cleared := f.Tree["metadata"].(string); cleared { // metadata= (metadataParam refused any other string)
		upd.Metadata = map[string]string{}
	} else if md != nil {
		upd.Metadata = mergeMetadata(ch.Metadata, md)
	}
	*ch = upd
	return ch, nil
}

// retrieveCharge serves GET /v1/charges/{id}.
func retrieveCharge(s *Server, c *call) (any, *apiError) {
	if aerr := noParams(c.form); aerr != nil {
		return nil, aerr
	}
	ch, ok := lookup(s.st, s.st.charges, c.scope, c.id)
	if !ok {
		return nil, errNoSuch(http.StatusNotFound, "charge", "id", c.id)
	}
	return ch, nil
}
