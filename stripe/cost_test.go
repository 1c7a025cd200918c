package stripe_test

import (
	"context"
	"errors"
	"testing"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

// Lookup is a stripe.Lookup test double answering from maps keyed by id.
type Lookup struct {
	Intents map[string]stripe.Price // by pi_ id: amount and currency
	Charges map[string]stripe.Price // by ch_ id: capturable amount and currency
	Left    map[string]stripe.Price // by ch_ or pi_ id: left to refund
	Err     error                   // returned by every method when set
	Calls   []string                // "method id account", in order
}

var _ stripe.Lookup = (*Lookup)(nil)

func (l *Lookup) answer(method, id, account string, m map[string]stripe.Price) (int64, string, error) {
	l.Calls = append(l.Calls, method+" "+id+" "+account)
	if l.Err != nil {
		return 0, "", l.Err
	}
	p, ok := m[id]
	if !ok {
		return 0, "", keybrake.Errorf(keybrake.ENOTFOUND, "No such object: '%s'", id)
	}
	return p.Amount, p.Currency, nil
}

// PaymentIntent implements stripe.Lookup.
func (l *Lookup) PaymentIntent(ctx context.Context, id, account string) (int64, string, error) {
	return l.answer("PaymentIntent", id, account, l.Intents)
}

// Refundable implements stripe.Lookup.
func (l *Lookup) Refundable(ctx context.Context, chargeID, paymentIntentID, account string) (int64, string, error) {
	if chargeID != "" {
		return l.answer("Refundable", chargeID, account, l.Left)
	}
	return l.answer("Refundable", paymentIntentID, account, l.Left)
}

// Charge implements stripe.Lookup.
func (l *Lookup) Charge(ctx context.Context, id, account string) (int64, string, error) {
	return l.answer("Charge", id, account, l.Charges)
}

func newLookup() *Lookup {
	return &Lookup{
		Intents: map[string]stripe.Price{
			"pi_eur": {Amount: 5000, Currency: "eur"},
			"pi_jpy": {Amount: 1000, Currency: "jpy"},
			"pi_bad": {Amount: -5, Currency: "usd"},
			"pi_xyz": {Amount: 5, Currency: "xyz"},
			"pi_up":  {Amount: 100, Currency: "USD"},
		},
		Charges: map[string]stripe.Price{
			"ch_usd": {Amount: 2500, Currency: "usd"},
		},
		Left: map[string]stripe.Price{
			"ch_usd": {Amount: 1500, Currency: "usd"},
			"pi_kwd": {Amount: 2000, Currency: "kwd"},
			"ch_chf": {Amount: 100, Currency: "chf"},
		},
	}
}

var testRates = stripe.Rates{"eur": 1_080_000, "jpy": 6_700, "kwd": 3_250_000, "gbp": 1_270_000}

func TestPricer_Price(t *testing.T) {
	for _, tt := range []struct {
		name         string
		method, path string
		body         string
		account      string
		want         stripe.Price
		calls        []string
	}{
		{"Charge", "POST", "/v1/charges", "amount=2000&currency=usd&source=tok_visa", "",
			stripe.Price{2000, "usd", 20_000_000}, nil},
		{"ChargeUpperCurrency", "POST", "/v1/charges", "amount=2000&currency=EUR", "",
			stripe.Price{2000, "eur", 21_600_000}, nil},
		{"ChargeJPY", "POST", "/v1/charges", "amount=1000&currency=jpy", "",
			stripe.Price{1000, "jpy", 6_700_000}, nil},
		{"ChargeKWD", "POST", "/v1/charges", "amount=1000&currency=kwd", "",
			stripe.Price{1000, "kwd", 3_250_000}, nil},
		{"PaymentIntentConfirmTrue", "POST", "/v1/payment_intents", "amount=999&currency=gbp&confirm=true", "",
			stripe.Price{999, "gbp", 12_687_300}, nil},
		{"Confirm", "POST", "/v1/payment_intents/pi_eur/confirm", "payment_method=pm_card_visa", "acct_1",
			stripe.Price{5000, "eur", 54_000_000}, []string{"PaymentIntent pi_eur acct_1"}},
		{"ConfirmLowerCasesLookup", "POST", "/v1/payment_intents/pi_up/confirm", "", "",
			stripe.Price{100, "usd", 1_000_000}, []string{"PaymentIntent pi_up "}},
		{"CapturePI", "POST", "/v1/payment_intents/pi_jpy/capture", "", "",
			stripe.Price{1000, "jpy", 6_700_000}, []string{"PaymentIntent pi_jpy "}},
		{"CapturePIPartial", "POST", "/v1/payment_intents/pi_jpy/capture", "amount_to_capture=500", "",
			stripe.Price{500, "jpy", 3_350_000}, []string{"PaymentIntent pi_jpy "}},
		{"CaptureCharge", "POST", "/v1/charges/ch_usd/capture", "", "",
			stripe.Price{2500, "usd", 25_000_000}, []string{"Charge ch_usd "}},
		{"CaptureChargePartial", "POST", "/v1/charges/ch_usd/capture", "amount=100", "",
			stripe.Price{100, "usd", 1_000_000}, []string{"Charge ch_usd "}},
		{"RefundFullCharge", "POST", "/v1/refunds", "charge=ch_usd", "",
			stripe.Price{1500, "usd", 15_000_000}, []string{"Refundable ch_usd "}},
		{"RefundPartialCharge", "POST", "/v1/refunds", "charge=ch_usd&amount=300", "",
			stripe.Price{300, "usd", 3_000_000}, []string{"Refundable ch_usd "}},
		{"RefundPartialChargeSameCurrency", "POST", "/v1/refunds", "charge=ch_usd&amount=300&currency=USD", "",
			stripe.Price{300, "usd", 3_000_000}, []string{"Refundable ch_usd "}},
		{"RefundPaymentIntent", "POST", "/v1/refunds", "payment_intent=pi_kwd", "acct_2",
			stripe.Price{2000, "kwd", 6_500_000}, []string{"Refundable pi_kwd acct_2"}},
		{"RefundLegacyPath", "POST", "/v1/charges/ch_usd/refunds", "amount=10", "",
			stripe.Price{10, "usd", 100_000}, []string{"Refundable ch_usd "}},
		{"RefundLegacyVerb", "POST", "/v1/charges/ch_usd/refund", "", "",
			stripe.Price{1500, "usd", 15_000_000}, []string{"Refundable ch_usd "}},
		{"Transfer", "POST", "/v1/transfers", "amount=100&currency=eur&destination=acct_1", "",
			stripe.Price{100, "eur", 1_080_000}, nil},
		{"Payout", "POST", "/v1/payouts", "amount=100&currency=usd", "",
			stripe.Price{100, "usd", 1_000_000}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lookup := newLookup()
			p := &stripe.Pricer{Rates: testRates, Lookup: lookup}
			op := MustParseOperation(t, tt.method, tt.path)
			form := MustParseForm(t, tt.body)
			if c := stripe.Classify(op, form); c != stripe.ClassPriced {
				t.Fatalf("%s is %s, not priced", op.Name, c)
			}
			got, err := p.Price(context.Background(), op, form, tt.account)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("Price = %+v, want %+v", got, tt.want)
			}
			if len(lookup.Calls) != len(tt.calls) {
				t.Fatalf("calls=%q, want %q", lookup.Calls, tt.calls)
			}
			for i := range tt.calls {
				if lookup.Calls[i] != tt.calls[i] {
					t.Fatalf("calls=%q, want %q", lookup.Calls, tt.calls)
				}
			}
		})
	}
}

func TestPricer_PriceErrors(t *testing.T) {
	for _, tt := range []struct {
		name         string
		method, path string
		body         string
		code, param  string
	}{
		{"ErrNoAmount", "POST", "/v1/charges", "currency=usd", keybrake.EINVALID, "amount"},
		{"ErrEmptyAmount", "POST", "/v1/charges", "amount=&currency=usd", keybrake.EINVALID, "amount"},
		{"ErrZeroAmount", "POST", "/v1/charges", "amount=0&currency=usd", keybrake.EINVALID, "amount"},
		{"ErrNegativeAmount", "POST", "/v1/charges", "amount=-100&currency=usd", keybrake.EINVALID, "amount"},
		{"ErrDecimalAmount", "POST", "/v1/charges", "amount=10.50&currency=usd", keybrake.EINVALID, "amount"},
		{"ErrHugeAmount", "POST", "/v1/charges", "amount=100000000&currency=usd", keybrake.EINVALID, "amount"},
		{"ErrNestedAmount", "POST", "/v1/charges", "amount[x]=1&currency=usd", keybrake.EINVALID, "amount"},
		{"ErrListAmount", "POST", "/v1/charges", "amount[]=1&currency=usd", keybrake.EINVALID, "amount"},
		{"ErrNoCurrency", "POST", "/v1/charges", "amount=100", keybrake.EINVALID, "currency"},
		{"ErrBadCurrency", "POST", "/v1/charges", "amount=100&currency=us", keybrake.EINVALID, "currency"},
		{"ErrUnknownCurrency", "POST", "/v1/charges", "amount=100&currency=xyz", keybrake.EINVALID, "currency"},
		{"ErrNestedCurrency", "POST", "/v1/charges", "amount=100&currency[a]=usd", keybrake.EINVALID, "currency"},
		{"ErrNoRate", "POST", "/v1/charges", "amount=100&currency=chf", keybrake.EFORBIDDEN, ""},
		{"ErrNoRateLookup", "POST", "/v1/refunds", "charge=ch_chf", keybrake.EFORBIDDEN, ""},
		{"ErrPINoAmount", "POST", "/v1/payment_intents", "currency=usd&confirm=true", keybrake.EINVALID, "amount"},
		{"ErrTransferNoCurrency", "POST", "/v1/transfers", "amount=1&destination=acct_1", keybrake.EINVALID, "currency"},
		{"ErrPayoutNoAmount", "POST", "/v1/payouts", "currency=usd", keybrake.EINVALID, "amount"},
		{"ErrRefundNoTarget", "POST", "/v1/refunds", "amount=100", keybrake.EINVALID, "charge"},
		{"ErrRefundNestedCharge", "POST", "/v1/refunds", "charge[id]=ch_usd", keybrake.EINVALID, "charge"},
		{"ErrRefundBadAmount", "POST", "/v1/refunds", "charge=ch_usd&amount=abc", keybrake.EINVALID, "amount"},
		{"ErrRefundTwoTargets", "POST", "/v1/refunds", "charge=ch_usd&payment_intent=pi_kwd", keybrake.EINVALID, "payment_intent"},
		{"ErrRefundLegacyPathAndIntent", "POST", "/v1/charges/ch_usd/refund", "payment_intent=pi_kwd", keybrake.EINVALID, "payment_intent"},
		{"ErrRefundLegacyListAndIntent", "POST", "/v1/charges/ch_usd/refunds", "payment_intent=pi_kwd&amount=10", keybrake.EINVALID, "payment_intent"},
		{"ErrRefundOtherCurrency", "POST", "/v1/refunds", "charge=ch_usd&amount=10&currency=kwd", keybrake.EINVALID, "currency"},
		{"ErrRefundApplicationFee", "POST", "/v1/refunds", "charge=ch_usd&amount=10&refund_application_fee=true", keybrake.EINVALID, "refund_application_fee"},
		{"ErrRefundApplicationFeeLegacy", "POST", "/v1/charges/ch_usd/refunds", "refund_application_fee=yes", keybrake.EINVALID, "refund_application_fee"},
		{"ErrCaptureBadAmount", "POST", "/v1/payment_intents/pi_eur/capture", "amount_to_capture=0", keybrake.EINVALID, "amount_to_capture"},
		{"ErrConfirmNotFound", "POST", "/v1/payment_intents/pi_nope/confirm", "", keybrake.ENOTFOUND, ""},
		{"ErrLookupNegative", "POST", "/v1/payment_intents/pi_bad/confirm", "", keybrake.EINTERNAL, ""},
		{"ErrLookupUnknownCurrency", "POST", "/v1/payment_intents/pi_xyz/confirm", "", keybrake.EINTERNAL, ""},
		{"ErrUnpriced", "POST", "/v1/invoices/in_1/pay", "", keybrake.EFORBIDDEN, ""},
		{"ErrWrite", "POST", "/v1/customers", "", keybrake.EFORBIDDEN, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := &stripe.Pricer{Rates: testRates, Lookup: newLookup()}
			op := MustParseOperation(t, tt.method, tt.path)
			got, err := p.Price(context.Background(), op, MustParseForm(t, tt.body), "")
			if keybrake.ErrorCode(err) != tt.code || keybrake.ErrorParamOf(err) != tt.param {
				t.Fatalf("Price = %+v, %v (param %q); want code %s param %q", got, err, keybrake.ErrorParamOf(err), tt.code, tt.param)
			}
			if got != (stripe.Price{}) {
				t.Fatalf("Price = %+v with an error", got)
			}
		})
	}

	t.Run("ErrLookupFails", func(t *testing.T) {
		down := keybrake.Errorf(keybrake.EUNAVAILABLE, "Stripe is down")
		lookup := newLookup()
		lookup.Err = down
		p := &stripe.Pricer{Rates: testRates, Lookup: lookup}
		_, err := p.Price(context.Background(), MustParseOperation(t, "POST", "/v1/payment_intents/pi_eur/confirm"), nil, "")
		if !errors.Is(err, down) || keybrake.ErrorCode(err) != keybrake.EUNAVAILABLE {
			t.Fatalf("err=%v, want the lookup's error", err)
		}
	})
	t.Run("ErrNoLookup", func(t *testing.T) {
		p := &stripe.Pricer{Rates: testRates}
		_, err := p.Price(context.Background(), MustParseOperation(t, "POST", "/v1/payment_intents/pi_eur/confirm"), nil, "")
		if keybrake.ErrorCode(err) != keybrake.EINTERNAL {
			t.Fatalf("err=%v, want EINTERNAL", err)
		}
	})
	t.Run("NilFormWithoutLookup", func(t *testing.T) {
		p := &stripe.Pricer{}
		_, err := p.Price(context.Background(), MustParseOperation(t, "POST", "/v1/charges"), nil, "")
		if keybrake.ErrorParamOf(err) != "amount" {
			t.Fatalf("err=%v, want EINVALID amount", err)
		}
	})
}
