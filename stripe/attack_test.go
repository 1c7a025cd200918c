package stripe

import (
	"context"
	"testing"
)

// attackBodies asserts each body of method+path classifies as want.
func attackBodies(t *testing.T, method, path string, want Class, bodies ...string) {
	t.Helper()
	op, err := ParseOperation(method, path)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bodies {
		f, err := ParseForm(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if got := Classify(op, f); got != want {
			t.Errorf("%s %s %q: %s, want %s", method, path, b, got, want)
		}
	}
}

// Before API version 2019-10-17 the customer balance was account_balance;
// a client picks the version with Stripe-Version, which keybrake forwards, so
// account_balance=-100000 is spendable credit (and a positive one is billed)
// exactly as balance is.
func TestAttackCanon_CustomerLegacyAccountBalance(t *testing.T) {
	attackBodies(t, "POST", "/v1/customers", ClassUnpriced, "account_balance=-100000", "account_balance=5000")
	attackBodies(t, "POST", "/v1/customers/cus_1", ClassUnpriced, "account_balance=-100000", "account_balance=5000")
}

// customers.update with source: "for each of the customer's current
// subscriptions, if the subscription bills automatically and is in the
// past_due state, then the latest open invoice ... will be retried" (the
// spec's description of POST /v1/customers/{customer}). That is a charge,
// now, on a free write. A new customer has no subscriptions, so
// customers.create with source stays free.
func TestAttackCanon_CustomerUpdateSourceRetriesInvoices(t *testing.T) {
	attackBodies(t, "POST", "/v1/customers/cus_1", ClassUnpriced, "source=tok_visa", "source[object]=card&source[exp_month]=12")
	attackBodies(t, "POST", "/v1/customers", ClassWrite, "source=tok_visa")
}

// Before API version 2019-02-19 an account's payout settings were top-level
// parameters of accounts.update: payout_schedule and debit_negative_balances
// (now settings[payouts][...]). Sent with an old Stripe-Version they
// schedule payouts or debit the account's bank account, which
// settings[payouts] is unpriced for.
func TestAttackCanon_AccountLegacyPayoutParams(t *testing.T) {
	attackBodies(t, "POST", "/v1/accounts/acct_1", ClassUnpriced,
		"payout_schedule[interval]=daily", "payout_schedule[delay_days]=2",
		"debit_negative_balances=true", "payout_statement_descriptor=x")
}

// A payment intent created with
// payment_method_options[card][request_overcapture]=if_available can be
// captured above its authorized amount (amount_to_capture > amount). With a
// hold on the intent, Target returned the hold as is for a capture, so the
// capture went upstream without raising it: the key moved more than it
// held, and more than its caps. A capture above the hold must raise it.
func TestAttackCanon_OvercaptureAboveHold(t *testing.T) {
	p := &Pricer{Rates: Rates{"gbp": 1_270_000}, Lookup: fixedLookup{10000, "usd"}}
	held := Price{Amount: 10000, Currency: "usd"}
	held.Micros, _ = p.Rates.ToMicros(held.Amount, held.Currency)
	for _, tt := range []struct{ path, body string }{
		{"/v1/payment_intents/pi_1/capture", "amount_to_capture=12000"},
		{"/v1/charges/ch_1/capture", "amount=12000"},
	} {
		op, err := ParseOperation("POST", tt.path)
		if err != nil {
			t.Fatal(err)
		}
		f, _ := ParseForm(tt.body)
		got, err := p.Target(t.Context(), op, f, "", &held)
		if err != nil {
			t.Fatal(err)
		}
		if got.Amount < 12000 {
			t.Errorf("%s %s: target %d %s, below the 12000 captured", op.Name, tt.body, got.Amount, got.Currency)
		}
	}
}

// A hold keeps the currency of its largest value: 1000 usd held on an intent
// lowered to 780 gbp ($9.91). An overcapture of 1000 gbp ($12.70) is not
// above the hold's 1000 by amount, but it is by value: it must raise.
func TestAttackCanon_OvercaptureInIntentCurrency(t *testing.T) {
	p := &Pricer{Rates: Rates{"gbp": 1_270_000}, Lookup: fixedLookup{780, "gbp"}}
	held := Price{Amount: 1000, Currency: "usd", Micros: 10_000_000}
	op, err := ParseOperation("POST", "/v1/payment_intents/pi_1/capture")
	if err != nil {
		t.Fatal(err)
	}
	f, _ := ParseForm("amount_to_capture=1000")
	got, err := p.Target(t.Context(), op, f, "", &held)
	if err != nil {
		t.Fatal(err)
	}
	if got.Currency != "gbp" || got.Micros != 12_700_000 {
		t.Fatalf("target %+v, want 1000 gbp at $12.70", got)
	}
}

// A confirm with amount_to_confirm moves that amount, not the intent's;
// Target returned the hold for every confirm. It is the larger of
// amount_to_confirm and the intent's amount, in the intent's currency,
// held or not.
func TestAttackCanon_AmountToConfirm(t *testing.T) {
	p := &Pricer{Rates: Rates{"gbp": 1_270_000}, Lookup: fixedLookup{5000, "gbp"}}
	op, err := ParseOperation("POST", "/v1/payment_intents/pi_1/confirm")
	if err != nil {
		t.Fatal(err)
	}
	held := &Price{Amount: 5000, Currency: "gbp", Micros: 63_500_000}
	for _, tt := range []struct {
		body string
		held *Price
		want int64
	}{
		{"amount_to_confirm=90000", held, 90000},
		{"amount_to_confirm=90000", nil, 90000},
		{"amount_to_confirm=3000", held, 5000},
	} {
		f, _ := ParseForm(tt.body)
		got, err := p.Target(t.Context(), op, f, "", tt.held)
		if err != nil {
			t.Fatal(err)
		}
		if got.Amount != tt.want || got.Currency != "gbp" {
			t.Errorf("%s (held %v): target %d %s, want %d gbp", tt.body, tt.held != nil, got.Amount, got.Currency, tt.want)
		}
	}
}

// fixedLookup answers every lookup with one amount and currency.
type fixedLookup struct {
	amount   int64
	currency string
}

func (l fixedLookup) PaymentIntent(context.Context, string, string) (int64, string, error) {
	return l.amount, l.currency, nil
}

func (l fixedLookup) Charge(context.Context, string, string) (int64, string, error) {
	return l.amount, l.currency, nil
}

func (l fixedLookup) Refundable(context.Context, string, string, string) (int64, string, error) {
	return l.amount, l.currency, nil
}

// prices.update is unpriced with lookup_key or transfer_lookup_key, since
// integrations that resolve prices by lookup key (checkout, pricing pages,
// the merchant's own backend) charge whatever price holds it. prices.create
// with transfer_lookup_key=true moves the key too, "atomically remove the
// lookup key from the existing price, and assign it to this price" (the
// spec), onto a price of the key holder's choosing. A new lookup key that
// nobody resolves yet moves nothing.
func TestAttackRedteam_PriceCreateTransfersLookupKey(t *testing.T) {
	attackBodies(t, "POST", "/v1/prices", ClassUnpriced,
		"currency=usd&unit_amount=999999&product=prod_1&lookup_key=pro_monthly&transfer_lookup_key=true",
		"currency=usd&unit_amount=999999&product=prod_1&lookup_key=pro_monthly&transfer_lookup_key=")
	attackBodies(t, "POST", "/v1/prices", ClassWrite,
		"currency=usd&unit_amount=1000&product=prod_1",
		"currency=usd&unit_amount=1000&product=prod_1&lookup_key=new_key&transfer_lookup_key=false")
}

// shipping_rates.update changes fixed_amount[currency_options][…][amount]
// and tax_behavior of a rate that open checkout sessions and payment
// links (made by anyone, not only through keybrake) already charge, as
// prices.update's currency_options and tax_behavior do, which are unpriced.
func TestAttackRedteam_ShippingRateUpdateRaisesAmount(t *testing.T) {
	attackBodies(t, "POST", "/v1/shipping_rates/shr_1", ClassUnpriced,
		"fixed_amount[currency_options][eur][amount]=99999", "tax_behavior=exclusive")
	attackBodies(t, "POST", "/v1/shipping_rates/shr_1", ClassWrite,
		"active=false", "metadata[k]=v", "active=true&expand[]=x")
}

// Removing a discount (customers.discount.delete) or voiding a credit note
// is unpriced because what subscriptions and invoices collect by
// themselves goes up. Voiding or expiring a billing credit grant does the
// same to the metered usage the grant was paying for.
func TestAttackRedteam_CreditGrantRemovalRaisesInvoices(t *testing.T) {
	attackBodies(t, "POST", "/v1/billing/credit_grants/credgr_1/void", ClassUnpriced, "")
	attackBodies(t, "POST", "/v1/billing/credit_grants/credgr_1/expire", ClassUnpriced, "")
}

// Releasing a subscription schedule drops a cancellation the schedule set
// on its subscription unless preserve_cancel_date=true ("Keep any
// cancellation on the subscription that the schedule has set"): a
// subscription due to end keeps billing, as subscriptions.update with
// cancel_at_period_end=false would, which is unpriced.
func TestAttackRedteam_ScheduleReleaseDropsCancellation(t *testing.T) {
	attackBodies(t, "POST", "/v1/subscription_schedules/sub_sched_1/release", ClassUnpriced,
		"", "preserve_cancel_date=false", "preserve_cancel_date=")
	attackBodies(t, "POST", "/v1/subscription_schedules/sub_sched_1/release", ClassWrite,
		"preserve_cancel_date=true", "preserve_cancel_date=true&expand[]=subscription")
}

// A declined confirmation is answered with an error that carries the
// payment intent, which outlives it: back in requires_payment_method, it
// can be confirmed again with its client secret, so it is held. An error
// without one, or with a canceled one, leaves nothing.
func TestAttackRedteam_ReadErrorOutcome(t *testing.T) {
	for _, tt := range []struct {
		body  string
		ok    bool
		state string
	}{
		{`{"error":{"type":"card_error","code":"card_declined","payment_intent":{"id":"pi_1","object":"payment_intent","amount":1000,"amount_capturable":0,"amount_received":0,"currency":"usd","status":"requires_payment_method"}}}`, true, OutcomeHeld},
		{`{"error":{"type":"card_error","payment_intent":{"id":"pi_1","object":"payment_intent","amount":1000,"amount_received":0,"currency":"usd","status":"canceled"}}}`, true, OutcomeReleased},
		{`{"error":{"type":"card_error","code":"card_declined","charge":"ch_1"}}`, false, ""},
		{`{"error":{"type":"invalid_request_error","payment_intent":null}}`, false, ""},
		{`{"error":{"payment_intent":{"id":"ch_1","object":"charge","amount":1000,"currency":"usd"}}}`, false, ""},
		{`not json`, false, ""},
	} {
		o, ok := ReadErrorOutcome([]byte(tt.body))
		if ok != tt.ok || ok && (o.State != tt.state || o.ID != "pi_1" || o.State == OutcomeHeld && o.Amount != 1000) {
			t.Errorf("%s: %+v %v, want ok=%v state %q", tt.body, o, ok, tt.ok, tt.state)
		}
	}
}

// Every alias is a write Stripe has, of the same class as the others of
// its group: one operation under several names.
func TestAttackRedteam_AliasesAreOneOperation(t *testing.T) {
	rules := map[string]WriteRule{}
	for _, r := range WriteRules() {
		rules[r.Name] = r
	}
	for _, g := range aliasGroups {
		for _, name := range g {
			r, ok := rules[name]
			if !ok {
				t.Errorf("alias %s is not a Stripe write", name)
				continue
			}
			if first := rules[g[0]]; r.Class != first.Class {
				t.Errorf("%s is %s, but %s is %s", name, r.Class, g[0], first.Class)
			}
			if got := Aliases(name); len(got) != len(g) || got[0] != g[0] {
				t.Errorf("Aliases(%s) = %v", name, got)
			}
		}
	}
	if Aliases("charges.create") != nil {
		t.Error("charges.create has no alias")
	}
}

// POST /v1/charges/{id}/refund (charges.refund) answers the charge, not
// the refund: its amount_captured is the whole charge. Read as the money
// the request moved, a $10 refund of a $100 charge settled at $100 (an
// ALARM, and $90 counted that never moved). The refund's own amount is
// what was reserved; a refund that released an uncaptured charge still
// moved nothing.
func TestAttackRedteam_LegacyRefundAnswersTheCharge(t *testing.T) {
	captured := []byte(`{"id":"ch_1","object":"charge","amount":10000,"amount_captured":10000,"amount_refunded":1000,"captured":true,"refunded":false,"status":"succeeded","currency":"usd"}`)
	if o := ReadOutcomeOf("charges.refund", captured); o.Known {
		t.Errorf("charges.refund read as %+v; want the reservation to stand", o)
	}
	if o := ReadOutcomeOf("charges.capture", captured); !o.Known || o.Amount != 10000 {
		t.Errorf("charges.capture read as %+v", o)
	}
	released := []byte(`{"id":"ch_1","object":"charge","amount":10000,"amount_captured":0,"amount_refunded":10000,"captured":false,"refunded":true,"status":"succeeded","currency":"usd"}`)
	if o := ReadOutcomeOf("charges.refund", released); o.State != OutcomeReleased {
		t.Errorf("refund of an authorization read as %+v", o)
	}
}

// terminal.readers.collect_payment_method "updates the PaymentIntent with
// card details before manual confirmation", and on a reader whose
// configuration (a free write) offers tips, the tip collected is added to
// the intent: its amount rises past the hold keybrake made, by a free
// write, and the confirm moves the raised amount. Only with skip_tipping
// does it read the card and nothing else.
func TestAttackRedteam_ReaderTipRaisesIntent(t *testing.T) {
	attackBodies(t, "POST", "/v1/terminal/readers/tmr_1/collect_payment_method", ClassUnpriced,
		"payment_intent=pi_1", "payment_intent=pi_1&collect_config[skip_tipping]=false",
		"payment_intent=pi_1&collect_config[tipping][amount_eligible]=1000")
	attackBodies(t, "POST", "/v1/terminal/readers/tmr_1/collect_payment_method", ClassWrite,
		"payment_intent=pi_1&collect_config[skip_tipping]=true")
}
