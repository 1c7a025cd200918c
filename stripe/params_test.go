package stripe_test

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
	"github.com/keybrake/keybrake/stripe/internal/specgen"
)

// TestSpecTables regenerates testdata/operations.txt and params.txt from
// Stripe's OpenAPI description and compares them with the committed files:
// an edit by hand, or a spec upgrade without go generate ./stripe, fails.
// The description is stripe-mock's, in the module cache; without it the
// test is skipped unless KEYBRAKE_REQUIRE_SPEC=1.
func TestSpecTables(t *testing.T) {
	path, err := specgen.DefaultPath()
	if err == nil {
		_, err = os.Stat(path)
	}
	if err != nil {
		if os.Getenv("KEYBRAKE_REQUIRE_SPEC") == "" {
			t.Skipf("no OpenAPI description (go mod download github.com/stripe/stripe-mock@%s): %v", specgen.MockVersion, err)
		}
		t.Fatal(err)
	}
	sp, err := specgen.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sp.Info.Version, stripe.APIVersion) {
		t.Errorf("the description is API %s; stripe.APIVersion says %s", sp.Info.Version, stripe.APIVersion)
	}
	for file, gen := range map[string]func() ([]byte, error){"testdata/operations.txt": sp.Operations, "params.txt": sp.Params} {
		want, err := gen()
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what the description generates: run go generate ./stripe", file)
		}
	}
}

// TestLegacyParams checks the reviewed legacy and preview names: each is
// one the current API does not take on its write, which is free or priced;
// a money-moving one makes the write unpriced and is never on a priced
// write; a free one passes CheckParams.
func TestLegacyParams(t *testing.T) {
	rules := map[string]stripe.WriteRule{}
	for _, r := range stripe.WriteRules() {
		rules[r.Name] = r
	}
	ops := map[string]stripe.Operation{}
	for _, w := range MustSpecWrites(t) {
		ops[w.name] = MustParseOperation(t, w.method, samplePath(w.path, "id_1"))
	}
	for _, p := range stripe.LegacyParams() {
		op, ok := ops[p.Operation]
		r := rules[p.Operation]
		switch {
		case !ok:
			t.Errorf("%s %s: no such write", p.Operation, p.Name)
			continue
		case p.Reason == "":
			t.Errorf("%s %s: no reason", p.Operation, p.Name)
		case r.Class == stripe.ClassUnpriced && r.Free == "":
			t.Errorf("%s %s: the write is unpriced anyway; nothing to review", p.Operation, p.Name)
		case p.Class == stripe.ClassUnpriced && r.Class == stripe.ClassPriced:
			t.Errorf("%s %s: an unpriced legacy name on a priced write would forward it uncounted; leave it unreviewed (refused)", p.Operation, p.Name)
		}
		// Sent alone, with what the write's free rule needs.
		form := MustParseForm(t, p.Name+"=x")
		class := stripe.Classify(op, form)
		if slices.Contains(stripe.ParamNames(p.Operation), p.Name) {
			t.Errorf("%s %s: the current API takes it; it is not legacy", p.Operation, p.Name)
		}
		switch p.Class {
		case stripe.ClassUnpriced:
			if class != stripe.ClassUnpriced {
				t.Errorf("%s %s: class %s, want unpriced", p.Operation, p.Name, class)
			}
		case stripe.ClassWrite:
			if err := stripe.CheckParams(op, form, stripe.ClassWrite); err != nil {
				t.Errorf("%s %s: %v", p.Operation, p.Name, err)
			}
		default:
			t.Errorf("%s %s: class %s; a legacy name is free or unpriced", p.Operation, p.Name, p.Class)
		}
	}
}

// TestCheckParams checks the allowlist of parameters on free and priced
// writes, at every depth, and that every write keybrake lets through as
// free or prices has a list.
func TestCheckParams(t *testing.T) {
	for _, r := range stripe.WriteRules() {
		if (r.Class != stripe.ClassUnpriced || r.Free != "") && stripe.ParamNames(r.Name) == nil {
			t.Errorf("%s: free or priced, but params.txt has no line for it: every request would be refused", r.Name)
		}
	}
	for _, tt := range []struct {
		method, path, body string
		param              string // "" for allowed
	}{
		{"POST", "/v1/customers", "email=a&expand[0]=x&expand[1]=y&metadata[any_key]=1", ""},
		{"POST", "/v1/customers", "expand[]=x&expand[]=y", ""},
		{"POST", "/v1/customers", "metadata=", ""},
		{"POST", "/v1/customers", "invoice_settings[footer]=x&invoice_settings[custom_fields][0][name]=n", ""},
		{"POST", "/v1/customers", "invoice_settings[auto_pay]=x", "invoice_settings[auto_pay]"},
		{"POST", "/v1/customers", "tax_id_data[0][type]=eu_vat&tax_id_data[0][value]=1", ""},
		{"POST", "/v1/customers", "tax_id_data[0][amount]=1", "tax_id_data[0][amount]"},
		{"POST", "/v1/customers", "tax_id_data[x][type]=eu_vat", "tax_id_data[x]"},
		{"POST", "/v1/customers", "expand[0][x]=y", "expand[0][x]"},
		{"POST", "/v1/customers", "email[x]=y", "email[x]"},
		{"POST", "/v1/customers", "charge_now=true", "charge_now"},
		{"POST", "/v1/customers", "account_balance=5", ""}, // reviewed: unpriced, not refused
		{"POST", "/v1/customers", "card=tok_visa", ""},     // reviewed: free
		{"POST", "/v1/prices", "currency=usd&currency_options[eur][unit_amount]=5", ""},
		{"POST", "/v1/charges", "amount=5&currency=usd&source=tok_visa&amount_extra=5", "amount_extra"},
		{"POST", "/v1/payment_intents", "amount=5&currency=usd&transfer_data[destination]=acct_1&transfer_data[to]=x", "transfer_data[to]"},
		{"POST", "/v1/prices", "currency=usd&currency_options[eur][bogus]=5", "currency_options[eur][bogus]"},
		{"POST", "/v1/customers", "metadata[a][b]=1", "metadata[a][b]"},
		{"POST", "/v1/customers", "metadata[]=1", "metadata[]"},
		{"POST", "/v1/payment_intents", "amount=5&currency=usd&payment_method_options[card][request_three_d_secure]=any", ""},
		{"POST", "/v1/payment_intents", "amount=5&currency=usd&payment_method_options[card][capture_extra]=5", "payment_method_options[card][capture_extra]"},
		{"POST", "/v1/checkout/sessions", "mode=setup&currency=usd&setup_intent_data[metadata][k]=v&custom_fields[0][dropdown][options][0][label]=l", ""},
		{"POST", "/v1/checkout/sessions", "mode=setup&currency=usd&custom_fields[0][dropdown][options][0][amount]=5", "custom_fields[0][dropdown][options][0][amount]"},
		{"DELETE", "/v1/subscriptions/sub_1", "invoice_now=false&at_period_end=true", "at_period_end"},
		{"DELETE", "/v1/customers/cus_1", "expand[0]=x", "expand"},
	} {
		op := MustParseOperation(t, tt.method, tt.path)
		form := MustParseForm(t, tt.body)
		class := stripe.Classify(op, form)
		err := stripe.CheckParams(op, form, class)
		if class == stripe.ClassUnpriced {
			if tt.param != "" {
				t.Errorf("%s %s: unpriced, want refused naming %s", op.Name, tt.body, tt.param)
			}
			continue
		}
		var ke *keybrake.Error
		switch {
		case tt.param == "" && err != nil:
			t.Errorf("%s %s: %v", op.Name, tt.body, err)
		case tt.param != "" && (!errors.As(err, &ke) || ke.Code != keybrake.EINVALID || ke.Param != tt.param):
			t.Errorf("%s %s: %v, want EINVALID naming %s", op.Name, tt.body, err, tt.param)
		}
	}
	// An unpriced write is not checked: it is refused, or forwarded
	// uncounted, whatever it sends.
	op := MustParseOperation(t, "POST", "/v1/invoices/in_1/pay")
	if err := stripe.CheckParams(op, MustParseForm(t, "made_up=1"), stripe.Classify(op, nil)); err != nil {
		t.Errorf("invoices.pay: %v", err)
	}
}
