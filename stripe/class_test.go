package stripe_test

import (
	"bufio"
	"os"
	"strings"
	"testing"

	"github.com/keybrake/keybrake/stripe"
)

// specWrite is one line of testdata/operations.txt.
type specWrite struct {
	method, path, name string
}

// MustSpecWrites reads testdata/operations.txt, the writes of Stripe's
// OpenAPI description (regenerate it with go generate ./stripe).
func MustSpecWrites(tb testing.TB) []specWrite {
	tb.Helper()
	f, err := os.Open("testdata/operations.txt")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var ws []specWrite
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Fields(line)
		if len(fs) != 3 {
			tb.Fatalf("operations.txt: malformed line %q", line)
		}
		ws = append(ws, specWrite{fs[0], fs[1], fs[2]})
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	if len(ws) < 300 {
		tb.Fatalf("operations.txt has %d writes; is it truncated?", len(ws))
	}
	return ws
}

// samplePath fills each {param} of a path template with id.
func samplePath(tmpl, id string) string {
	var b strings.Builder
	for {
		i, j := strings.IndexByte(tmpl, '{'), strings.IndexByte(tmpl, '}')
		if i < 0 || j < i {
			return b.String() + tmpl
		}
		b.WriteString(tmpl[:i] + id)
		tmpl = tmpl[j+1:]
	}
}

func TestWriteRules(t *testing.T) {
	rules := map[string]stripe.WriteRule{}
	for _, r := range stripe.WriteRules() {
		rules[r.Name] = r
	}
	spec := MustSpecWrites(t)

	t.Run("NamesMatchParseOperation", func(t *testing.T) {
		seen := map[string]string{}
		for _, w := range spec {
			for _, id := range []string{"id_1", "Obj-2.x"} {
				op := MustParseOperation(t, w.method, samplePath(w.path, id))
				if op.Name != w.name {
					t.Errorf("%s %s is %s with id %q; operations.txt says %s (run go generate ./stripe)", w.method, w.path, op.Name, id, w.name)
				}
			}
			if other, dup := seen[w.name]; dup {
				t.Errorf("%s %s and %s are both %s", w.method, w.path, other, w.name)
			}
			seen[w.name] = w.method + " " + w.path
		}
	})

	t.Run("EverySpecWriteHasARule", func(t *testing.T) {
		for _, w := range spec {
			r, ok := rules[w.name]
			if !ok {
				t.Errorf("%s %s (%s) has no rule in writes.go", w.method, w.path, w.name)
				continue
			}
			if op := MustParseOperation(t, w.method, samplePath(w.path, "id_1")); op.Class != r.Class {
				t.Errorf("%s: ParseOperation class %s, rule %s", w.name, op.Class, r.Class)
			}
		}
	})

	t.Run("EveryRuleIsInTheSpec", func(t *testing.T) {
		inSpec := map[string]bool{}
		for _, w := range spec {
			inSpec[w.name] = true
		}
		for _, r := range stripe.WriteRules() {
			if !inSpec[r.Name] && !r.Own {
				t.Errorf("rule %s names no write of the spec", r.Name)
			}
		}
	})

	t.Run("WellFormed", func(t *testing.T) {
		for _, r := range stripe.WriteRules() {
			switch {
			case r.Reason == "" || r.Family == "":
				t.Errorf("%s: no reason or family", r.Name)
			case r.Class != stripe.ClassWrite && r.Class != stripe.ClassPriced && r.Class != stripe.ClassUnpriced:
				t.Errorf("%s: class %s", r.Name, r.Class)
			case r.Free != "" && r.Class != stripe.ClassUnpriced:
				t.Errorf("%s: free for some bodies but %s for the others", r.Name, r.Class)
			case r.Class == stripe.ClassPriced && !r.Own:
				t.Errorf("%s: priced, but not by keybrake's own rules", r.Name)
			}
		}
	})
}

// TestClassifyBody checks each body rule of writes.go with a body it lets
// through as free and bodies that make it unpriced.
func TestClassifyBody(t *testing.T) {
	for _, tt := range []struct {
		method, path string
		free         []string // bodies that are ClassWrite
		unpriced     []string // bodies that are ClassUnpriced
	}{
		{"POST", "/v1/invoices",
			[]string{"auto_advance=false&pending_invoice_items_behavior=exclude", "customer=cus_1&auto_advance=false&pending_invoice_items_behavior=exclude",
				"customer=cus_1&auto_advance=false&pending_invoice_items_behavior=exclude&collection_method=send_invoice&days_until_due=30",
				"customer=cus_1&auto_advance=false&pending_invoice_items_behavior=exclude&collection_method=charge_automatically"},
			// auto_advance's default changed between API versions: absent is not free; so did
			// pending_invoice_items_behavior's, and a draft that takes pending items takes a credit
			// from the next invoice.
			[]string{"", "customer=cus_1", "customer=cus_1&collection_method=send_invoice&days_until_due=30", "auto_advance=true", "auto_advance=", "auto_advance=False", "auto_advance[x]=false",
				"automatically_finalizes_at=1900000000", "from_invoice[invoice]=in_1&from_invoice[action]=revision",
				"customer=cus_1&auto_advance=false", "customer=cus_1&auto_advance=false&pending_invoice_items_behavior=include",
				"customer=cus_1&auto_advance=false&pending_invoice_items_behavior=", "customer=cus_1&auto_advance=false&pending_invoice_items_behavior=Exclude",
				"customer=cus_1&auto_advance=false&pending_invoice_items_behavior[x]=exclude", "auto_advance=true&pending_invoice_items_behavior=exclude"}},
		{"POST", "/v1/invoices/in_1",
			[]string{"", "description=x&metadata[a]=b", "auto_advance=false", "collection_method=send_invoice&days_until_due=7", "default_payment_method=pm_1"},
			[]string{"auto_advance=true", "auto_advance=", "collection_method=charge_automatically", "collection_method=", "discounts[0][coupon]=c", "discounts=", "shipping_cost[shipping_rate]=shr_1", "application_fee_amount=100", "transfer_data[destination]=acct_1", "default_tax_rates[]=txr_1", "automatically_finalizes_at=1", "some_new_param=1"}},
		{"DELETE", "/v1/subscriptions/sub_1",
			[]string{"", "invoice_now=false", "prorate=true", "cancellation_details[comment]=x"},
			[]string{"invoice_now=true", "invoice_now=", "invoice_now=1", "invoice_now[x]=y"}},
		{"DELETE", "/v1/customers/cus_1/subscriptions/sub_1",
			[]string{"", "invoice_now=false"},
			[]string{"invoice_now=true"}},
		{"POST", "/v1/subscription_schedules/sub_sched_1/cancel",
			[]string{"", "invoice_now=false", "prorate=false"},
			[]string{"invoice_now=true", "invoice_now="}},
		{"POST", "/v1/subscriptions/sub_1",
			[]string{"", "metadata[a]=b", "cancel_at_period_end=true", "cancellation_details[feedback]=too_expensive&cancel_at_period_end=true"},
			[]string{"cancel_at_period_end=false", "cancel_at_period_end=", "items[0][price]=price_1", "trial_end=now", "proration_behavior=always_invoice"}},
		{"DELETE", "/v1/subscription_items/si_1",
			[]string{"", "proration_behavior=none", "proration_behavior=create_prorations", "clear_usage=true"},
			[]string{"proration_behavior=always_invoice", "proration_behavior=", "payment_behavior=error_if_incomplete"}},
		{"POST", "/v1/customers",
			[]string{"", "email=a@b", "invoice_settings[default_payment_method]=pm_1", "payment_method=pm_1"},
			[]string{"balance=1000", "balance=-1000", "balance=", "cash_balance[settings][reconciliation_mode]=automatic"}},
		{"POST", "/v1/customers/cus_1",
			[]string{"", "name=x", "default_source=card_1", "invoice_settings[default_payment_method]=pm_1"},
			[]string{"balance=0", "balance=500", "cash_balance[settings][reconciliation_mode]=automatic"}},
		{"POST", "/v1/accounts/acct_1",
			[]string{"", "business_profile[name]=x", "settings[branding][primary_color]=%23000000", "capabilities[transfers][requested]=true", "individual[first_name]=a"},
			[]string{"external_account=btok_1", "external_account[object]=bank_account", "settings[payouts][schedule][interval]=daily", "settings[payouts][debit_negative_balances]=true", "bank_account=btok_1"}},
		{"POST", "/v1/checkout/sessions",
			[]string{"mode=setup&currency=usd"},
			[]string{"", "mode=payment", "mode=subscription", "mode=", "mode=Setup", "mode[x]=setup"}},
		{"POST", "/v1/customer_sessions",
			[]string{"customer=cus_1&components[payment_element][enabled]=true", "customer=cus_1&components[customer_sheet][enabled]=true&components[mobile_payment_element][enabled]=true", "customer=cus_1"},
			[]string{"customer=cus_1&components[pricing_table][enabled]=true", "customer=cus_1&components[buy_button][enabled]=true", "customer=cus_1&components[customer_portal][enabled]=true", "components=x"}},
		{"POST", "/v1/ephemeral_keys",
			[]string{"customer=cus_1", "verification_session=vs_1"},
			[]string{"issuing_card=ic_1", "nonce=n&issuing_card=ic_1", "customer=cus_1&nonce=n"}},
		{"POST", "/v1/payment_links/plink_1",
			[]string{"active=false", "metadata[a]=b", "active=false&inactive_message=closed"},
			[]string{"active=true", "active=", "line_items[0][price]=price_1", "application_fee_amount=1"}},
		{"POST", "/v1/prices/price_1",
			[]string{"", "active=false", "nickname=x&metadata[a]=b"},
			[]string{"currency_options[eur][unit_amount]=100", "tax_behavior=exclusive", "lookup_key=basic", "transfer_lookup_key=true"}},
		{"POST", "/v1/invoiceitems/ii_1",
			[]string{"", "description=x", "metadata[a]=b"},
			[]string{"amount=100", "quantity=2", "discounts="}},
		{"POST", "/v1/issuing/cards/ic_1",
			[]string{"status=canceled&cancellation_reason=lost", "status=inactive", "metadata[a]=b"},
			[]string{"status=active", "status=", "spending_controls[spending_limits][0][amount]=100000", "pin[encrypted_number]=x", "shipping[name]=x"}},
		{"POST", "/v1/issuing/cardholders/ich_1",
			[]string{"status=inactive", "metadata[a]=b"},
			[]string{"status=active", "spending_controls[spending_limits][0][amount]=1", "phone_number=%2B1555", "email=a@b"}},
		{"POST", "/v1/issuing/tokens/intok_1",
			[]string{"status=deleted", "status=suspended"},
			[]string{"status=active", "status="}},
		{"POST", "/v1/billing/credit_grants/credgr_1",
			[]string{"metadata[a]=b"},
			[]string{"expires_at=1900000000"}},
		{"POST", "/v1/treasury/financial_accounts/fa_1",
			[]string{"nickname=x", "metadata[a]=b"},
			[]string{"forwarding_settings[type]=payment_method", "features[outbound_payments][ach][requested]=true", "platform_restrictions[outbound_flows]=unrestricted"}},
		{"POST", "/v1/treasury/financial_accounts/fa_1/features",
			[]string{"", "card_issuing[requested]=false", "deposit_insurance[requested]=true", "outbound_payments[ach][requested]=false&expand[]=x"},
			[]string{"card_issuing[requested]=true", "financial_addresses[aba][requested]=true", "card_issuing[requested]=", "card_issuing=false", "deposit_insurance[requested]=true&deposit_insurance[x]=1"}},
		{"POST", "/v1/treasury/financial_accounts/fa_1/close",
			[]string{""},
			[]string{"forwarding_settings[type]=financial_account&forwarding_settings[financial_account]=fa_2"}},
	} {
		op := MustParseOperation(t, tt.method, tt.path)
		if op.Class != stripe.ClassUnpriced {
			t.Errorf("%s: parsed class %s, want the cautious %s", op.Name, op.Class, stripe.ClassUnpriced)
		}
		for _, body := range tt.free {
			if got := stripe.Classify(op, MustParseForm(t, body)); got != stripe.ClassWrite {
				t.Errorf("%s %q: %s, want %s", op.Name, body, got, stripe.ClassWrite)
			}
		}
		for _, body := range tt.unpriced {
			if got := stripe.Classify(op, MustParseForm(t, body)); got != stripe.ClassUnpriced {
				t.Errorf("%s %q: %s, want %s", op.Name, body, got, stripe.ClassUnpriced)
			}
		}
	}

	t.Run("NotAWrite", func(t *testing.T) {
		// A rule's body test never applies to a read or an unknown method.
		for _, tt := range []struct {
			method, path string
			want         stripe.Class
		}{
			{"GET", "/v1/customers/cus_1", stripe.ClassRead},
			{"PUT", "/v1/customers/cus_1", stripe.ClassUnpriced},
			{"PATCH", "/v1/invoices", stripe.ClassUnpriced},
		} {
			op := MustParseOperation(t, tt.method, tt.path)
			if got := stripe.Classify(op, MustParseForm(t, "")); got != tt.want {
				t.Errorf("%s %s: %s, want %s", tt.method, tt.path, got, tt.want)
			}
		}
	})
}
