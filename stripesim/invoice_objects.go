package stripesim

import "encoding/json"

// InvoiceSettings is a customer's invoice_settings: the payment method
// invoices that collect themselves charge.
type InvoiceSettings struct {
	DefaultPaymentMethod string `json:"default_payment_method"`
}

// MarshalJSON writes an empty default_payment_method as null.
func (s InvoiceSettings) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		DefaultPaymentMethod *string `json:"default_payment_method"`
	}{null(s.DefaultPaymentMethod)})
}

// Period is the start and end, in unix seconds, a line is for.
type Period struct {
	Start int64 `json:"start"`
	End   int64 `json:"end"`
}

// InvoiceItem is a Stripe invoice item: an amount owed by a customer,
// pending until an invoice takes it (Invoice set).
type InvoiceItem struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"`
	Amount      int64             `json:"amount"`
	Currency    string            `json:"currency"`
	Customer    string            `json:"customer"`
	Date        int64             `json:"date"`
	Description string            `json:"description"`
	Invoice     string            `json:"invoice"`
	Livemode    bool              `json:"livemode"`
	Metadata    map[string]string `json:"metadata"`
	Period      Period            `json:"period"`
	Pricing     *ItemPricing      `json:"pricing"`
	Quantity    int64             `json:"quantity"`
	Account     string            `json:"account,omitempty"`
}

// MarshalJSON writes empty optional fields as null, as Stripe does.
func (it InvoiceItem) MarshalJSON() ([]byte, error) {
	type alias InvoiceItem
	return json.Marshal(struct {
		alias
		Description *string `json:"description"`
		Invoice     *string `json:"invoice"`
	}{alias(it), null(it.Description), null(it.Invoice)})
}

// InvoiceLine is one line of an invoice, from an invoice item or from
// add_lines.
type InvoiceLine struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"`
	Amount      int64             `json:"amount"`
	Currency    string            `json:"currency"`
	Description string            `json:"description"`
	Invoice     string            `json:"invoice"`
	InvoiceItem string            `json:"-"`
	Livemode    bool              `json:"livemode"`
	Metadata    map[string]string `json:"metadata"`
	Period      Period            `json:"period"`
	Pricing     *ItemPricing      `json:"pricing"`
	Quantity    int64             `json:"quantity"`
}

// MarshalJSON writes an empty description as null.
func (l InvoiceLine) MarshalJSON() ([]byte, error) {
	type alias InvoiceLine
	return json.Marshal(struct {
		alias
		Description *string `json:"description"`
	}{alias(l), null(l.Description)})
}

// StatusTransitions are the times an invoice changed status, 0 for never.
type StatusTransitions struct {
	FinalizedAt           int64 `json:"finalized_at"`
	MarkedUncollectibleAt int64 `json:"marked_uncollectible_at"`
	PaidAt                int64 `json:"paid_at"`
	VoidedAt              int64 `json:"voided_at"`
}

// MarshalJSON writes the times never reached as null.
func (t StatusTransitions) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		FinalizedAt           *int64 `json:"finalized_at"`
		MarkedUncollectibleAt *int64 `json:"marked_uncollectible_at"`
		PaidAt                *int64 `json:"paid_at"`
		VoidedAt              *int64 `json:"voided_at"`
	}{nullTime(t.FinalizedAt), nullTime(t.MarkedUncollectibleAt), nullTime(t.PaidAt), nullTime(t.VoidedAt)})
}

// Invoice is a Stripe invoice. Charge is the charge that paid it, which
// API versions before 2025-03-31 also answered. Deleted drafts stay in the
// ground truth with Deleted set.
type Invoice struct {
	ID                       string            `json:"id"`
	Object                   string            `json:"object"`
	AmountDue                int64             `json:"amount_due"`
	AmountPaid               int64             `json:"amount_paid"`
	AmountRemaining          int64             `json:"amount_remaining"`
	AttemptCount             int64             `json:"attempt_count"`
	Attempted                bool              `json:"attempted"`
	AutoAdvance              bool              `json:"auto_advance"`
	AutomaticallyFinalizesAt int64             `json:"automatically_finalizes_at"`
	Charge                   string            `json:"charge"`
	CollectionMethod         string            `json:"collection_method"`
	Created                  int64             `json:"created"`
	Currency                 string            `json:"currency"`
	Customer                 string            `json:"customer"`
	DaysUntilDue             int64             `json:"-"`
	DefaultPaymentMethod     string            `json:"default_payment_method"`
	Deleted                  bool              `json:"deleted,omitempty"`
	Description              string            `json:"description"`
	DueDate                  int64             `json:"due_date"`
	EffectiveAt              int64             `json:"effective_at"`
	Lines                    []*InvoiceLine    `json:"-"`
	Livemode                 bool              `json:"livemode"`
	Metadata                 map[string]string `json:"metadata"`
	NextPaymentAttempt       int64             `json:"next_payment_attempt"`
	Number                   string            `json:"number"`
	PeriodEnd                int64             `json:"period_end"`
	PeriodStart              int64             `json:"period_start"`
	Status                   string            `json:"status"`
	StatusTransitions        StatusTransitions `json:"status_transitions"`
	Subtotal                 int64             `json:"subtotal"`
	Total                    int64             `json:"total"`
	Account                  string            `json:"account,omitempty"`
}

// MarshalJSON writes the invoice as Stripe does: lines as a list object,
// empty optional fields and times never reached as null.
func (in Invoice) MarshalJSON() ([]byte, error) {
	type alias Invoice
	lines := make([]InvoiceLine, len(in.Lines))
	for i, l := range in.Lines {
		lines[i] = *l
	}
	var days *int64
	if in.CollectionMethod == "send_invoice" {
		days = &in.DaysUntilDue
	}
	return json.Marshal(struct {
		alias
		AutomaticallyFinalizesAt *int64     `json:"automatically_finalizes_at"`
		Charge                   *string    `json:"charge"`
		DaysUntilDue             *int64     `json:"days_until_due"`
		DefaultPaymentMethod     *string    `json:"default_payment_method"`
		Description              *string    `json:"description"`
		DueDate                  *int64     `json:"due_date"`
		EffectiveAt              *int64     `json:"effective_at"`
		Lines                    listObject `json:"lines"`
		NextPaymentAttempt       *int64     `json:"next_payment_attempt"`
		Number                   *string    `json:"number"`
	}{alias(in), nullTime(in.AutomaticallyFinalizesAt), null(in.Charge), days, null(in.DefaultPaymentMethod),
		null(in.Description), nullTime(in.DueDate), nullTime(in.EffectiveAt),
		listObject{Object: "list", Data: lines, URL: "/v1/invoices/" + in.ID + "/lines"},
		nullTime(in.NextPaymentAttempt), null(in.Number)})
}

// UnmarshalJSON reads the form MarshalJSON writes, so that the state file
// round-trips.
func (in *Invoice) UnmarshalJSON(b []byte) error {
	type alias Invoice
	var v struct {
		alias
		DaysUntilDue *int64 `json:"days_until_due"`
		Lines        struct {
			Data []*InvoiceLine `json:"data"`
		} `json:"lines"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*in = Invoice(v.alias)
	in.Lines = v.Lines.Data
	if v.DaysUntilDue != nil {
		in.DaysUntilDue = *v.DaysUntilDue
	}
	return nil
}

// nullTime maps 0 to JSON null.
func nullTime(t int64) *int64 {
	if t == 0 {
		return nil
	}
	return &t
}
