package stripe

import (
	"context"
	"fmt"
	"strings"

	"github.com/keybrake/keybrake"
)

// Price is the cost of one operation.
type Price struct {
	Amount   int64           // in the minor unit of Currency
	Currency string          // lower-case ISO code
	Micros   keybrake.Micros // in USD, rounded up
}

// Lookup fetches what a request does not say about the money it moves. The
// proxy implements it from its own records, else upstream with the real key.
// Account is the connected account the request acts on (the Stripe-Account
// header), "" for the platform. Every method returns ENOTFOUND when the
// object does not exist and EUNAVAILABLE when it cannot be fetched.
type Lookup interface {
	// PaymentIntent returns the intent's amount and currency.
	PaymentIntent(ctx context.Context, id, account string) (amount int64, currency string, err error)

	// Refundable returns how much of a charge (ch_) or, when chargeID is
	// empty, a payment intent (pi_) is left to refund, and its currency.
	Refundable(ctx context.Context, chargeID, paymentIntentID, account string) (amount int64, currency string, err error)

	// Charge returns a charge's capturable amount and its currency.
	Charge(ctx context.Context, id, account string) (amount int64, currency string, err error)
}

// Pricer prices money-moving operations in USD micros.
type Pricer struct {
	Rates  Rates  // exchange rates to USD; usd needs none
	Lookup Lookup // for operations whose amount or currency is not in the request
}

// Price prices a ClassPriced operation from its parsed body form (nil for no
// body) on behalf of account (the Stripe-Account header, or ""). Callers
// price what Classify says is ClassPriced; Price does not look at confirm, so
// a payment_intents.create without it is priced as if it moved money.
//
//   - charges.create, transfers.create, payouts.create, payment_intents.create:
//     the amount and currency params.
//   - payment_intents.confirm: the intent's amount, from Lookup.PaymentIntent.
//   - payment_intents.capture: amount_to_capture if given, else the intent's
//     amount; the currency is always looked up.
//   - charges.capture: amount if given, else Lookup.Charge's capturable amount.
//   - refunds.create: amount if given, else all that is left to refund of the
//     charge or payment_intent param, from Lookup.Refundable, which also gives
//     the currency. charges.refund and charges.refunds.create (legacy paths)
//     refund the charge in the path the same way. A refund that names a
//     payment_intent besides its charge, or a currency other than the
//     refunded payment's, is refused: Stripe could read either as another
//     refund than the one priced. So is refund_application_fee (anything
//     but false), which also returns an application fee the price does not
//     count.
//
// Returns EINVALID naming the param for a missing or malformed amount,
// currency, charge or payment_intent; EFORBIDDEN for an operation keybrake
// cannot price or a currency with no configured rate; and the Lookup's error,
// wrapped, when a lookup fails.
func (p *Pricer) Price(ctx context.Context, op Operation, form *Form, account string) (Price, error) {
	if form == nil {
		form = &Form{}
	}
	var pr Price
	var err error
	switch op.Name {
	case "charges.create", "transfers.create", "payouts.create", "payment_intents.create":
		pr, err = fromForm(form)
	case "payment_intents.confirm":
		pr, err = p.lookup(ctx, "payment intent", op.ID, func(l Lookup) (int64, string, error) {
			return l.PaymentIntent(ctx, op.ID, account)
		})
	case "payment_intents.capture":
		pr, err = p.capture(ctx, form, "amount_to_capture", op.ID, func(l Lookup) (int64, string, error) {
			return l.PaymentIntent(ctx, op.ID, account)
		})
	case "charges.capture":
		pr, err = p.capture(ctx, form, "amount", op.ID, func(l Lookup) (int64, string, error) {
			return l.Charge(ctx, op.ID, account)
		})
	case "refunds.create":
		pr, err = p.refund(ctx, form, account, "", "")
	case "charges.refund", "charges.refunds.create":
		pr, err = p.refund(ctx, form, account, op.ID, "")
	default:
		return Price{}, keybrake.Errorf(keybrake.EFORBIDDEN, "keybrake cannot price %s.", op.Name)
	}
	if err != nil {
		return Price{}, err
	}
	if pr.Micros, err = p.Rates.ToMicros(pr.Amount, pr.Currency); err != nil {
		return Price{}, err
	}
	return pr, nil
}

// fromForm reads the amount and currency params.
func fromForm(form *Form) (Price, error) {
	amount, err := amountParam(form, "amount")
	if err != nil {
		return Price{}, err
	}
	currency, err := currencyParam(form)
	if err != nil {
		return Price{}, err
	}
	return Price{Amount: amount, Currency: currency}, nil
}

// capture prices a capture: the amount param if given, in the currency of
// the looked-up object, else the looked-up amount.
func (p *Pricer) capture(ctx context.Context, form *Form, param, id string, fetch func(Lookup) (int64, string, error)) (Price, error) {
	var amount int64
	if form.Has(param) {
		var err error
		if amount, err = amountParam(form, param); err != nil {
			return Price{}, err
		}
	}
	pr, err := p.lookup(ctx, "capture", id, fetch)
	if err != nil {
		return Price{}, err
	}
	if amount > 0 {
		pr.Amount = amount
	}
	return pr, nil
}

// refund prices a refund of chargeID (from the path) or of the charge or
// payment_intent param.
func (p *Pricer) refund(ctx context.Context, form *Form, account, chargeID, piID string) (Price, error) {
	var amount int64
	if form.Has("amount") {
		var err error
		if amount, err = amountParam(form, "amount"); err != nil {
			return Price{}, err
		}
	}
	if chargeID == "" {
		var err error
		if chargeID, err = idParam(form, "charge"); err != nil {
			return Price{}, err
		}
		if piID, err = idParam(form, "payment_intent"); err != nil {
			return Price{}, err
		}
		if chargeID == "" && piID == "" {
			return Price{}, keybrake.ErrorParam("charge", "Missing required param: charge or payment_intent.")
		}
	}
	// refund_application_fee also returns the application fee, from the
	// platform's balance to the connected account, in proportion to the
	// refund: money out that Stripe's answer (a refund of amount) does not
	// show, as application_fees.refund, unpriced, moves it.
	if form.Has("refund_application_fee") {
		if v, ok := form.Get("refund_application_fee"); !ok || v != "false" {
			return Price{}, keybrake.ErrorParam("refund_application_fee", "keybrake prices the refund, not the application fee refund_application_fee returns from the platform's balance; refund the fee with application_fees.refund instead. Nothing was forwarded.")
		}
	}
	// keybrake prices one object; a second name of what to refund (a
	// payment_intent next to the charge in the body or a legacy path) is
	// one Stripe could refund instead, a larger one.
	if chargeID != "" && form.Has("payment_intent") {
		return Price{}, keybrake.ErrorParam("payment_intent", "You may only specify one of these parameters: charge, payment_intent. keybrake prices the refund of one of them and forwarded nothing.")
	}
	id := chargeID
	if id == "" {
		id = piID
	}
	pr, err := p.lookup(ctx, "refund", id, func(l Lookup) (int64, string, error) {
		return l.Refundable(ctx, chargeID, piID, account)
	})
	if err != nil {
		return Price{}, err
	}
	if form.Has("currency") {
		// The amount is priced in the refunded charge's currency; a
		// currency param (the currency of a customer-balance refund) that
		// says another is an amount keybrake would count in the wrong unit.
		c, err := currencyParam(form)
		if err != nil {
			return Price{}, err
		}
		if c != pr.Currency {
			return Price{}, keybrake.ErrorParam("currency", "currency %s is not the currency of the payment refunded (%s); keybrake prices the refund in the payment's currency and forwarded nothing.", c, pr.Currency)
		}
	}
	if amount > 0 {
		pr.Amount = amount
	}
	return pr, nil
}

// lookup calls fetch and checks what it returns, so that a confused Lookup
// cannot make money look free.
func (p *Pricer) lookup(ctx context.Context, what, id string, fetch func(Lookup) (int64, string, error)) (Price, error) {
	if id == "" {
		return Price{}, keybrake.Errorf(keybrake.EINVALID, "No object id in the request path.")
	}
	if p.Lookup == nil {
		return Price{}, fmt.Errorf("price %s %s: no lookup configured", what, id)
	}
	amount, currency, err := fetch(p.Lookup)
	if err != nil {
		return Price{}, fmt.Errorf("price %s %s: %w", what, id, err)
	}
	currency = strings.ToLower(currency)
	if _, known := Exponent(currency); !known || amount < 0 {
		return Price{}, fmt.Errorf("price %s %s: lookup returned %d %q", what, id, amount, currency)
	}
	return Price{Amount: amount, Currency: currency}, nil
}

// amountParam parses the amount param name, which must be sent.
func amountParam(form *Form, name string) (int64, error) {
	s, ok := form.Get(name)
	if !ok && form.Has(name) {
		return 0, keybrake.ErrorParam(name, "Invalid integer: %s must be a single value.", name)
	}
	return ParseAmount(name, s)
}

// currencyParam returns the currency param, lower-cased as Stripe does, and
// checks that keybrake knows it.
func currencyParam(form *Form) (string, error) {
	s, ok := form.Get("currency")
	if !ok || s == "" {
		return "", keybrake.ErrorParam("currency", "Missing required param: currency.")
	}
	c := strings.ToLower(s)
	if !ValidCurrencyCode(c) {
		return "", keybrake.ErrorParam("currency", "Invalid currency: %s.", printable(s))
	}
	if _, known := Exponent(c); !known {
		return "", keybrake.ErrorParam("currency", "Invalid currency: %s. keybrake does not support it.", c)
	}
	return c, nil
}

// idParam returns the optional object id param name, "" when absent.
func idParam(form *Form, name string) (string, error) {
	if !form.Has(name) {
		return "", nil
	}
	s, ok := form.Get(name)
	if !ok || s == "" || len(s) > 255 {
		return "", keybrake.ErrorParam(name, "Invalid %s: want an object id.", name)
	}
	return s, nil
}

// Target prices the most that op's object can move once op with form has
// run, for an operation on an existing object (HoldsObject). held is what
// keybrake already holds on the object for the key, nil when nothing is.
//
//   - payment_intents.update: the amount and currency params where given,
//     the rest from Lookup.PaymentIntent (never from held, whose amount and
//     currency are those of the hold's largest value, not the intent's).
//   - payment_intents.increment_authorization: the amount param (the new
//     total, required), in the currency of the looked-up intent.
//   - payment_intents.confirm: held when something is held (it moves at
//     most what the object can); else what Price says. With
//     amount_to_confirm, that amount or the intent's if larger, in the
//     looked-up intent's currency, as an increment.
//   - payment_intents.capture, charges.capture: held, or the amount_to_capture
//     (amount) param in the object's looked-up currency when that is worth
//     more than held (an overcapture); with nothing held, what Price says.
//
// Returns the errors Price returns. payment_intents.cancel moves nothing:
// callers do not price it.
func (p *Pricer) Target(ctx context.Context, op Operation, form *Form, account string, held *Price) (Price, error) {
	if form == nil {
		form = &Form{}
	}
	if !Raises(op, form) {
		if held != nil {
			return p.overcapture(ctx, op, form, account, *held)
		}
		if op.Name == "payment_intents.update" {
			return p.intent(ctx, op, account)
		}
		return p.Price(ctx, op, form, account)
	}
	// The base is the intent as it is now, never the hold: a hold keeps the
	// amount and currency of its largest value, which need not be the
	// intent's (1000 usd held, the intent lowered to 1400 jpy), and Stripe
	// applies a new currency to the intent's amount, and an amount or an
	// increment to the intent's currency.
	base, err := p.intent(ctx, op, account)
	if err != nil {
		return Price{}, err
	}
	pr := Price{Amount: base.Amount, Currency: base.Currency}
	if param := raisedAmount(op); form.Has(param) || op.Name == "payment_intents.increment_authorization" {
		amount, err := amountParam(form, param)
		if err != nil {
			return Price{}, err
		}
		pr.Amount = amount
		if op.Name == "payment_intents.confirm" {
			// A lower amount_to_confirm may leave the rest of the intent
			// confirmable: count the larger.
			pr.Amount = max(amount, base.Amount)
		}
	}
	if form.Has("currency") {
		c, err := currencyParam(form)
		if err != nil {
			return Price{}, err
		}
		pr.Currency = c
	}
	if pr.Micros, err = p.Rates.ToMicros(pr.Amount, pr.Currency); err != nil {
		return Price{}, err
	}
	return pr, nil
}

// raisedAmount is the parameter carrying the amount op raises its intent to.
func raisedAmount(op Operation) string {
	if op.Name == "payment_intents.confirm" {
		return amountToConfirm
	}
	return "amount"
}

// overcapture returns held, or a capture's amount when it is worth more
// than held: an intent authorized with request_overcapture can be captured
// above its amount, and that capture moves more than the hold. The amount is
// in the object's currency, looked up, which need not be the hold's (a hold
// keeps the currency of its largest value).
func (p *Pricer) overcapture(ctx context.Context, op Operation, form *Form, account string, held Price) (Price, error) {
	param := ""
	switch op.Name {
	case "payment_intents.capture":
		param = "amount_to_capture"
	case "charges.capture":
		param = "amount"
	}
	if param == "" || !form.Has(param) {
		return held, nil
	}
	amount, err := amountParam(form, param)
	if err != nil {
		return Price{}, err
	}
	pr, err := p.lookup(ctx, "capture", op.ID, func(l Lookup) (int64, string, error) {
		if op.Name == "charges.capture" {
			return l.Charge(ctx, op.ID, account)
		}
		return l.PaymentIntent(ctx, op.ID, account)
	})
	if err != nil {
		return Price{}, err
	}
	pr.Amount = amount
	if pr.Micros, err = p.Rates.ToMicros(pr.Amount, pr.Currency); err != nil {
		return Price{}, err
	}
	if pr.Micros <= held.Micros {
		return held, nil
	}
	return pr, nil
}

// intent prices the payment intent in op's path at its current amount.
func (p *Pricer) intent(ctx context.Context, op Operation, account string) (Price, error) {
	pr, err := p.lookup(ctx, "payment intent", op.ID, func(l Lookup) (int64, string, error) {
		return l.PaymentIntent(ctx, op.ID, account)
	})
	if err != nil {
		return Price{}, err
	}
	if pr.Micros, err = p.Rates.ToMicros(pr.Amount, pr.Currency); err != nil {
		return Price{}, err
	}
	return pr, nil
}
