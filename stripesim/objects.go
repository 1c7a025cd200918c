package stripesim

import "encoding/json"

// Customer is a Stripe customer. DefaultSource is the test token or payment
// method charges fall back to when they name the customer and no source.
type Customer struct {
	ID            string `json:"id"`
	Object        string `json:"object"`
	Created       int64  `json:"created"`
	Email         string `json:"email"`
	Name          string `json:"name"`
	Description   string `json:"description"`
	DefaultSource string `json:"default_source"`
	// InvoiceSettings holds the payment method invoices charge first.
	InvoiceSettings InvoiceSettings   `json:"invoice_settings"`
	Livemode        bool              `json:"livemode"`
	Metadata        map[string]string `json:"metadata"`
	Account         string            `json:"account,omitempty"`
}

// MarshalJSON writes empty optional fields as null, as Stripe does.
func (c Customer) MarshalJSON() ([]byte, error) {
	type alias Customer
	return json.Marshal(struct {
		alias
		Email         *string `json:"email"`
		Name          *string `json:"name"`
		Description   *string `json:"description"`
		DefaultSource *string `json:"default_source"`
	}{alias(c), null(c.Email), null(c.Name), null(c.Description), null(c.DefaultSource)})
}

// Outcome is the result of a charge's authorization, as on Stripe's charge.
type Outcome struct {
	NetworkStatus string `json:"network_status"`
	Reason        string `json:"reason,omitempty"`
	RiskLevel     string `json:"risk_level"`
	RiskScore     int    `json:"risk_score"`
	SellerMessage string `json:"seller_message"`
	Type          string `json:"type"`
}

// Charge is a Stripe charge. A declined charge exists too, with Status
// "failed" and FailureCode set. Account is the Stripe-Account the charge was
// created under, "" for the platform.
type Charge struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Amount         int64             `json:"amount"`
	AmountCaptured int64             `json:"amount_captured"`
	AmountRefunded int64             `json:"amount_refunded"`
	Captured       bool              `json:"captured"`
	Created        int64             `json:"created"`
	Currency       string            `json:"currency"`
	Customer       string            `json:"customer"`
	Description    string            `json:"description"`
	FailureCode    string            `json:"failure_code"`
	FailureMessage string            `json:"failure_message"`
	Livemode       bool              `json:"livemode"`
	Metadata       map[string]string `json:"metadata"`
	Outcome        *Outcome          `json:"outcome"`
	Paid           bool              `json:"paid"`
	PaymentIntent  string            `json:"payment_intent"`
	PaymentMethod  string            `json:"payment_method"`
	Refunded       bool              `json:"refunded"`
	Status         string            `json:"status"`
	Account        string            `json:"account,omitempty"`
}

// MarshalJSON writes empty optional fields as null, as Stripe does.
func (c Charge) MarshalJSON() ([]byte, error) {
	type alias Charge
	return json.Marshal(struct {
		alias
		Customer       *string `json:"customer"`
		Description    *string `json:"description"`
		FailureCode    *string `json:"failure_code"`
		FailureMessage *string `json:"failure_message"`
		PaymentIntent  *string `json:"payment_intent"`
		PaymentMethod  *string `json:"payment_method"`
	}{alias(c), null(c.Customer), null(c.Description), null(c.FailureCode),
		null(c.FailureMessage), null(c.PaymentIntent), null(c.PaymentMethod)})
}

// PaymentError is a PaymentIntent's last_payment_error.
type PaymentError struct {
	Type        string `json:"type"`
	Code        string `json:"code"`
	DeclineCode string `json:"decline_code,omitempty"`
	Message     string `json:"message"`
	Charge      string `json:"charge,omitempty"`
}

// PaymentIntent is a Stripe PaymentIntent.
type PaymentIntent struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	AmountCapturable   int64             `json:"amount_capturable"`
	AmountReceived     int64             `json:"amount_received"`
	CanceledAt         int64             `json:"canceled_at"`
	CancellationReason string            `json:"cancellation_reason"`
	CaptureMethod      string            `json:"capture_method"`
	ClientSecret       string            `json:"client_secret"`
	ConfirmationMethod string            `json:"confirmation_method"`
	Created            int64             `json:"created"`
	Currency           string            `json:"currency"`
	Customer           string            `json:"customer"`
	Description        string            `json:"description"`
	LastPaymentError   *PaymentError     `json:"last_payment_error"`
	LatestCharge       string            `json:"latest_charge"`
	Livemode           bool              `json:"livemode"`
	Metadata           map[string]string `json:"metadata"`
	PaymentMethod      string            `json:"payment_method"`
	PaymentMethodTypes []string          `json:"payment_method_types"`
	Status             string            `json:"status"`
	Account            string            `json:"account,omitempty"`
}

// MarshalJSON writes empty optional fields as null, as Stripe does.
func (p PaymentIntent) MarshalJSON() ([]byte, error) {
	type alias PaymentIntent
	var canceledAt *int64
	if p.CanceledAt != 0 {
		canceledAt = &p.CanceledAt
	}
	return json.Marshal(struct {
		alias
		CanceledAt         *int64  `json:"canceled_at"`
		CancellationReason *string `json:"cancellation_reason"`
		Customer           *string `json:"customer"`
		Description        *string `json:"description"`
		LatestCharge       *string `json:"latest_charge"`
		PaymentMethod      *string `json:"payment_method"`
	}{alias(p), canceledAt, null(p.CancellationReason), null(p.Customer), null(p.Description),
		null(p.LatestCharge), null(p.PaymentMethod)})
}

// Refund is a Stripe refund of part or all of a charge.
type Refund struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Amount        int64             `json:"amount"`
	Charge        string            `json:"charge"`
	Created       int64             `json:"created"`
	Currency      string            `json:"currency"`
	Metadata      map[string]string `json:"metadata"`
	PaymentIntent string            `json:"payment_intent"`
	Reason        string            `json:"reason"`
	Status        string            `json:"status"`
	Account       string            `json:"account,omitempty"`
}

// MarshalJSON writes empty optional fields as null, as Stripe does.
func (r Refund) MarshalJSON() ([]byte, error) {
	type alias Refund
	return json.Marshal(struct {
		alias
		PaymentIntent *string `json:"payment_intent"`
		Reason        *string `json:"reason"`
	}{alias(r), null(r.PaymentIntent), null(r.Reason)})
}

// Transfer is a Stripe transfer to a connected account.
type Transfer struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Amount        int64             `json:"amount"`
	Created       int64             `json:"created"`
	Currency      string            `json:"currency"`
	Description   string            `json:"description"`
	Destination   string            `json:"destination"`
	Livemode      bool              `json:"livemode"`
	Metadata      map[string]string `json:"metadata"`
	TransferGroup string            `json:"transfer_group"`
	Account       string            `json:"account,omitempty"`
}

// MarshalJSON writes empty optional fields as null, as Stripe does.
func (t Transfer) MarshalJSON() ([]byte, error) {
	type alias Transfer
	return json.Marshal(struct {
		alias
		Description   *string `json:"description"`
		TransferGroup *string `json:"transfer_group"`
	}{alias(t), null(t.Description), null(t.TransferGroup)})
}

// Payout is a Stripe payout to the account's bank account.
type Payout struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"`
	Amount      int64             `json:"amount"`
	ArrivalDate int64             `json:"arrival_date"`
	Created     int64             `json:"created"`
	Currency    string            `json:"currency"`
	Description string            `json:"description"`
	Livemode    bool              `json:"livemode"`
	Metadata    map[string]string `json:"metadata"`
	Method      string            `json:"method"`
	Status      string            `json:"status"`
	Type        string            `json:"type"`
	Account     string            `json:"account,omitempty"`
}

// MarshalJSON writes empty optional fields as null, as Stripe does.
func (p Payout) MarshalJSON() ([]byte, error) {
	type alias Payout
	return json.Marshal(struct {
		alias
		Description *string `json:"description"`
	}{alias(p), null(p.Description)})
}

// GroundTruth is every object the simulator created, in creation order,
// including those whose response never reached the client.
type GroundTruth struct {
	Customers      []Customer      `json:"customers"`
	Charges        []Charge        `json:"charges"`
	PaymentIntents []PaymentIntent `json:"payment_intents"`
	Refunds        []Refund        `json:"refunds"`
	Transfers      []Transfer      `json:"transfers"`
	Payouts        []Payout        `json:"payouts"`
	InvoiceItems   []InvoiceItem   `json:"invoice_items"`
	Invoices       []Invoice       `json:"invoices"`
	Products       []Product       `json:"products"`
	Prices         []Price         `json:"prices"`
	PaymentLinks   []PaymentLink   `json:"payment_links"`
}

// listObject is Stripe's list envelope.
type listObject struct {
	Object  string `json:"object"`
	Data    any    `json:"data"`
	HasMore bool   `json:"has_more"`
	URL     string `json:"url"`
}

// searchResult is Stripe's search envelope.
type searchResult struct {
	Object   string  `json:"object"`
	Data     any     `json:"data"`
	HasMore  bool    `json:"has_more"`
	NextPage *string `json:"next_page"`
	URL      string  `json:"url"`
}

// null maps "" to JSON null.
func null(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
