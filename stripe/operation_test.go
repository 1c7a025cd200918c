package stripe_test

import (
	"strings"
	"testing"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

func TestParseOperation(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		for _, tt := range []struct {
			method, path    string
			name, id, subID string
		}{
			{"POST", "/v1/charges", "charges.create", "", ""},
			{"GET", "/v1/charges", "charges.list", "", ""},
			{"GET", "/v1/charges/search", "charges.search", "", ""},
			{"GET", "/v1/charges/ch_1", "charges.retrieve", "ch_1", ""},
			{"POST", "/v1/charges/ch_1", "charges.update", "ch_1", ""},
			{"POST", "/v1/charges/ch_1/capture", "charges.capture", "ch_1", ""},
			{"POST", "/v1/charges/ch_1/refunds", "charges.refunds.create", "ch_1", ""},
			{"POST", "/v1/charges/ch_1/refund", "charges.refund", "ch_1", ""},
			{"POST", "/v1/payment_intents", "payment_intents.create", "", ""},
			{"POST", "/v1/payment_intents/pi_123/confirm", "payment_intents.confirm", "pi_123", ""},
			{"POST", "/v1/payment_intents/pi_123/capture", "payment_intents.capture", "pi_123", ""},
			{"POST", "/v1/payment_intents/pi_123/cancel", "payment_intents.cancel", "pi_123", ""},
			{"POST", "/v1/payment_intents/pi_123", "payment_intents.update", "pi_123", ""},
			{"GET", "/v1/payment_intents/search", "payment_intents.search", "", ""},
			{"GET", "/v1/customers/cus_1", "customers.retrieve", "cus_1", ""},
			{"DELETE", "/v1/customers/cus_1", "customers.delete", "cus_1", ""},
			{"POST", "/v1/customers", "customers.create", "", ""},
			{"GET", "/v1/customers/cus_1/sources", "customers.sources.list", "cus_1", ""},
			{"POST", "/v1/customers/cus_1/sources", "customers.sources.create", "cus_1", ""},
			{"GET", "/v1/customers/cus_1/sources/card_1", "customers.sources.retrieve", "cus_1", "card_1"},
			{"POST", "/v1/customers/cus_1/sources/card_1", "customers.sources.update", "cus_1", "card_1"},
			{"DELETE", "/v1/customers/cus_1/sources/card_1", "customers.sources.delete", "cus_1", "card_1"},
			{"POST", "/v1/customers/cus_1/sources/ba_1/verify", "customers.sources.verify", "cus_1", "ba_1"},
			{"DELETE", "/v1/customers/cus_1/discount", "customers.discount.delete", "cus_1", ""},
			{"GET", "/v1/customers/cus_1/cash_balance", "customers.cash_balance.retrieve", "cus_1", ""},
			{"POST", "/v1/customers/cus_1/cash_balance", "customers.cash_balance.update", "cus_1", ""},
			{"POST", "/v1/checkout/sessions", "checkout.sessions.create", "", ""},
			{"GET", "/v1/checkout/sessions/cs_1/line_items", "checkout.sessions.line_items.list", "cs_1", ""},
			{"POST", "/v1/checkout/sessions/cs_1/expire", "checkout.sessions.expire", "cs_1", ""},
			{"POST", "/v1/billing_portal/sessions", "billing_portal.sessions.create", "", ""},
			{"POST", "/v1/invoices/in_1/pay", "invoices.pay", "in_1", ""},
			{"POST", "/v1/invoices/in_1/finalize", "invoices.finalize", "in_1", ""},
			{"POST", "/v1/invoices/in_1/void", "invoices.void", "in_1", ""},
			{"GET", "/v1/invoices/upcoming", "invoices.upcoming", "", ""},
			{"GET", "/v1/invoices/upcoming/lines", "invoices.upcoming_lines", "", ""},
			{"POST", "/v1/invoices/create_preview", "invoices.create_preview", "", ""},
			{"POST", "/v1/payment_methods/pm_1/attach", "payment_methods.attach", "pm_1", ""},
			{"POST", "/v1/payment_methods/pm_1/detach", "payment_methods.detach", "pm_1", ""},
			{"POST", "/v1/transfers/tr_1/reversals", "transfers.reversals.create", "tr_1", ""},
			{"GET", "/v1/transfers/tr_1/reversals/trr_1", "transfers.reversals.retrieve", "tr_1", "trr_1"},
			{"POST", "/v1/application_fees/fee_1/refunds", "application_fees.refunds.create", "fee_1", ""},
			{"GET", "/v1/balance", "balance.retrieve", "", ""},
			{"GET", "/v1/balance_transactions/txn_1", "balance_transactions.retrieve", "txn_1", ""},
			{"POST", "/v1/accounts/acct_1/login_links", "accounts.login_links.create", "acct_1", ""},
			{"POST", "/v1/test_helpers/test_clocks/clock_1/advance", "test_helpers.test_clocks.advance", "clock_1", ""},
			{"POST", "/v1/test_helpers/issuing/cards/ic_1/shipping/ship", "test_helpers.issuing.cards.shipping.ship", "ic_1", ""},
			{"POST", "/v1/terminal/readers/tmr_1/process_payment_intent", "terminal.readers.process_payment_intent", "tmr_1", ""},
			{"GET", "/v1/tax/settings", "tax.settings.retrieve", "", ""},
			{"POST", "/v1/subscription_items/si_1/usage_records", "subscription_items.usage_records.create", "si_1", ""},
			{"POST", "/v1/accounts/acct_1/people", "accounts.people.create", "acct_1", ""},
			{"POST", "/v1/apple_pay/domains", "apple_pay.domains.create", "", ""},
			{"DELETE", "/v1/apple_pay/domains/apwc_1", "apple_pay.domains.delete", "apwc_1", ""},
			{"POST", "/v1/apps/secrets/delete", "apps.secrets.delete", "", ""},
			{"GET", "/v1/apps/secrets/find", "apps.secrets.find", "", ""},
			{"POST", "/v1/payment_records/report_payment", "payment_records.report_payment", "", ""},
			{"POST", "/v1/tax/transactions/create_reversal", "tax.transactions.create_reversal", "", ""},
			{"POST", "/v1/test_helpers/issuing/transactions/create_force_capture", "test_helpers.issuing.transactions.create_force_capture", "", ""},
			{"POST", "/v1/customers/cus_1/subscriptions", "customers.subscriptions.create", "cus_1", ""},
			{"POST", "/v1/test_helpers/issuing/authorizations/iauth_1/fraud_challenges/respond", "test_helpers.issuing.authorizations.fraud_challenges.respond", "iauth_1", ""},
			{"GET", "/v1/keybrake/key", "keybrake.key", "", ""},
			{"HEAD", "/v1/charges/ch_1", "charges.retrieve", "ch_1", ""},
			{"PUT", "/v1/charges", "charges.put", "", ""},
			{"POST", "/v1/widgets/w_1/frobnicate", "widgets.frobnicate", "w_1", ""},
			{"POST", "/v1/coupons/SUMMER.25-OFF", "coupons.update", "SUMMER.25-OFF", ""},
			{"GET", "/v1/products/prod%2Bx", "products.retrieve", "prod+x", ""},
			{"POST", "/v1/%63harges", "charges.create", "", ""},
			{"POST", "/v1/charges/ch_1/create", "charges.create.create", "ch_1", ""},
			{"POST", "/v1/customers/cus_1/update", "customers.update.create", "cus_1", ""},
		} {
			op, err := stripe.ParseOperation(tt.method, tt.path)
			if err != nil {
				t.Errorf("%s %s: %v", tt.method, tt.path, err)
				continue
			}
			if op.Name != tt.name || op.ID != tt.id || op.SubID != tt.subID || op.Path != tt.path {
				t.Errorf("%s %s = %+v, want name=%s id=%s sub=%s", tt.method, tt.path, op, tt.name, tt.id, tt.subID)
			}
			if op.Name != op.Resource+"."+op.Action {
				t.Errorf("%s %s: name %q is not resource %q + action %q", tt.method, tt.path, op.Name, op.Resource, op.Action)
			}
		}
	})

	t.Run("ErrInvalid", func(t *testing.T) {
		for _, tt := range []struct{ method, path string }{
			{"POST", "/v1/../vault/keys"},
			{"POST", "/v1/charges/.."},
			{"POST", "/v1/charges/."},
			{"POST", "/v1//charges"},
			{"POST", "/v1/charges/"},
			{"POST", "/v1/charges%2f.."},
			{"POST", "/v1/charges%2F.."},
			{"POST", "/v1/charges/%2e%2e"},
			{"POST", "/v1/charges/%2E"},
			{"POST", "/v1/charges/ch_1%5c"},
			{"POST", "/v1/charges/%252e"},
			{"POST", "/v1/charges/%zz"},
			{"POST", "/v1/charges/%2"},
			{"POST", "/v1/charges/ch%00"},
			{"POST", "/v1/charges/ch\x00"},
			{"POST", "/v1/charges/ch 1"},
			{"POST", "/v1/charges/ch%201"},
			{"POST", "/v1/charges/ch\\1"},
			{"POST", "/v1/charges?amount=1"},
			{"POST", "/v1/charges#x"},
			{"POST", "/v1/chargés"},
			{"POST", "/v1/Charges"},
			{"POST", "/v1/charges.json"},
			{"POST", "/v1/customers.sources"},
			{"POST", "/v1/payment_intents/pi_1/Confirm"},
			{"POST", "/v2/charges"},
			{"POST", "/charges"},
			{"POST", "/v1/"},
			{"POST", "/v1"},
			{"POST", ""},
			{"POST", "v1/charges"},
			{"POST", "/v1/charges/" + strings.Repeat("a", 510)},
			{"", "/v1/charges"},
			{"post", "/v1/charges"},
			{"PO ST", "/v1/charges"},
		} {
			op, err := stripe.ParseOperation(tt.method, tt.path)
			if keybrake.ErrorCode(err) != keybrake.EINVALID {
				t.Errorf("ParseOperation(%q, %q) = %+v, %v; want EINVALID", tt.method, tt.path, op, err)
			}
		}
	})
}

func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		method, path, body string
		parsed, classified stripe.Class
	}{
		// Reads.
		{"GET", "/v1/charges", "", stripe.ClassRead, stripe.ClassRead},
		{"GET", "/v1/payment_intents/pi_1", "", stripe.ClassRead, stripe.ClassRead},
		{"GET", "/v1/keybrake/key", "", stripe.ClassRead, stripe.ClassRead},
		{"HEAD", "/v1/charges", "", stripe.ClassRead, stripe.ClassRead},
		{"GET", "/v1/charges/ch_1/capture", "", stripe.ClassRead, stripe.ClassRead},

		// Priced.
		{"POST", "/v1/charges", "amount=100&currency=usd", stripe.ClassPriced, stripe.ClassPriced},
		{"POST", "/v1/payment_intents", "amount=100&currency=usd&confirm=true", stripe.ClassPriced, stripe.ClassPriced},
		{"POST", "/v1/payment_intents", "amount=100&currency=usd&confirm=", stripe.ClassPriced, stripe.ClassPriced},
		{"POST", "/v1/payment_intents", "amount=100&currency=usd&confirm[x]=1", stripe.ClassPriced, stripe.ClassPriced},
		{"POST", "/v1/payment_intents/pi_1/confirm", "", stripe.ClassPriced, stripe.ClassPriced},
		{"POST", "/v1/payment_intents/pi_1/capture", "", stripe.ClassPriced, stripe.ClassPriced},
		{"POST", "/v1/charges/ch_1/capture", "", stripe.ClassPriced, stripe.ClassPriced},
		{"POST", "/v1/refunds", "charge=ch_1", stripe.ClassPriced, stripe.ClassPriced},
		{"POST", "/v1/charges/ch_1/refunds", "", stripe.ClassPriced, stripe.ClassPriced},
		{"POST", "/v1/transfers", "amount=1&currency=usd&destination=acct_1", stripe.ClassPriced, stripe.ClassPriced},
		{"POST", "/v1/payouts", "amount=1&currency=usd", stripe.ClassPriced, stripe.ClassPriced},

		// Body-dependent writes.
		// An unconfirmed intent is held: its client secret can confirm it.
		{"POST", "/v1/payment_intents", "amount=100&currency=usd", stripe.ClassPriced, stripe.ClassPriced},
		{"POST", "/v1/payment_intents", "amount=100&currency=usd&confirm=false", stripe.ClassPriced, stripe.ClassPriced},
		{"POST", "/v1/payment_intents/pi_1", "metadata[a]=b", stripe.ClassPriced, stripe.ClassPriced},
		{"POST", "/v1/payment_intents/pi_1", "confirm=true", stripe.ClassPriced, stripe.ClassUnpriced},
		{"DELETE", "/v1/subscriptions/sub_1", "", stripe.ClassUnpriced, stripe.ClassWrite},
		{"POST", "/v1/customers", "email=a@b", stripe.ClassUnpriced, stripe.ClassWrite},
		{"POST", "/v1/customers/cus_1", "", stripe.ClassUnpriced, stripe.ClassWrite},
		{"POST", "/v1/prices/price_1", "", stripe.ClassUnpriced, stripe.ClassWrite},
		{"POST", "/v1/invoices", "customer=cus_1&auto_advance=false&pending_invoice_items_behavior=exclude", stripe.ClassUnpriced, stripe.ClassWrite},
		{"POST", "/v1/invoices", "customer=cus_1&auto_advance=false", stripe.ClassUnpriced, stripe.ClassUnpriced},
		{"POST", "/v1/invoices", "customer=cus_1", stripe.ClassUnpriced, stripe.ClassUnpriced},
		{"POST", "/v1/invoices/in_1", "", stripe.ClassUnpriced, stripe.ClassWrite},
		{"DELETE", "/v1/subscriptions/sub_1", "invoice_now=true", stripe.ClassUnpriced, stripe.ClassUnpriced},

		// Known money-free writes.
		{"DELETE", "/v1/customers/cus_1", "", stripe.ClassWrite, stripe.ClassWrite},
		{"POST", "/v1/payment_methods/pm_1/attach", "customer=cus_1", stripe.ClassWrite, stripe.ClassWrite},
		{"POST", "/v1/payment_methods/pm_1/detach", "", stripe.ClassWrite, stripe.ClassWrite},
		{"POST", "/v1/payment_intents/pi_1/cancel", "", stripe.ClassPriced, stripe.ClassPriced},
		{"POST", "/v1/charges/ch_1", "description=x", stripe.ClassWrite, stripe.ClassWrite},
		{"POST", "/v1/setup_intents", "", stripe.ClassWrite, stripe.ClassWrite},
		{"POST", "/v1/setup_intents/seti_1/confirm", "", stripe.ClassWrite, stripe.ClassWrite},
		{"POST", "/v1/products", "name=x", stripe.ClassWrite, stripe.ClassWrite},

		// Unpriced: moves money, or might.
		{"POST", "/v1/invoices/in_1/pay", "", stripe.ClassUnpriced, stripe.ClassUnpriced},
		{"POST", "/v1/subscriptions", "customer=cus_1", stripe.ClassUnpriced, stripe.ClassUnpriced},
		{"POST", "/v1/subscriptions/sub_1", "items[0][price]=price_1", stripe.ClassUnpriced, stripe.ClassUnpriced},
		{"POST", "/v1/invoices/in_1/finalize", "", stripe.ClassUnpriced, stripe.ClassUnpriced},
		{"POST", "/v1/subscriptions/sub_1/cancel", "", stripe.ClassUnpriced, stripe.ClassUnpriced}, // not a Stripe endpoint: DELETE cancels
		{"POST", "/v1/checkout/sessions", "", stripe.ClassUnpriced, stripe.ClassUnpriced},
		{"POST", "/v1/payment_links", "", stripe.ClassUnpriced, stripe.ClassUnpriced},
		{"POST", "/v1/subscription_schedules", "", stripe.ClassUnpriced, stripe.ClassUnpriced},
		{"POST", "/v1/topups", "", stripe.ClassUnpriced, stripe.ClassUnpriced},
		{"POST", "/v1/application_fees/fee_1/refunds", "", stripe.ClassUnpriced, stripe.ClassUnpriced},
		{"POST", "/v1/transfers/tr_1/reversals", "", stripe.ClassUnpriced, stripe.ClassUnpriced},
		{"POST", "/v1/credit_notes", "", stripe.ClassUnpriced, stripe.ClassUnpriced},
		{"POST", "/v1/payment_intents/pi_1/increment_authorization", "", stripe.ClassPriced, stripe.ClassPriced},
		{"POST", "/v1/terminal/readers/tmr_1/process_payment_intent", "", stripe.ClassUnpriced, stripe.ClassUnpriced},
		{"POST", "/v1/widgets", "", stripe.ClassUnpriced, stripe.ClassUnpriced},
		{"DELETE", "/v1/widgets/w_1", "", stripe.ClassUnpriced, stripe.ClassUnpriced},
		{"PUT", "/v1/customers/cus_1", "", stripe.ClassUnpriced, stripe.ClassUnpriced},
		{"PATCH", "/v1/charges", "", stripe.ClassUnpriced, stripe.ClassUnpriced},
		{"POST", "/v1/keybrake/key", "", stripe.ClassUnpriced, stripe.ClassUnpriced},
	} {
		op, err := stripe.ParseOperation(tt.method, tt.path)
		if err != nil {
			t.Errorf("%s %s: %v", tt.method, tt.path, err)
			continue
		}
		if op.Class != tt.parsed {
			t.Errorf("%s %s (%s): parsed class %s, want %s", tt.method, tt.path, op.Name, op.Class, tt.parsed)
		}
		form := MustParseForm(t, tt.body)
		if got := stripe.Classify(op, form); got != tt.classified {
			t.Errorf("%s %s %q (%s): Classify = %s, want %s", tt.method, tt.path, tt.body, op.Name, got, tt.classified)
		}
	}

	t.Run("NilForm", func(t *testing.T) {
		op := MustParseOperation(t, "POST", "/v1/payment_intents")
		if got := stripe.Classify(op, nil); got != stripe.ClassPriced {
			t.Fatalf("Classify(nil) = %s", got)
		}
	})
}

func TestScopeOf(t *testing.T) {
	t.Run("Customers", func(t *testing.T) {
		s := stripe.ScopeOf(MustParseOperation(t, "POST", "/v1/customers/cus_1/sources"), MustParseForm(t, "source=tok_1"))
		if len(s.Customers) != 1 || s.Customers[0] != "cus_1" {
			t.Fatalf("customers=%v", s.Customers)
		}
		s = stripe.ScopeOf(MustParseOperation(t, "POST", "/v1/charges"), MustParseForm(t, "amount=1&currency=EUR&customer=cus_2"))
		if len(s.Customers) != 1 || s.Customers[0] != "cus_2" {
			t.Fatalf("customers=%v", s.Customers)
		}
		if len(s.Currencies) != 1 || s.Currencies[0] != "eur" {
			t.Fatalf("currencies=%v", s.Currencies)
		}
	})
	t.Run("NestedCurrencies", func(t *testing.T) {
		s := stripe.ScopeOf(MustParseOperation(t, "POST", "/v1/checkout/sessions"),
			MustParseForm(t, "line_items[0][price_data][currency]=usd&line_items[1][price_data][currency]=gbp&line_items[2][price_data][currency]=usd"))
		if strings.Join(s.Currencies, ",") != "usd,gbp" {
			t.Fatalf("currencies=%v", s.Currencies)
		}
	})
	t.Run("Accounts", func(t *testing.T) {
		s := stripe.ScopeOf(MustParseOperation(t, "POST", "/v1/payment_intents"),
			MustParseForm(t, "amount=1&currency=usd&transfer_data[destination]=acct_1&on_behalf_of=acct_2"))
		if strings.Join(s.Accounts, ",") != "acct_1,acct_2" {
			t.Fatalf("accounts=%v", s.Accounts)
		}
	})
	t.Run("NestedAccounts", func(t *testing.T) {
		s := stripe.ScopeOf(MustParseOperation(t, "POST", "/v1/checkout/sessions"),
			MustParseForm(t, "payment_intent_data[transfer_data][destination]=acct_1&subscription_data[on_behalf_of]=acct_2&line_items[0][destination]=x"))
		if strings.Join(s.Accounts, ",") != "acct_1,acct_2" {
			t.Fatalf("accounts=%v", s.Accounts)
		}
	})
	t.Run("PayoutDestination", func(t *testing.T) {
		s := stripe.ScopeOf(MustParseOperation(t, "POST", "/v1/payouts"), MustParseForm(t, "amount=1&currency=usd&destination=ba_1"))
		if s.Accounts != nil {
			t.Fatalf("a payout's bank account read as a connected account: %v", s.Accounts)
		}
	})
	t.Run("NilForm", func(t *testing.T) {
		s := stripe.ScopeOf(MustParseOperation(t, "GET", "/v1/customers/cus_1"), nil)
		if len(s.Customers) != 1 || s.Currencies != nil || s.Accounts != nil {
			t.Fatalf("scope=%+v", s)
		}
	})
}

// MustParseOperation parses method and path or fails the test.
func MustParseOperation(tb testing.TB, method, path string) stripe.Operation {
	tb.Helper()
	op, err := stripe.ParseOperation(method, path)
	if err != nil {
		tb.Fatalf("ParseOperation(%q, %q): %v", method, path, err)
	}
	return op
}

// MustParseForm parses body or fails the test.
func MustParseForm(tb testing.TB, body string) *stripe.Form {
	tb.Helper()
	f, err := stripe.ParseForm(body)
	if err != nil {
		tb.Fatalf("ParseForm(%q): %v", body, err)
	}
	return f
}
