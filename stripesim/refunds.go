package stripesim

import "net/http"

// createRefund serves POST /v1/refunds: a refund of a charge, named directly
// or through its PaymentIntent, in full or in part, never of more than what
// is left to refund.
func createRefund(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "charge", "payment_intent", "amount", "reason", "metadata",
		"refund_application_fee", "reverse_transfer", "instructions_email", "origin"); aerr != nil {
		return nil, aerr
	}
	chargeID, aerr := optional(f, "charge")
	if aerr != nil {
		return nil, aerr
	}
	piID, aerr := optional(f, "payment_intent")
	if aerr != nil {
		return nil, aerr
	}
	return s.refund(c, chargeID, piID)
}

// createChargeRefund serves Stripe's legacy refund paths, POST
// /v1/charges/{id}/refunds (answering the refund) and POST
// /v1/charges/{id}/refund (answering the charge refunded): a refund of the
// charge in the path, as POST /v1/refunds with charge makes it.
func createChargeRefund(legacy bool) handler {
	return func(s *Server, c *call) (any, *apiError) {
		if aerr := allow(c.form, "amount", "reason", "metadata", "refund_application_fee", "reverse_transfer", "instructions_email"); aerr != nil {
			return nil, aerr
		}
		re, aerr := s.refund(c, c.id, "")
		if aerr != nil || !legacy {
			return re, aerr
		}
		return s.st.charges[re.(*Refund).Charge], nil
	}
}

// refund refunds the charge chargeID, or that of the payment intent piID.
func (s *Server) refund(c *call, chargeID, piID string) (any, *apiError) {
	f := c.form
	ch, aerr := s.refundTarget(c, chargeID, piID)
	if aerr != nil {
		return nil, aerr
	}
	// amount_refunded counts the part a partial capture released, so what is
	// left to refund is the amount less all of amount_refunded.
	left := ch.Amount - ch.AmountRefunded
	if chargeID != "" && authorized(ch) && !f.Has("amount") {
		// Refunding an uncaptured charge releases its authorization, as
		// on Stripe: the refund is of the whole amount and nothing moved.
		releaseLocked(ch)
		delete(s.st.uncaptured, ch.ID)
		re := &Refund{ID: newID("re"), Object: "refund", Amount: ch.Amount, Charge: ch.ID, Created: c.now.Unix(),
			Currency: ch.Currency, PaymentIntent: ch.PaymentIntent, Status: "succeeded", Account: c.account}
		s.st.Refunds = append(s.st.Refunds, re)
		s.st.refunds[re.ID] = re
		s.st.Owners[re.ID] = c.scope
		return re, nil
	}
	if ch.Status != "succeeded" || !ch.Captured {
		return nil, invalid("charge_not_refundable", "charge", "Charge %s has no captured funds to refund.", ch.ID)
	}
	if left <= 0 {
		return nil, invalid("charge_already_refunded", "charge", "Charge %s has already been refunded.", ch.ID)
	}
	amount := left
	if n, ok, aerr := amountParam(f, "amount"); aerr != nil {
		return nil, aerr
	} else if ok {
		if n > left {
			return nil, invalid("amount_too_large", "amount",
				"Refund amount (%s %s) is greater than unrefunded amount on charge (%s %s)",
				formatMajor(n, ch.Currency), ch.Currency, formatMajor(left, ch.Currency), ch.Currency)
		}
		if aerr := checkAmount("amount", n, ch.Currency, false); aerr != nil {
			return nil, aerr
		}
		amount = n
	}
	reason, aerr := optional(f, "reason")
	if aerr != nil {
		return nil, aerr
	}
	switch reason {
	case "", "duplicate", "fraudulent", "requested_by_customer":
	default:
		return nil, invalid("", "reason", "Invalid reason: must be one of duplicate, fraudulent, or requested_by_customer")
	}
	md, aerr := metadataParam(f)
	if aerr != nil {
		return nil, aerr
	}
	re := &Refund{ID: newID("re"), Object: "refund", Amount: amount, Charge: ch.ID, Created: c.now.Unix(),
		Currency: ch.Currency, Metadata: mergeMetadata(nil, md), PaymentIntent: ch.PaymentIntent,
		Reason: reason, Status: "succeeded", Account: c.account}
	ch.AmountRefunded += amount
	ch.Refunded = ch.AmountRefunded >= ch.Amount
	s.st.Refunds = append(s.st.Refunds, re)
	s.st.refunds[re.ID] = re
	s.st.Owners[re.ID] = c.scope
	return re, nil
}

// refundTarget resolves the charge a refund is for.
func (s *Server) refundTarget(c *call, chargeID, piID string) (*Charge, *apiError) {
	switch {
	case chargeID == "" && piID == "":
		return nil, invalid("parameter_missing", "charge", "One of the following params should be provided for this request: payment_intent or charge.")
	case chargeID != "" && piID != "":
		return nil, invalid("", "payment_intent", "You may only specify one of these parameters: charge, payment_intent.")
	case chargeID != "":
		ch, ok := lookup(s.st, s.st.charges, c.scope, chargeID)
		if !ok {
			return nil, errNoSuch(http.StatusBadRequest, "charge", "charge", chargeID)
		}
		return ch, nil
	}
	pi, ok := lookup(s.st, s.st.paymentIntents, c.scope, piID)
	if !ok {
		return nil, errNoSuch(http.StatusBadRequest, "payment_intent", "payment_intent", piID)
	}
	ch := s.st.charges[pi.LatestCharge]
	if pi.Status != piSucceeded || ch == nil {
		return nil, invalid("charge_not_refundable", "payment_intent",
			"This PaymentIntent (%s) does not have a successful charge to refund.", pi.ID)
	}
	return ch, nil
}

// retrieveRefund serves GET /v1/refunds/{id}.
func retrieveRefund(s *Server, c *call) (any, *apiError) {
	if aerr := noParams(c.form); aerr != nil {
		return nil, aerr
	}
	re, ok := lookup(s.st, s.st.refunds, c.scope, c.id)
	if !ok {
		return nil, errNoSuch(http.StatusNotFound, "refund", "id", c.id)
	}
	return re, nil
}
