package billing_test

import (
	"strings"
	"testing"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/billing"
)

func TestDecodeEvent(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		ev, err := billing.DecodeEvent([]byte(` {"customer_id":"acct_1","billing_period":"2026-11","amount":99999999,"currency":"jpy",
			"stripe_customer":"cus_1","payment_method":"pm_card_visa","description":"November","metadata":{"plan":"pro","seats":"3"}}` + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		if ev.CustomerID != "acct_1" || ev.BillingPeriod != "2026-11" || ev.Amount != 99999999 || ev.Currency != "jpy" ||
			ev.StripeCustomer != "cus_1" || ev.PaymentMethod != "pm_card_visa" || ev.Description != "November" || ev.Metadata["seats"] != "3" {
			t.Fatalf("event = %+v", ev)
		}
	})
	valid := `"customer_id":"a","billing_period":"p","currency":"usd","source":"tok_visa"`
	for _, tc := range []struct {
		name, body, param, msg string
	}{
		{"Oversized", `{"description":"` + strings.Repeat("x", billing.MaxEventBytes) + `"}`, "", "at most 65536 are accepted"},
		{"Empty", ``, "", "truncated or empty"},
		{"Null", `null`, "", "must be a JSON object"},
		{"String", `"hello"`, "", "must be a JSON object"},
		{"Truncated", `{"customer_id":"a"`, "", "truncated"},
		{"Trailing", `{` + valid + `,"amount":1} x`, "", "data after"},
		{"TwoObjects", `{` + valid + `,"amount":1}{}`, "", "data after"},
		{"InvalidUTF8", "{\"customer_id\":\"\xc3\x28\"}", "", "UTF-8"},
		{"Unknown", `{` + valid + `,"amount":1,"Amount":2}`, "Amount", "Unknown field"},
		{"DeliveryMetadata", `{` + valid + `,"amount":1,"nsq_attempts":2}`, "nsq_attempts", "Unknown field"},
		{"Duplicate", `{` + valid + `,"amount":1,"customer_id":"b"}`, "customer_id", "Duplicate field"},
		{"DuplicateMetadata", `{` + valid + `,"amount":1,"metadata":{"a":"1","a":"2"}}`, "metadata[a]", "Duplicate field"},
		{"MissingAmount", `{` + valid + `}`, "amount", "required"},
		{"MissingCustomer", `{"billing_period":"p","amount":1,"currency":"usd","source":"tok_visa"}`, "customer_id", "required"},
		{"MissingCurrency", `{"customer_id":"a","billing_period":"p","amount":1,"source":"tok_visa"}`, "currency", "required"},
		{"MissingPayer", `{"customer_id":"a","billing_period":"p","amount":1,"currency":"usd"}`, "stripe_customer", "One of"},
		{"BothSourceAndPM", `{` + valid + `,"amount":1,"payment_method":"pm_card_visa"}`, "source", "exclude"},
		{"AmountFloat", `{` + valid + `,"amount":42.00}`, "amount", "integer"},
		{"AmountExponent", `{` + valid + `,"amount":4e3}`, "amount", "integer"},
		{"AmountString", `{` + valid + `,"amount":"4200"}`, "amount", "got a string"},
		{"AmountNull", `{` + valid + `,"amount":null}`, "amount", "got null"},
		{"AmountZero", `{` + valid + `,"amount":0}`, "amount", "positive"},
		{"AmountNegative", `{` + valid + `,"amount":-5}`, "amount", "positive"},
		{"AmountNineDigits", `{` + valid + `,"amount":100000000}`, "amount", "at most 8 digits"},
		{"AmountHuge", `{` + valid + `,"amount":99999999999999999999999}`, "amount", "at most 8 digits"},
		{"CurrencyUnknown", `{"customer_id":"a","billing_period":"p","amount":1,"currency":"xyz","source":"tok_visa"}`, "currency", "not a supported"},
		{"CurrencyUpper", `{"customer_id":"a","billing_period":"p","amount":1,"currency":"USD","source":"tok_visa"}`, "currency", "not a supported"},
		{"CurrencyNumber", `{"customer_id":"a","billing_period":"p","amount":1,"currency":840,"source":"tok_visa"}`, "currency", "must be a string"},
		{"CustomerControl", `{"customer_id":"a\u0000b","billing_period":"p","amount":1,"currency":"usd","source":"tok_visa"}`, "customer_id", "printable"},
		{"CustomerDecomposed", `{"customer_id":"Jose\u0301","billing_period":"p","amount":1,"currency":"usd","source":"tok_visa"}`, "customer_id", "normalization form C"},
		{"PeriodDecomposed", `{"customer_id":"a","billing_period":"2026-11 cafe\u0301","amount":1,"currency":"usd","source":"tok_visa"}`, "billing_period", "normalization form C"},
		{"CustomerByteOrderMark", `{"customer_id":"\ufeffacct_1","billing_period":"p","amount":1,"currency":"usd","source":"tok_visa"}`, "customer_id", "invisible"},
		{"CustomerZeroWidth", `{"customer_id":"acct\u200b_1","billing_period":"p","amount":1,"currency":"usd","source":"tok_visa"}`, "customer_id", "invisible"},
		{"CustomerTooLong", `{"customer_id":"` + strings.Repeat("a", 256) + `","billing_period":"p","amount":1,"currency":"usd","source":"tok_visa"}`, "customer_id", "at most 255"},
		{"MetadataArray", `{` + valid + `,"amount":1,"metadata":["a"]}`, "metadata", "object of strings"},
		{"MetadataNumber", `{` + valid + `,"amount":1,"metadata":{"a":1}}`, "metadata[a]", "must be a string"},
		{"MetadataReserved", `{` + valid + `,"amount":1,"metadata":{"keybrake_key":"x"}}`, "metadata", "reserved"},
		{"DeepNesting", `{` + valid + `,"amount":1,"metadata":{"a":` + strings.Repeat("[", 10000) + `}}`, "metadata", "max depth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := billing.DecodeEvent([]byte(tc.body))
			if ev != nil || keybrake.ErrorCode(err) != keybrake.EINVALID {
				t.Fatalf("DecodeEvent = %+v, %v; want EINVALID", ev, err)
			}
			if got := keybrake.ErrorParamOf(err); got != tc.param {
				t.Fatalf("param = %q, want %q (%v)", got, tc.param, err)
			}
			if !strings.Contains(keybrake.ErrorMessage(err), tc.msg) {
				t.Fatalf("message = %q, want it to contain %q", keybrake.ErrorMessage(err), tc.msg)
			}
		})
	}
}

func TestKey(t *testing.T) {
	t.Run("LengthPrefixed", func(t *testing.T) {
		if billing.Key("ns", "ab", "c") == billing.Key("ns", "a", "bc") {
			t.Fatal(`("ab","c") and ("a","bc") share a key`)
		}
		if billing.Key("ns", "a") == billing.Key("nsa") || billing.Key("ns", "", "a") == billing.Key("ns", "a") {
			t.Fatal("field boundaries are not part of the key")
		}
	})
	t.Run("Format", func(t *testing.T) {
		// A known answer, for the implementations in other languages.
		got := billing.Key("billing", "acct_42", "2026-11")
		if !strings.HasPrefix(got, "kb_billing_") || len(got) != len("kb_billing_")+64 || got != billing.Key("billing", "acct_42", "2026-11") {
			t.Fatalf("Key = %q", got)
		}
		if got != "kb_billing_"+knownKeyHex {
			t.Fatalf("Key = %q, want the documented algorithm's kb_billing_%s", got, knownKeyHex)
		}
		long := billing.Key(strings.Repeat("n", billing.MaxNamespace), strings.Repeat("x", 10000))
		if len(long) > 255 {
			t.Fatalf("key of %d characters", len(long))
		}
	})
	t.Run("EventKeyIgnoresAmount", func(t *testing.T) {
		a, _ := billing.DecodeEvent([]byte(EventJSON("acct_1", "2026-11", 4200)))
		b, _ := billing.DecodeEvent([]byte(EventJSON("acct_1", "2026-11", 9900)))
		c, _ := billing.DecodeEvent([]byte(EventJSON("acct_1", "2026-12", 4200)))
		if a.Key("ns") != b.Key("ns") || a.Key("ns") == c.Key("ns") || a.Key("ns") == a.Key("other") {
			t.Fatal("the event key must be customer and period (and namespace) only")
		}
		if a.Fingerprint("ns") == b.Fingerprint("ns") || a.Fingerprint("ns") != a.Fingerprint("ns") {
			t.Fatal("the fingerprint must cover the amount")
		}
		d, _ := billing.DecodeEvent([]byte(EventJSON("acct_1", "2026-11", 4200, `"source":"tok_visa"`, `"metadata":{"a":"b"}`)))
		if a.Fingerprint("ns") == d.Fingerprint("ns") {
			t.Fatal("the fingerprint must cover metadata")
		}
	})
	t.Run("ValidateNamespace", func(t *testing.T) {
		for _, ns := range []string{"", "a b", "a/b", strings.Repeat("a", 65), "ü"} {
			if keybrake.ErrorCode(billing.ValidateNamespace(ns)) != keybrake.EINVALID {
				t.Fatalf("namespace %q accepted", ns)
			}
		}
		if err := billing.ValidateNamespace("billing-2026_11"); err != nil {
			t.Fatal(err)
		}
	})
}

// knownKeyHex is Key("billing", "acct_42", "2026-11") computed in Python
// with the algorithm documented on Key.
const knownKeyHex = "b659fce08e0d31e836f8b870bc19642a89a396689d0415dc5dbfd97ac7454f3e"
