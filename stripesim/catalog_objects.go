package stripesim

import "encoding/json"

// Product is a Stripe product: a catalogue entry that charges nothing by
// itself. DefaultPrice is set when it was created with default_price_data.
type Product struct {
	ID                  string            `json:"id"`
	Object              string            `json:"object"`
	Active              bool              `json:"active"`
	Created             int64             `json:"created"`
	DefaultPrice        string            `json:"default_price"`
	Description         string            `json:"description"`
	Images              []string          `json:"images"`
	Livemode            bool              `json:"livemode"`
	MarketingFeatures   []any             `json:"marketing_features"`
	Metadata            map[string]string `json:"metadata"`
	Name                string            `json:"name"`
	Shippable           *bool             `json:"shippable"`
	StatementDescriptor string            `json:"statement_descriptor"`
	UnitLabel           string            `json:"unit_label"`
	Updated             int64             `json:"updated"`
	URL                 string            `json:"url"`
	Account             string            `json:"account,omitempty"`
}

// MarshalJSON writes empty optional fields as null, as Stripe does.
func (p Product) MarshalJSON() ([]byte, error) {
	type alias Product
	return json.Marshal(struct {
		alias
		DefaultPrice        *string `json:"default_price"`
		Description         *string `json:"description"`
		PackageDimensions   *string `json:"package_dimensions"`
		StatementDescriptor *string `json:"statement_descriptor"`
		TaxCode             *string `json:"tax_code"`
		UnitLabel           *string `json:"unit_label"`
		URL                 *string `json:"url"`
	}{alias(p), null(p.DefaultPrice), null(p.Description), nil, null(p.StatementDescriptor), nil,
		null(p.UnitLabel), null(p.URL)})
}

// Recurring is how often a recurring price bills.
type Recurring struct {
	Interval      string  `json:"interval"`
	IntervalCount int64   `json:"interval_count"`
	Meter         *string `json:"meter"`
	UsageType     string  `json:"usage_type"`
}

// Price is a Stripe price of a product: per_unit billing, unit_amount in
// the currency's minor unit, one_time or recurring.
type Price struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Active        bool              `json:"active"`
	BillingScheme string            `json:"billing_scheme"`
	Created       int64             `json:"created"`
	Currency      string            `json:"currency"`
	Livemode      bool              `json:"livemode"`
	LookupKey     string            `json:"lookup_key"`
	Metadata      map[string]string `json:"metadata"`
	Nickname      string            `json:"nickname"`
	Product       string            `json:"product"`
	Recurring     *Recurring        `json:"recurring"`
	TaxBehavior   string            `json:"tax_behavior"`
	Type          string            `json:"type"`
	UnitAmount    int64             `json:"unit_amount"`
	Account       string            `json:"account,omitempty"`
}

// MarshalJSON writes empty optional fields as null, and unit_amount_decimal
// as Stripe does.
func (p Price) MarshalJSON() ([]byte, error) {
	type alias Price
	return json.Marshal(struct {
		alias
		CustomUnitAmount  *string         `json:"custom_unit_amount"`
		CurrencyOptions   map[string]any  `json:"currency_options,omitempty"`
		LookupKey         *string         `json:"lookup_key"`
		Nickname          *string         `json:"nickname"`
		TiersMode         *string         `json:"tiers_mode"`
		TransformQuantity *string         `json:"transform_quantity"`
		UnitAmountDecimal json.RawMessage `json:"unit_amount_decimal"`
	}{alias(p), nil, nil, null(p.LookupKey), null(p.Nickname), nil, nil,
		mustMarshal(itoa(p.UnitAmount))})
}

// ItemPricing is the pricing of an invoice item or line made from a price.
type ItemPricing struct {
	Type         string `json:"type"`
	PriceDetails struct {
		Price   string `json:"price"`
		Product string `json:"product"`
	} `json:"price_details"`
	UnitAmountDecimal string `json:"unit_amount_decimal"`
}

// newItemPricing is the pricing of an item made from p.
func newItemPricing(p *Price) *ItemPricing {
	ip := &ItemPricing{Type: "price_details", UnitAmountDecimal: itoa(p.UnitAmount)}
	ip.PriceDetails.Price, ip.PriceDetails.Product = p.ID, p.Product
	return ip
}

// PaymentLinkLine is one line a payment link sells. Stripe answers lines
// only on GET /v1/payment_links/{id}/line_items, so they are not part of
// the payment link's JSON.
type PaymentLinkLine struct {
	Price    string `json:"price"`
	Quantity int64  `json:"quantity"`
}

// AfterCompletion is what a payment link shows once paid.
type AfterCompletion struct {
	Type               string `json:"type"`
	HostedConfirmation *struct {
		CustomMessage *string `json:"custom_message"`
	} `json:"hosted_confirmation,omitempty"`
	Redirect *struct {
		URL string `json:"url"`
	} `json:"redirect,omitempty"`
}

// PaymentLink is a Stripe payment link: a hosted page, at URL, where
// anyone may pay for its lines. The simulator serves no such page; nothing
// is paid through it.
type PaymentLink struct {
	ID              string            `json:"id"`
	Object          string            `json:"object"`
	Active          bool              `json:"active"`
	AfterCompletion AfterCompletion   `json:"after_completion"`
	Currency        string            `json:"currency"`
	Lines           []PaymentLinkLine `json:"-"`
	Livemode        bool              `json:"livemode"`
	Metadata        map[string]string `json:"metadata"`
	URL             string            `json:"url"`
	Account         string            `json:"account,omitempty"`
}

// MarshalJSON writes the payment link with Stripe's defaults for what the
// simulator does not model.
func (l PaymentLink) MarshalJSON() ([]byte, error) {
	type alias PaymentLink
	return json.Marshal(struct {
		alias
		AllowPromotionCodes      bool           `json:"allow_promotion_codes"`
		Application              *string        `json:"application"`
		ApplicationFeeAmount     *int64         `json:"application_fee_amount"`
		ApplicationFeePercent    *float64       `json:"application_fee_percent"`
		AutomaticTax             map[string]any `json:"automatic_tax"`
		BillingAddressCollection string         `json:"billing_address_collection"`
		ConsentCollection        *string        `json:"consent_collection"`
		CustomFields             []any          `json:"custom_fields"`
		CustomText               map[string]any `json:"custom_text"`
		CustomerCreation         string         `json:"customer_creation"`
		InactiveMessage          *string        `json:"inactive_message"`
		InvoiceCreation          *string        `json:"invoice_creation"`
		OnBehalfOf               *string        `json:"on_behalf_of"`
		PaymentIntentData        *string        `json:"payment_intent_data"`
		PaymentMethodCollection  string         `json:"payment_method_collection"`
		PaymentMethodTypes       []string       `json:"payment_method_types"`
		PhoneNumberCollection    map[string]any `json:"phone_number_collection"`
		ShippingAddrCollection   *string        `json:"shipping_address_collection"`
		ShippingOptions          []any          `json:"shipping_options"`
		SubmitType               string         `json:"submit_type"`
		SubscriptionData         *string        `json:"subscription_data"`
		TaxIDCollection          map[string]any `json:"tax_id_collection"`
		TransferData             *string        `json:"transfer_data"`
	}{alias: alias(l),
		AutomaticTax:             map[string]any{"enabled": false, "liability": nil},
		BillingAddressCollection: "auto",
		CustomFields:             []any{},
		CustomText:               map[string]any{"after_submit": nil, "shipping_address": nil, "submit": nil, "terms_of_service_acceptance": nil},
		CustomerCreation:         "if_required",
		PaymentMethodCollection:  "always",
		PhoneNumberCollection:    map[string]any{"enabled": false},
		ShippingOptions:          []any{},
		SubmitType:               "auto",
		TaxIDCollection:          map[string]any{"enabled": false, "required": "never"},
	})
}
