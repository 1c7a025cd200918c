package billing

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
	"golang.org/x/text/unicode/norm"
)

// Limits of the wire format.
const (
	MaxEventBytes     = 64 << 10 // the largest message body DecodeEvent reads
	MaxIDLength       = 255      // customer_id, billing_period, stripe_customer, payment_method, source
	MaxDescription    = 1000     // Stripe's limit on description
	MaxMetadataKeys   = 40       // Stripe allows 50; keybrake keeps room for its own
	MaxMetadataKey    = 40       // Stripe's limit on a metadata key
	MaxMetadataValue  = 500      // Stripe's limit on a metadata value
	maxAmountDigits   = 8        // Stripe's limit: 99,999,999 minor units
	reservedMetaKeyNS = "keybrake_"
)

// Event is one billing event: charge Amount of Currency to a customer for a
// billing period. It is the payload of every transport (NSQ, NATS JetStream,
// ZeroMQ), shared with producers and consumers in other languages.
//
// # Wire format
//
// A UTF-8 JSON object of at most 64 KiB, nothing before or after it but
// whitespace:
//
//	{
//	  "customer_id":     "acct_42",          required; your customer, 1-255 printable characters
//	                                          (every ID: Unicode NFC, no format characters)
//	  "billing_period":  "2026-11",          required; which bill, 1-255 printable characters
//	  "amount":          4200,               required; integer minor units, 1 to 99999999
//	                                          (no decimals, no exponent, no quotes)
//	  "currency":        "usd",              required; lower-case ISO code Stripe supports
//	  "stripe_customer": "cus_…",            the Stripe customer to charge
//	  "payment_method":  "pm_…",             charge through a PaymentIntent confirmed at once
//	  "source":          "tok_…",            charge through the Charges API
//	  "description":     "November plan",    optional, at most 1000 characters
//	  "metadata":        {"plan": "pro"}     optional; string values; at most 40 keys of at
//	                                          most 40 characters, values of at most 500; keys
//	                                          starting with "keybrake_" are reserved
//	}
//
// At least one of stripe_customer, payment_method and source is required,
// and payment_method and source exclude each other. Unknown fields,
// duplicate fields, null, and values of the wrong type are refused: a
// producer's typo must not silently change what is charged.
type Event struct {
	CustomerID     string            `json:"customer_id"`
	BillingPeriod  string            `json:"billing_period"`
	Amount         int64             `json:"amount"`
	Currency       string            `json:"currency"`
	StripeCustomer string            `json:"stripe_customer,omitempty"`
	PaymentMethod  string            `json:"payment_method,omitempty"`
	Source         string            `json:"source,omitempty"`
	Description    string            `json:"description,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
}

// Key returns the event's idempotency key: Key(namespace, CustomerID,
// BillingPeriod). One customer has one bill per period, whatever its
// amount.
//
// The amount is deliberately not in the key. If it were, the same bill
// re-published with a corrected (or corrupted) amount would get a new key
// and be charged as a second bill. With the amount out of the key, it lands
// on the entry of the first one, whose Fingerprint differs, and is recorded
// as a conflict (failed, dead-lettered) for a person to resolve. To bill a
// customer twice in one period on purpose, make the period say so
// ("2026-11/overage-1").
func (e *Event) Key(namespace string) string {
	return Key(namespace, e.CustomerID, e.BillingPeriod)
}

// Fingerprint returns the hex SHA-256 of every business field of the event
// (metadata sorted by key), length-prefixed like Key: two events with the
// same key and different fingerprints are one bill sent twice with
// different contents.
func (e *Event) Fingerprint(namespace string) string {
	h := sha256.New()
	writeField(h, "keybrake.billing.Event/v1")
	for _, f := range []string{namespace, e.CustomerID, e.BillingPeriod, fmt.Sprint(e.Amount), e.Currency,
		e.StripeCustomer, e.PaymentMethod, e.Source, e.Description} {
		writeField(h, f)
	}
	keys := make([]string, 0, len(e.Metadata))
	for k := range e.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	writeField(h, fmt.Sprint(len(keys)))
	for _, k := range keys {
		writeField(h, k)
		writeField(h, e.Metadata[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Validate returns EINVALID naming the first unacceptable field.
func (e *Event) Validate() error {
	for _, f := range []struct {
		name, v  string
		required bool
	}{
		{"customer_id", e.CustomerID, true}, {"billing_period", e.BillingPeriod, true},
		{"stripe_customer", e.StripeCustomer, false}, {"payment_method", e.PaymentMethod, false},
		{"source", e.Source, false},
	} {
		if err := checkID(f.name, f.v, f.required); err != nil {
			return err
		}
	}
	if e.Amount <= 0 || e.Amount > stripe.MaxAmount {
		return keybrake.ErrorParam("amount", "amount must be a positive integer of at most %d digits (minor units), got %d.", maxAmountDigits, e.Amount)
	}
	if e.Currency == "" {
		return keybrake.ErrorParam("currency", "currency is required.")
	}
	if _, ok := stripe.Exponent(e.Currency); !ok {
		return keybrake.ErrorParam("currency", "currency %q is not a supported lower-case ISO currency code.", clip(e.Currency))
	}
	if e.StripeCustomer == "" && e.PaymentMethod == "" && e.Source == "" {
		return keybrake.ErrorParam("stripe_customer", "One of stripe_customer, payment_method or source is required.")
	}
	if e.PaymentMethod != "" && e.Source != "" {
		return keybrake.ErrorParam("source", "payment_method and source exclude each other.")
	}
	if utf8.RuneCountInString(e.Description) > MaxDescription {
		return keybrake.ErrorParam("description", "description must be at most %d characters.", MaxDescription)
	}
	if len(e.Metadata) > MaxMetadataKeys {
		return keybrake.ErrorParam("metadata", "metadata may have at most %d keys, got %d.", MaxMetadataKeys, len(e.Metadata))
	}
	for k, v := range e.Metadata {
		switch {
		case k == "" || utf8.RuneCountInString(k) > MaxMetadataKey || strings.ContainsAny(k, "[]") || hasControl(k):
			return keybrake.ErrorParam("metadata", "metadata key %q must be 1 to %d characters without brackets or control characters.", clip(k), MaxMetadataKey)
		case strings.HasPrefix(k, reservedMetaKeyNS):
			return keybrake.ErrorParam("metadata", "metadata key %q is reserved: keys starting with %q are keybrake's.", clip(k), reservedMetaKeyNS)
		case utf8.RuneCountInString(v) > MaxMetadataValue:
			return keybrake.ErrorParam("metadata", "metadata value of %q must be at most %d characters.", clip(k), MaxMetadataValue)
		}
	}
	return nil
}

func checkID(name, v string, required bool) error {
	switch {
	case v == "" && required:
		return keybrake.ErrorParam(name, "%s is required.", name)
	case len(v) > MaxIDLength:
		return keybrake.ErrorParam(name, "%s must be at most %d bytes.", name, MaxIDLength)
	case hasControl(v) || strings.TrimSpace(v) != v:
		return keybrake.ErrorParam(name, "%s must be printable, without leading or trailing spaces.", name)
	case hasFormat(v):
		// A byte-order mark or zero-width space a producer's CSV or
		// editor slipped in is invisible and would make another key.
		return keybrake.ErrorParam(name, "%s must not contain invisible format characters (U+200B, U+FEFF…).", name)
	case !norm.NFC.IsNormalString(v):
		// "José" composed and decomposed look the same and would be two
		// keys, two charges for one bill.
		return keybrake.ErrorParam(name, "%s must be in Unicode normalization form C (composed characters): the same ID in another form would be another bill.", name)
	}
	return nil
}

// hasFormat reports whether s has a character of Unicode category Cf
// (zero-width spaces and joiners, byte-order marks, direction marks).
func hasFormat(s string) bool {
	for _, r := range s {
		if unicode.Is(unicode.Cf, r) {
			return true
		}
	}
	return false
}

func hasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return true
		}
	}
	return false
}

// clip shortens hostile input before it goes into an error message.
func clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	for i := 64; i > 0; i-- {
		if utf8.RuneStart(s[i]) {
			return s[:i] + "…"
		}
	}
	return ""
}

// DecodeEvent decodes and validates one message body in the wire format
// documented on Event. Every refusal is EINVALID naming the field (Param)
// and saying what is wrong: a body over MaxEventBytes, invalid UTF-8 or
// JSON, anything but one object, unknown or duplicate fields, null or
// wrongly typed values, an amount that is not a positive integer of at most
// eight digits, an unknown currency, a field too long.
func DecodeEvent(body []byte) (*Event, error) {
	if len(body) > MaxEventBytes {
		return nil, keybrake.Errorf(keybrake.EINVALID, "The event is %d bytes; at most %d are accepted.", len(body), MaxEventBytes)
	}
	if !utf8.Valid(body) {
		return nil, keybrake.Errorf(keybrake.EINVALID, "The event is not valid UTF-8.")
	}
	d := &decoder{dec: json.NewDecoder(bytes.NewReader(body))}
	d.dec.UseNumber()
	e, err := d.event()
	if err != nil {
		return nil, err
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return e, nil
}

// decoder walks the JSON tokens itself, since encoding/json neither rejects
// duplicate fields nor tells a float from an integer.
type decoder struct {
	dec *json.Decoder
}

func (d *decoder) event() (*Event, error) {
	e := &Event{}
	fields := map[string]func(json.RawMessage) error{
		"customer_id":     stringInto("customer_id", &e.CustomerID),
		"billing_period":  stringInto("billing_period", &e.BillingPeriod),
		"currency":        stringInto("currency", &e.Currency),
		"stripe_customer": stringInto("stripe_customer", &e.StripeCustomer),
		"payment_method":  stringInto("payment_method", &e.PaymentMethod),
		"source":          stringInto("source", &e.Source),
		"description":     stringInto("description", &e.Description),
		"amount":          func(raw json.RawMessage) error { return amountInto(raw, &e.Amount) },
		"metadata":        func(raw json.RawMessage) error { return metadataInto(raw, &e.Metadata) },
	}
	seen, err := d.object("", func(name string, raw json.RawMessage) error {
		set, ok := fields[name]
		if !ok {
			return keybrake.ErrorParam(name, "Unknown field %q in the event.", clip(name))
		}
		return set(raw)
	})
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"customer_id", "billing_period", "amount", "currency"} {
		if !seen[name] {
			return nil, keybrake.ErrorParam(name, "%s is required.", name)
		}
	}
	if _, err := d.dec.Token(); err != io.EOF {
		return nil, keybrake.Errorf(keybrake.EINVALID, "The event has data after its JSON object.")
	}
	return e, nil
}

// object reads one JSON object, calling fn with each member, and refuses
// duplicate names. parent names the object in errors ("" for the event).
func (d *decoder) object(parent string, fn func(name string, raw json.RawMessage) error) (map[string]bool, error) {
	param := parent
	tok, err := d.dec.Token()
	if err != nil {
		return nil, syntaxError(param, err)
	}
	if delim, ok := tok.(json.Delim); !ok || delim != '{' {
		if parent == "" {
			return nil, keybrake.Errorf(keybrake.EINVALID, "The event must be a JSON object.")
		}
		return nil, keybrake.ErrorParam(parent, "%s must be a JSON object.", parent)
	}
	seen := map[string]bool{}
	for d.dec.More() {
		tok, err := d.dec.Token()
		if err != nil {
			return nil, syntaxError(param, err)
		}
		name, _ := tok.(string)
		full := name
		if parent != "" {
			full = parent + "[" + name + "]"
		}
		if seen[name] {
			return nil, keybrake.ErrorParam(clip(full), "Duplicate field %q.", clip(full))
		}
		seen[name] = true
		var raw json.RawMessage
		if err := d.dec.Decode(&raw); err != nil {
			return nil, syntaxError(clip(full), err)
		}
		if err := fn(name, raw); err != nil {
			return nil, err
		}
	}
	if _, err := d.dec.Token(); err != nil { // the closing brace
		return nil, syntaxError(param, err)
	}
	return seen, nil
}

func syntaxError(param string, err error) error {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return &keybrake.Error{Code: keybrake.EINVALID, Param: param, Message: fmt.Sprintf("The event is not valid JSON at byte %d: %v.", se.Offset, se)}
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return &keybrake.Error{Code: keybrake.EINVALID, Param: param, Message: "The event is truncated or empty."}
	}
	return &keybrake.Error{Code: keybrake.EINVALID, Param: param, Message: fmt.Sprintf("The event is not valid JSON: %v.", err)}
}

// stringInto returns a setter that accepts only a JSON string.
func stringInto(name string, dst *string) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		if len(raw) == 0 || raw[0] != '"' {
			return keybrake.ErrorParam(name, "%s must be a string, got %s.", name, kind(raw))
		}
		return json.Unmarshal(raw, dst)
	}
}

// amountInto accepts only a JSON integer literal of 1 to 8 digits without a
// sign, a fraction, an exponent or leading zeros.
func amountInto(raw json.RawMessage, dst *int64) error {
	s := string(raw)
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return keybrake.ErrorParam("amount", "amount must be an integer number of minor units, got %s.", kind(raw))
	}
	if strings.ContainsAny(s, ".eE") {
		return keybrake.ErrorParam("amount", "amount must be an integer number of minor units (4200 for $42.00), not %s.", clip(s))
	}
	if s[0] == '-' || s == "0" {
		return keybrake.ErrorParam("amount", "amount must be positive, got %s.", clip(s))
	}
	if len(s) > maxAmountDigits {
		return keybrake.ErrorParam("amount", "amount must be at most %d digits (%d), got %s.", maxAmountDigits, stripe.MaxAmount, clip(s))
	}
	var n int64
	for i := 0; i < len(s); i++ {
		n = n*10 + int64(s[i]-'0')
	}
	*dst = n
	return nil
}

// metadataInto accepts a JSON object of strings, refusing duplicate keys.
func metadataInto(raw json.RawMessage, dst *map[string]string) error {
	if len(raw) == 0 || raw[0] != '{' {
		return keybrake.ErrorParam("metadata", "metadata must be an object of strings, got %s.", kind(raw))
	}
	m := map[string]string{}
	d := &decoder{dec: json.NewDecoder(bytes.NewReader(raw))}
	if _, err := d.object("metadata", func(name string, v json.RawMessage) error {
		var s string
		if err := stringInto("metadata["+clip(name)+"]", &s)(v); err != nil {
			return err
		}
		m[name] = s
		return nil
	}); err != nil {
		return err
	}
	*dst = m
	return nil
}

// kind names the JSON type of raw for error messages.
func kind(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}
