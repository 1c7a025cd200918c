package stripe_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/.

// FuzzParseForm checks that ParseForm never panics, refuses only with
// EINVALID, keeps at most MaxFormKeys pairs, and that an accepted form
// re-encodes to a body that parses to the same pairs.
func FuzzParseForm(f *testing.F) {
	f.Fuzz(func(t *testing.T, body string) {
		form, err := stripe.ParseForm(body)
		if err != nil {
			if keybrake.ErrorCode(err) != keybrake.EINVALID {
				t.Fatalf("ParseForm(%q) err=%v, want EINVALID", body, err)
			}
			return
		}
		if len(form.Pairs) > stripe.MaxFormKeys {
			t.Fatalf("ParseForm kept %d pairs", len(form.Pairs))
		}
		var enc []string
		for _, p := range form.Pairs {
			enc = append(enc, url.QueryEscape(p.Key)+"="+url.QueryEscape(p.Value))
			if _, ok := stripe.SplitKey(p.Key); !ok {
				t.Fatalf("accepted key %q does not split", p.Key)
			}
		}
		again, err := stripe.ParseForm(strings.Join(enc, "&"))
		if err != nil {
			t.Fatalf("re-encoded form %q: %v", strings.Join(enc, "&"), err)
		}
		if len(again.Pairs) != len(form.Pairs) {
			t.Fatalf("round trip: %d pairs, want %d", len(again.Pairs), len(form.Pairs))
		}
		for i := range form.Pairs {
			if again.Pairs[i] != form.Pairs[i] {
				t.Fatalf("round trip: pair %d = %+v, want %+v", i, again.Pairs[i], form.Pairs[i])
			}
		}
	})
}

// FuzzParseOperation checks that ParseOperation never panics, refuses only
// with EINVALID, and names accepted paths consistently.
func FuzzParseOperation(f *testing.F) {
	f.Fuzz(func(t *testing.T, method, path string) {
		op, err := stripe.ParseOperation(method, path)
		if err != nil {
			if keybrake.ErrorCode(err) != keybrake.EINVALID {
				t.Fatalf("ParseOperation(%q, %q) err=%v, want EINVALID", method, path, err)
			}
			return
		}
		if op.Name != op.Resource+"."+op.Action || op.Path != path {
			t.Fatalf("ParseOperation(%q, %q) = %+v", method, path, op)
		}
		if len(path) > stripe.MaxPathLen || !strings.HasPrefix(path, "/v1/") {
			t.Fatalf("accepted %q", path)
		}
		for _, seg := range strings.Split(path[len("/v1/"):], "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("accepted %q", path)
			}
		}
		lower := strings.ToLower(path)
		if strings.Contains(lower, "%2e") || strings.Contains(lower, "%2f") || strings.ContainsAny(path, "?#\\ ") {
			t.Fatalf("accepted %q", path)
		}
		if strings.ContainsAny(op.ID+op.SubID, "/") {
			t.Fatalf("id with a slash: %+v", op)
		}
		if (method == "GET" || method == "HEAD") != (op.Class == stripe.ClassRead) {
			t.Fatalf("%s %s is %s", method, path, op.Class)
		}
	})
}

// fixed is a stripe.Lookup that answers every question with one amount.
type fixed struct {
	amount   int64
	currency string
}

func (l fixed) PaymentIntent(context.Context, string, string) (int64, string, error) {
	return l.amount, l.currency, nil
}

func (l fixed) Refundable(context.Context, string, string, string) (int64, string, error) {
	return l.amount, l.currency, nil
}

func (l fixed) Charge(context.Context, string, string) (int64, string, error) {
	return l.amount, l.currency, nil
}

// FuzzPrice checks that Price never panics and that a price is never
// negative, its currency is known, and usd prices are exact.
func FuzzPrice(f *testing.F) {
	f.Fuzz(func(t *testing.T, path, body string, amount int64, currency string) {
		op, err := stripe.ParseOperation("POST", path)
		if err != nil {
			return
		}
		form, err := stripe.ParseForm(body)
		if err != nil {
			return
		}
		p := &stripe.Pricer{Rates: testRates, Lookup: fixed{amount, currency}}
		got, err := p.Price(context.Background(), op, form, "acct_1")
		if err != nil {
			if got != (stripe.Price{}) {
				t.Fatalf("Price = %+v with error %v", got, err)
			}
			return
		}
		if got.Micros < 0 || got.Amount < 0 {
			t.Fatalf("Price = %+v", got)
		}
		if _, ok := stripe.Exponent(got.Currency); !ok {
			t.Fatalf("Price = %+v: unknown currency", got)
		}
		if got.Currency == "usd" && int64(got.Micros) != got.Amount*10_000 {
			t.Fatalf("Price = %+v: usd micros are not amount × 10_000", got)
		}
		if stripe.Classify(op, form) == stripe.ClassRead {
			t.Fatalf("priced a read: %+v", op)
		}
	})
}
