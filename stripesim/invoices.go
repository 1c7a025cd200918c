package stripesim

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/keybrake/keybrake/stripe"
)

// Invoice statuses.
const (
	invDraft         = "draft"
	invOpen          = "open"
	invPaid          = "paid"
	invVoid          = "void"
	invUncollectible = "uncollectible"
)

// autoAdvanceDelay is how long after creation Stripe finalizes a draft that
// advances automatically, and how long after finalization it first tries to
// collect an open charge_automatically invoice.
const autoAdvanceDelay = time.Hour

// An invoice moves through these states:
//
//	draft --finalize, or auto_advance and 1h after creation--> open (paid at once if amount_due is 0)
//	draft --delete--> gone
//	open --pay, or charge_automatically and auto_advance and 1h after finalization--> paid (a charge on the default payment method)
//	open --payment declined--> open (attempt_count+1; no automatic retry)
//	open --void--> void
//
// The functions below follow the same order.

// createInvoiceItem serves POST /v1/invoiceitems: an amount owed by a
// customer, pending until an invoice takes it, or added at once to the
// draft invoice named. The amount is given, or is a one-time price's
// (pricing[price]) unit_amount times quantity.
func createInvoiceItem(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "customer", "amount", "currency", "invoice", "description", "metadata",
		"discountable", "period", "tax_behavior", "tax_code", "pricing", "quantity"); aerr != nil {
		return nil, aerr
	}
	cusID, aerr := required(f, "customer")
	if aerr != nil {
		return nil, aerr
	}
	if _, ok := lookup(s.st, s.st.customers, c.scope, cusID); !ok {
		return nil, errNoSuch(http.StatusBadRequest, "customer", "customer", cusID)
	}
	amount, quantity, price, aerr := s.itemAmount(c, f)
	if aerr != nil {
		return nil, aerr
	}
	var in *Invoice
	if id, aerr := optional(f, "invoice"); aerr != nil {
		return nil, aerr
	} else if id != "" {
		var ok bool
		if in, ok = lookup(s.st, s.st.invoices, c.scope, id); !ok {
			return nil, errNoSuch(http.StatusBadRequest, "invoice", "invoice", id)
		}
		if in.Customer != cusID {
			return nil, invalid("", "invoice", "The invoice %s belongs to another customer than %s.", id, cusID)
		}
		if in.Status != invDraft {
			return nil, errNotEditable(in)
		}
	}
	currency := ""
	switch {
	case f.Has("currency") || (in == nil && price == nil):
		if currency, aerr = currencyParam(f); aerr != nil {
			return nil, aerr
		}
		if price != nil && currency != price.Currency {
			return nil, invalid("", "currency", "The currency %s does not match the price's currency %s.", currency, price.Currency)
		}
	case price != nil:
		currency = price.Currency
	default:
		currency = in.Currency
	}
	if in != nil && currency != in.Currency {
		return nil, invalid("", "currency", "The currency %s does not match the invoice's currency %s.", currency, in.Currency)
	}
	if aerr := checkAmount("amount", amount, currency, false); aerr != nil {
		return nil, aerr
	}
	it := &InvoiceItem{ID: newID("ii"), Object: "invoiceitem", Amount: amount, Currency: currency, Customer: cusID,
		Date: c.now.Unix(), Period: Period{c.now.Unix(), c.now.Unix()}, Quantity: quantity, Account: c.account}
	if price != nil {
		it.Pricing = newItemPricing(price)
	}
	if it.Description, aerr = optional(f, "description"); aerr != nil {
		return nil, aerr
	}
	md, aerr := metadataParam(f)
	if aerr != nil {
		return nil, aerr
	}
	it.Metadata = mergeMetadata(nil, md)
	s.st.InvoiceItems = append(s.st.InvoiceItems, it)
	s.st.invoiceItems[it.ID] = it
	s.st.Owners[it.ID] = c.scope
	if in != nil {
		addItem(in, it)
	}
	return it, nil
}

// itemAmount returns an invoice item's amount and quantity: amount as
// given (quantity 1), or a one-time price's unit_amount times quantity.
func (s *Server) itemAmount(c *call, f *stripe.Form) (amount, quantity int64, price *Price, aerr *apiError) {
	if !f.Has("pricing") {
		if f.Has("quantity") {
			return 0, 0, nil, invalid("", "quantity", "quantity can only be set with pricing[price]; amount is the item's total.")
		}
		// A negative amount is a credit: it lowers the invoice that
		// takes the item, as on Stripe.
		amount, aerr := signedAmount(f, "amount")
		return amount, 1, nil, aerr
	}
	if f.Has("amount") {
		return 0, 0, nil, invalid("", "amount", "You may only specify one of these parameters: amount, pricing.")
	}
	m, ok := f.Tree["pricing"].(map[string]any)
	if !ok {
		return 0, 0, nil, invalid("", "pricing", "Invalid object: pricing must be a hash.")
	}
	for k := range m {
		if k != "price" {
			return 0, 0, nil, errUnknownParam("pricing[" + k + "]")
		}
	}
	id, isStr := m["price"].(string)
	if !isStr || id == "" {
		return 0, 0, nil, errMissingParam("pricing[price]")
	}
	if price, ok = lookup(s.st, s.st.prices, c.scope, id); !ok {
		return 0, 0, nil, errNoSuch(http.StatusBadRequest, "price", "pricing[price]", id)
	}
	if price.Type != "one_time" {
		return 0, 0, nil, invalid("", "pricing[price]", "The price specified is set to `type=recurring` but this field only accepts prices with `type=one_time`.")
	}
	if !price.Active {
		return 0, 0, nil, invalid("", "pricing[price]", "The price specified is inactive. This field only accepts active prices.")
	}
	quantity = 1
	if q, sent, aerr := str(f, "quantity"); aerr != nil {
		return 0, 0, nil, aerr
	} else if sent {
		if quantity, aerr = intParam("quantity", q); aerr != nil {
			return 0, 0, nil, aerr
		}
	}
	if quantity > 0 && price.UnitAmount > stripe.MaxAmount/quantity {
		return 0, 0, nil, invalid("amount_too_large", "quantity", "Amount must be no more than %d (eight digits): %d × %d is more.", stripe.MaxAmount, price.UnitAmount, quantity)
	}
	return price.UnitAmount * quantity, quantity, price, nil
}

// addItem moves the pending item it onto the draft in.
func addItem(in *Invoice, it *InvoiceItem) {
	it.Invoice = in.ID
	in.Lines = append(in.Lines, &InvoiceLine{ID: newID("il"), Object: "line_item", Amount: it.Amount,
		Currency: it.Currency, Description: it.Description, Invoice: in.ID, InvoiceItem: it.ID,
		Metadata: it.Metadata, Period: it.Period, Pricing: it.Pricing, Quantity: it.Quantity})
	recompute(in)
}

// recompute sets the totals of in from its lines; nothing discounts or
// taxes them. Credit lines may take the total below zero; nothing is then
// due (Stripe credits the rest to the customer's balance, which the
// simulator does not keep).
func recompute(in *Invoice) {
	var total int64
	for _, l := range in.Lines {
		total += l.Amount
	}
	in.Subtotal, in.Total, in.AmountDue = total, total, max(total, 0)
	in.AmountRemaining = in.AmountDue - in.AmountPaid
}

// signedAmount is requiredAmount for an amount that may be negative (an
// invoice item's credit).
func signedAmount(f *stripe.Form, name string) (int64, *apiError) {
	if s, ok, aerr := str(f, name); aerr == nil && ok && strings.HasPrefix(s, "-") {
		n, err := stripe.ParseAmount(name, s[1:])
		if err != nil || n == 0 {
			return 0, invalid("parameter_invalid_integer", name, "Invalid integer: %s", s)
		}
		return -n, nil
	}
	return requiredAmount(f, name)
}

// pendingItemsDefault is what invoices.create does with the customer's
// pending items when pending_invoice_items_behavior is not sent: API
// versions before 2022-08-01 included them (include_and_require), later
// ones exclude them. With no Stripe-Version the simulator's account
// default is the current version.
func pendingItemsDefault(version string) string {
	if version != "" && version < "2022-08-01" {
		return "include"
	}
	return "exclude"
}

// createInvoice serves POST /v1/invoices: a draft for a customer, taking
// the customer's pending items when pending_invoice_items_behavior=include,
// or when it is not sent under a Stripe-Version before 2022-08-01
// (pendingItemsDefault).
func createInvoice(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "customer", "auto_advance", "collection_method", "days_until_due", "currency",
		"pending_invoice_items_behavior", "metadata", "description", "default_payment_method",
		"footer", "statement_descriptor", "custom_fields"); aerr != nil {
		return nil, aerr
	}
	cusID, aerr := required(f, "customer")
	if aerr != nil {
		return nil, aerr
	}
	if _, ok := lookup(s.st, s.st.customers, c.scope, cusID); !ok {
		return nil, errNoSuch(http.StatusBadRequest, "customer", "customer", cusID)
	}
	in := &Invoice{ID: newID("in"), Object: "invoice", Created: c.now.Unix(), Customer: cusID, Status: invDraft,
		CollectionMethod: "charge_automatically", Currency: "usd", PeriodStart: c.now.Unix(), PeriodEnd: c.now.Unix(),
		Account: c.account}
	if f.Has("currency") {
		if in.Currency, aerr = currencyParam(f); aerr != nil {
			return nil, aerr
		}
	}
	if aerr := setCollection(f, in); aerr != nil {
		return nil, aerr
	}
	if in.AutoAdvance, aerr = boolParam(f, "auto_advance", false); aerr != nil {
		return nil, aerr
	}
	if in.Description, aerr = optional(f, "description"); aerr != nil {
		return nil, aerr
	}
	if in.DefaultPaymentMethod, aerr = optional(f, "default_payment_method"); aerr != nil {
		return nil, aerr
	} else if in.DefaultPaymentMethod != "" && !knownCard("payment_method", in.DefaultPaymentMethod) {
		return nil, errNoSuchCard("default_payment_method", in.DefaultPaymentMethod)
	}
	md, aerr := metadataParam(f)
	if aerr != nil {
		return nil, aerr
	}
	in.Metadata = mergeMetadata(nil, md)
	behavior, aerr := optional(f, "pending_invoice_items_behavior")
	if aerr != nil {
		return nil, aerr
	}
	if behavior == "" {
		behavior = pendingItemsDefault(c.version)
	}
	switch behavior {
	case "exclude":
	case "include":
		s.takePendingItems(c, in, !f.Has("currency"))
	default:
		return nil, invalid("", "pending_invoice_items_behavior", "Invalid pending_invoice_items_behavior: must be one of exclude or include")
	}
	scheduleFinalization(in, c.now)
	s.st.Invoices = append(s.st.Invoices, in)
	s.st.invoices[in.ID] = in
	s.st.Owners[in.ID] = c.scope
	return in, nil
}

// takePendingItems adds the customer's pending items in the invoice's
// currency, or in the first pending item's when the currency was not given.
func (s *Server) takePendingItems(c *call, in *Invoice, adoptCurrency bool) {
	for _, it := range s.st.InvoiceItems {
		if it.Invoice != "" || it.Customer != in.Customer || s.st.Owners[it.ID] != c.scope {
			continue
		}
		if adoptCurrency {
			in.Currency, adoptCurrency = it.Currency, false
		}
		if it.Currency == in.Currency {
			addItem(in, it)
		}
	}
}

// setCollection applies collection_method and days_until_due, which only
// send_invoice takes (and requires).
func setCollection(f *stripe.Form, in *Invoice) *apiError {
	if cm, aerr := optional(f, "collection_method"); aerr != nil {
		return aerr
	} else if cm != "" {
		if cm != "charge_automatically" && cm != "send_invoice" {
			return invalid("", "collection_method", "Invalid collection_method: must be one of charge_automatically or send_invoice")
		}
		in.CollectionMethod = cm
	}
	if s, ok, aerr := str(f, "days_until_due"); aerr != nil {
		return aerr
	} else if ok {
		n, aerr := intParam("days_until_due", s)
		if aerr != nil {
			return aerr
		}
		in.DaysUntilDue = n
	}
	switch {
	case in.CollectionMethod == "send_invoice" && in.DaysUntilDue == 0:
		return invalid("", "days_until_due", "Missing days_until_due: invoices with collection_method send_invoice need days_until_due or due_date.")
	case in.CollectionMethod == "charge_automatically" && f.Has("days_until_due"):
		return invalid("", "days_until_due", "days_until_due can only be set when collection_method is send_invoice.")
	case in.CollectionMethod == "charge_automatically":
		in.DaysUntilDue = 0
	}
	return nil
}

// scheduleFinalization sets when a draft finalizes itself: an hour after
// creation while auto_advance is on, or at once if that hour has passed.
func scheduleFinalization(in *Invoice, now time.Time) {
	in.AutomaticallyFinalizesAt = 0
	if in.Status != invDraft || !in.AutoAdvance {
		return
	}
	at := time.Unix(in.Created, 0).Add(autoAdvanceDelay)
	if at.Before(now) {
		at = now
	}
	in.AutomaticallyFinalizesAt = at.Unix()
}

// scheduleCollection sets when an open invoice charges itself: an hour after
// finalization while auto_advance is on, for charge_automatically only.
func scheduleCollection(in *Invoice, now time.Time) {
	in.NextPaymentAttempt = 0
	if in.Status != invOpen || !in.AutoAdvance || in.CollectionMethod != "charge_automatically" || in.Attempted {
		return
	}
	at := time.Unix(in.StatusTransitions.FinalizedAt, 0).Add(autoAdvanceDelay)
	if at.Before(now) {
		at = now
	}
	in.NextPaymentAttempt = at.Unix()
}

func errNotEditable(in *Invoice) *apiError {
	return invalid("invoice_not_editable", "", "You can only modify draft invoices; invoice %s has status %s.", in.ID, in.Status)
}

func errInvoiceState(verb string, in *Invoice, allowed string) *apiError {
	return invalid("", "", "You can only %s %s invoices; invoice %s has status %s.", verb, allowed, in.ID, in.Status)
}

func (s *Server) invoice(c *call) (*Invoice, *apiError) {
	in, ok := lookup(s.st, s.st.invoices, c.scope, c.id)
	if !ok {
		return nil, errNoSuch(http.StatusNotFound, "invoice", "id", c.id)
	}
	return in, nil
}

// retrieveInvoice serves GET /v1/invoices/{id}.
func retrieveInvoice(s *Server, c *call) (any, *apiError) {
	if aerr := noParams(c.form); aerr != nil {
		return nil, aerr
	}
	return s.invoice(c)
}

// updateInvoice serves POST /v1/invoices/{id}: auto_advance, description
// and metadata while the invoice is draft or open, collection_method and
// days_until_due while it is a draft.
func updateInvoice(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "auto_advance", "collection_method", "days_until_due", "description", "metadata",
		"default_payment_method", "footer", "statement_descriptor", "custom_fields"); aerr != nil {
		return nil, aerr
	}
	in, aerr := s.invoice(c)
	if aerr != nil {
		return nil, aerr
	}
	if in.Status != invDraft && in.Status != invOpen {
		return nil, errNotEditable(in)
	}
	upd := *in
	if f.Has("collection_method") || f.Has("days_until_due") {
		if in.Status != invDraft {
			return nil, errNotEditable(in)
		}
		if aerr := setCollection(f, &upd); aerr != nil {
			return nil, aerr
		}
	}
	if upd.AutoAdvance, aerr = boolParam(f, "auto_advance", in.AutoAdvance); aerr != nil {
		return nil, aerr
	}
	if f.Has("description") {
		if upd.Description, aerr = optional(f, "description"); aerr != nil {
			return nil, aerr
		}
	}
	if f.Has("default_payment_method") {
		if upd.DefaultPaymentMethod, aerr = optional(f, "default_payment_method"); aerr != nil {
			return nil, aerr
		} else if upd.DefaultPaymentMethod != "" && !knownCard("payment_method", upd.DefaultPaymentMethod) {
			return nil, errNoSuchCard("default_payment_method", upd.DefaultPaymentMethod)
		}
	}
	md, aerr := metadataParam(f)
	if aerr != nil {
		return nil, aerr
	}
	if md != nil {
		upd.Metadata = mergeMetadata(in.Metadata, md)
	}
	*in = upd
	scheduleFinalization(in, c.now)
	scheduleCollection(in, c.now)
	return in, nil
}

// addInvoiceLines serves POST /v1/invoices/{id}/add_lines: lines[N][amount]
// in the invoice's currency, with an optional description and metadata.
func addInvoiceLines(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "lines", "invoice_metadata"); aerr != nil {
		return nil, aerr
	}
	in, aerr := s.invoice(c)
	if aerr != nil {
		return nil, aerr
	}
	if in.Status != invDraft {
		return nil, errNotEditable(in)
	}
	lines, aerr := linesParam(f.Tree["lines"], in)
	if aerr != nil {
		return nil, aerr
	}
	in.Lines = append(in.Lines, lines...)
	recompute(in)
	return in, nil
}

// linesParam parses lines[N][…] in index order.
func linesParam(v any, in *Invoice) ([]*InvoiceLine, *apiError) {
	if v == nil {
		return nil, errMissingParam("lines")
	}
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return nil, invalid("", "lines", "Invalid array: lines must be a list of lines, lines[0][amount]=….")
	}
	keys := make([]int, 0, len(m))
	for k := range m {
		n, err := strconv.Atoi(k)
		if err != nil || n < 0 {
			return nil, invalid("", "lines", "Invalid array: lines[%s] is not a list index.", k)
		}
		keys = append(keys, n)
	}
	sort.Ints(keys)
	out := make([]*InvoiceLine, 0, len(keys))
	for _, n := range keys {
		prefix := fmt.Sprintf("lines[%d]", n)
		fields, ok := m[strconv.Itoa(n)].(map[string]any)
		if !ok {
			return nil, invalid("", prefix, "Invalid object: %s must be a hash.", prefix)
		}
		l := &InvoiceLine{ID: newID("il"), Object: "line_item", Currency: in.Currency, Invoice: in.ID,
			Metadata: map[string]string{}, Period: Period{in.PeriodStart, in.PeriodEnd}, Quantity: 1}
		for k, raw := range fields {
			param := prefix + "[" + k + "]"
			switch k {
			case "amount", "description":
				s, isStr := raw.(string)
				if !isStr {
					return nil, invalid("", param, "Invalid string: %s must be a string.", param)
				}
				if k == "description" {
					l.Description = s
					continue
				}
				n, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					return nil, invalid("parameter_invalid_integer", param, "Invalid integer: %s", s)
				}
				if aerr := checkAmount(param, n, in.Currency, false); aerr != nil {
					return nil, aerr
				}
				l.Amount = n
			case "metadata":
				md, isMap := raw.(map[string]any)
				if !isMap {
					return nil, invalid("", param, "Invalid object: %s must be a hash.", param)
				}
				for mk, mv := range md {
					if sv, isStr := mv.(string); isStr {
						l.Metadata[mk] = sv
					}
				}
			default:
				return nil, errUnknownParam(param)
			}
		}
		if _, sent := fields["amount"]; !sent {
			return nil, errMissingParam(prefix + "[amount]")
		}
		out = append(out, l)
	}
	return out, nil
}

// finalizeInvoice serves POST /v1/invoices/{id}/finalize.
func finalizeInvoice(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "auto_advance"); aerr != nil {
		return nil, aerr
	}
	in, aerr := s.invoice(c)
	if aerr != nil {
		return nil, aerr
	}
	if in.Status != invDraft {
		return nil, errInvoiceState("finalize", in, "draft")
	}
	if in.AutoAdvance, aerr = boolParam(f, "auto_advance", in.AutoAdvance); aerr != nil {
		return nil, aerr
	}
	s.finalizeLocked(in, c.now)
	return in, nil
}

// finalizeLocked opens the draft in at time at; an invoice with nothing due
// is paid at once, as on Stripe.
func (s *Server) finalizeLocked(in *Invoice, at time.Time) {
	in.Status, in.AutomaticallyFinalizesAt = invOpen, 0
	in.StatusTransitions.FinalizedAt, in.EffectiveAt = at.Unix(), at.Unix()
	in.Number = fmt.Sprintf("SIM-%04d", len(s.st.Invoices))
	if in.CollectionMethod == "send_invoice" {
		in.DueDate = at.Add(time.Duration(in.DaysUntilDue) * 24 * time.Hour).Unix()
	}
	if in.AmountDue == 0 {
		in.Status, in.StatusTransitions.PaidAt = invPaid, at.Unix()
		return
	}
	scheduleCollection(in, at)
}

// payInvoice serves POST /v1/invoices/{id}/pay: charges payment_method,
// source, the invoice's default payment method or the customer's
// (invoice_settings[default_payment_method], then its default source), or
// marks it paid_out_of_band without a charge. A decline answers 402 and
// leaves the invoice open.
func payInvoice(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "payment_method", "source", "paid_out_of_band", "off_session", "forgive", "mandate"); aerr != nil {
		return nil, aerr
	}
	in, aerr := s.invoice(c)
	if aerr != nil {
		return nil, aerr
	}
	if in.Status != invOpen {
		return nil, errInvoiceState("pay", in, "open")
	}
	oob, aerr := boolParam(f, "paid_out_of_band", false)
	if aerr != nil {
		return nil, aerr
	}
	if oob {
		in.AmountPaid, in.AmountRemaining, in.Status, in.NextPaymentAttempt = in.AmountDue, 0, invPaid, 0
		in.StatusTransitions.PaidAt = c.now.Unix()
		return in, nil
	}
	card := ""
	for _, param := range []string{"payment_method", "source"} {
		v, aerr := optional(f, param)
		if aerr != nil {
			return nil, aerr
		}
		if v != "" && !knownCard(param, v) {
			return nil, errNoSuchCard(param, v)
		}
		if v != "" {
			card = v
		}
	}
	if aerr := s.collectLocked(c, in, card); aerr != nil {
		return nil, aerr
	}
	return in, nil
}

// collectLocked charges the open invoice in on card, or on the default
// payment method when card is "".
func (s *Server) collectLocked(c *call, in *Invoice, card string) *apiError {
	if card == "" {
		card = s.defaultPaymentMethod(in)
	}
	in.Attempted, in.AttemptCount, in.NextPaymentAttempt = true, in.AttemptCount+1, 0
	if card == "" {
		return invalid("", "", "This customer has no attached payment source or default payment method. "+
			"Please consider adding a default payment method.")
	}
	ch, decline := s.newCharge(c, chargeSpec{amount: in.AmountRemaining, currency: in.Currency, customer: in.Customer,
		card: card, description: "Payment for Invoice", metadata: map[string]string{"invoice": in.ID}, capture: true})
	if decline != "" {
		return declineError(ch, decline)
	}
	in.Charge = ch.ID
	in.AmountPaid += ch.Amount
	in.AmountRemaining = in.AmountDue - in.AmountPaid
	in.Status, in.StatusTransitions.PaidAt = invPaid, c.now.Unix()
	return nil
}

// defaultPaymentMethod is what an invoice charges when not told otherwise.
func (s *Server) defaultPaymentMethod(in *Invoice) string {
	if in.DefaultPaymentMethod != "" {
		return in.DefaultPaymentMethod
	}
	cus := s.st.customers[in.Customer]
	switch {
	case cus == nil:
		return ""
	case cus.InvoiceSettings.DefaultPaymentMethod != "":
		return cus.InvoiceSettings.DefaultPaymentMethod
	}
	return cus.DefaultSource
}

// sendInvoice serves POST /v1/invoices/{id}/send: as on Stripe, which
// finalizes a draft before sending it, a draft is finalized first, and the
// customer can then pay it on the hosted page. Only send_invoice invoices
// are sent.
func sendInvoice(s *Server, c *call) (any, *apiError) {
	if aerr := noParams(c.form); aerr != nil {
		return nil, aerr
	}
	in, aerr := s.invoice(c)
	if aerr != nil {
		return nil, aerr
	}
	if in.CollectionMethod != "send_invoice" {
		return nil, invalid("", "", "You can only manually send an invoice if its collection method is 'send_invoice'.")
	}
	if in.Status == invDraft {
		s.finalizeLocked(in, c.now)
	}
	return in, nil
}

// voidInvoice serves POST /v1/invoices/{id}/void.
func voidInvoice(s *Server, c *call) (any, *apiError) {
	if aerr := noParams(c.form); aerr != nil {
		return nil, aerr
	}
	in, aerr := s.invoice(c)
	if aerr != nil {
		return nil, aerr
	}
	if in.Status != invOpen && in.Status != invUncollectible {
		return nil, errInvoiceState("void", in, "open or uncollectible")
	}
	in.Status, in.NextPaymentAttempt, in.StatusTransitions.VoidedAt = invVoid, 0, c.now.Unix()
	return in, nil
}

// deleteInvoice serves DELETE /v1/invoices/{id}, of a draft only. The
// invoice stays in the ground truth, marked deleted.
func deleteInvoice(s *Server, c *call) (any, *apiError) {
	if aerr := noParams(c.form); aerr != nil {
		return nil, aerr
	}
	in, aerr := s.invoice(c)
	if aerr != nil {
		return nil, aerr
	}
	if in.Status != invDraft {
		return nil, errInvoiceState("delete", in, "draft")
	}
	in.Deleted, in.AutomaticallyFinalizesAt = true, 0
	delete(s.st.invoices, in.ID)
	return map[string]any{"id": in.ID, "object": "invoice", "deleted": true}, nil
}

// advanceInvoicesLocked applies, in time order, every automatic
// finalization and collection due at now. A charge made by automatic
// collection is created at the time it fell due. The caller holds s.mu.
func (s *Server) advanceInvoicesLocked(now time.Time) {
	for {
		var next *Invoice
		var at int64
		for _, in := range s.st.invoices {
			t := in.AutomaticallyFinalizesAt
			if in.Status == invOpen {
				t = in.NextPaymentAttempt
			}
			if t != 0 && t <= now.Unix() && (next == nil || t < at || (t == at && in.Created < next.Created)) {
				next, at = in, t
			}
		}
		if next == nil {
			return
		}
		when := time.Unix(at, 0)
		if next.Status == invDraft {
			s.finalizeLocked(next, when)
			continue
		}
		c := &call{scope: s.st.Owners[next.ID], account: next.Account, now: when}
		s.collectLocked(c, next, "") // a failed attempt stays visible on the invoice
	}
}

// retrieveInvoiceItem serves GET /v1/invoiceitems/{id}.
func retrieveInvoiceItem(s *Server, c *call) (any, *apiError) {
	if aerr := noParams(c.form); aerr != nil {
		return nil, aerr
	}
	it, ok := lookup(s.st, s.st.invoiceItems, c.scope, c.id)
	if !ok {
		return nil, errNoSuch(http.StatusNotFound, "invoiceitem", "id", c.id)
	}
	return it, nil
}
