package stripe_test

import (
	"math"
	"strings"
	"testing"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

func TestParseRates(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		r, err := stripe.ParseRates("eur=1.08, GBP=1.27,jpy=0.0067\nkwd=3.25\r\n\n,usd=1")
		if err != nil {
			t.Fatal(err)
		}
		want := stripe.Rates{"eur": 1_080_000, "gbp": 1_270_000, "jpy": 6_700, "kwd": 3_250_000, "usd": 1_000_000}
		if len(r) != len(want) {
			t.Fatalf("rates=%v, want %v", r, want)
		}
		for k, v := range want {
			if r[k] != v {
				t.Errorf("%s=%d, want %d", k, r[k], v)
			}
		}
	})
	t.Run("Empty", func(t *testing.T) {
		r, err := stripe.ParseRates("")
		if err != nil || len(r) != 0 {
			t.Fatalf("rates=%v err=%v", r, err)
		}
	})
	for name, s := range map[string]string{
		"ErrNoEquals":     "eur",
		"ErrUnknown":      "xyz=1.0",
		"ErrNotACode":     "euro=1.08",
		"ErrZero":         "eur=0",
		"ErrZeroDecimals": "eur=0.000000",
		"ErrNegative":     "eur=-1.08",
		"ErrFloat":        "eur=1e3",
		"ErrTooPrecise":   "jpy=0.0000067",
		"ErrEmptyRate":    "eur=",
		"ErrTwice":        "eur=1.08,EUR=1.09",
		"ErrUSD":          "usd=1.01",
		"ErrBadSecond":    "eur=1.08,gbp=abc",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := stripe.ParseRates(s)
			if keybrake.ErrorCode(err) != keybrake.EINVALID {
				t.Fatalf("ParseRates(%q) err=%v, want EINVALID", s, err)
			}
		})
	}
	t.Run("ErrNamesEntry", func(t *testing.T) {
		_, err := stripe.ParseRates("eur=1.08,gbp=abc")
		if msg := keybrake.ErrorMessage(err); !strings.Contains(msg, `"gbp=abc"`) {
			t.Fatalf("message %q does not name the entry", msg)
		}
	})
}

func TestRates_ToMicros(t *testing.T) {
	rates := stripe.Rates{
		"eur": 1_080_000,     // $1.08
		"jpy": 6_700,         // $0.0067
		"kwd": 3_250_000,     // $3.25
		"gbp": 1_270_001,     // an odd rate, to see rounding
		"bhd": math.MaxInt64, // absurd, to see overflow
	}
	for _, tt := range []struct {
		name     string
		amount   int64
		currency string
		want     keybrake.Micros
	}{
		{"USD", 2000, "usd", 20_000_000},
		{"USDOneCent", 1, "usd", 10_000},
		{"USDMax", stripe.MaxAmount, "usd", stripe.MaxAmount * 10_000},
		{"Zero", 0, "eur", 0},
		{"EUR", 1000, "eur", 10_800_000},                         // €10.00 = $10.80
		{"EURCent", 1, "eur", 10_800},                            // €0.01 = $0.0108
		{"JPY", 1000, "jpy", 6_700_000},                          // ¥1000 = $6.70, zero-decimal
		{"JPYOneYen", 1, "jpy", 6_700},                           // ¥1 = $0.0067
		{"KWD", 1000, "kwd", 3_250_000},                          // 1.000 KWD, three-decimal
		{"KWDOneFils", 10, "kwd", 32_500},                        // 0.010 KWD
		{"KWDRoundUp", 1, "kwd", 3_250},                          // 0.001 KWD exactly
		{"GBPRoundUp", 1, "gbp", 12_701},                         // 12_700.01 rounds up
		{"GBPExact", 100, "gbp", 1_270_001},                      // £1.00
		{"GBPRoundUpMore", 3, "gbp", 38_101},                     // 38_100.03 rounds up
		{"HugeRateSmallAmount", 1, "bhd", 9_223_372_036_854_776}, // ceil(MaxInt64/1000)
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := rates.ToMicros(tt.amount, tt.currency)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("ToMicros(%d, %s) = %d, want %d", tt.amount, tt.currency, got, tt.want)
			}
		})
	}

	t.Run("ErrOverflow", func(t *testing.T) {
		for _, amount := range []int64{stripe.MaxAmount, 1001, math.MaxInt64} {
			_, err := rates.ToMicros(amount, "bhd")
			if keybrake.ErrorCode(err) != keybrake.EINVALID {
				t.Fatalf("ToMicros(%d, bhd) err=%v, want EINVALID", amount, err)
			}
		}
		if _, err := rates.ToMicros(math.MaxInt64, "usd"); keybrake.ErrorCode(err) != keybrake.EINVALID {
			t.Fatalf("ToMicros(MaxInt64, usd) err=%v, want EINVALID", err)
		}
	})
	t.Run("LargestThatFits", func(t *testing.T) {
		// 1000 × MaxInt64 / 1000 is exactly MaxInt64.
		if got, err := rates.ToMicros(1000, "bhd"); err != nil || got != math.MaxInt64 {
			t.Fatalf("ToMicros(1000, bhd) = %d, %v", got, err)
		}
		// MaxInt64 / 100 cents, rounded up, still fits.
		big := stripe.Rates{"jpy": math.MaxInt64}
		if got, err := big.ToMicros(1, "jpy"); err != nil || got != math.MaxInt64 {
			t.Fatalf("ToMicros(1, jpy) = %d, %v", got, err)
		}
		if _, err := big.ToMicros(2, "jpy"); keybrake.ErrorCode(err) != keybrake.EINVALID {
			t.Fatalf("ToMicros(2, jpy) err=%v, want EINVALID", err)
		}
	})
	t.Run("ErrNoRate", func(t *testing.T) {
		_, err := rates.ToMicros(100, "chf")
		if keybrake.ErrorCode(err) != keybrake.EFORBIDDEN || keybrake.ErrorMessage(err) != "no exchange rate configured for chf" {
			t.Fatalf("err=%v", err)
		}
	})
	t.Run("NilRatesUSD", func(t *testing.T) {
		var none stripe.Rates
		if got, err := none.ToMicros(150, "usd"); err != nil || got != 1_500_000 {
			t.Fatalf("ToMicros = %d, %v", got, err)
		}
	})
	t.Run("ErrUnknownCurrency", func(t *testing.T) {
		for _, c := range []string{"xyz", "EUR", "", "euro"} {
			if _, err := rates.ToMicros(100, c); keybrake.ErrorCode(err) != keybrake.EINVALID {
				t.Errorf("ToMicros(100, %q) err=%v, want EINVALID", c, err)
			}
		}
	})
	t.Run("ErrNegative", func(t *testing.T) {
		if _, err := rates.ToMicros(-1, "usd"); keybrake.ErrorCode(err) != keybrake.EINVALID {
			t.Fatalf("err=%v", err)
		}
	})
}

// TestRates_ToMicrosExhaustive checks rounding against a plain formula for
// many small amounts and rates, where int64 cannot overflow.
func TestRates_ToMicrosExhaustive(t *testing.T) {
	for _, c := range []struct {
		currency string
		div      int64
	}{{"jpy", 1}, {"eur", 100}, {"kwd", 1000}} {
		for rate := int64(1); rate < 3000; rate += 7 {
			r := stripe.Rates{c.currency: keybrake.Micros(rate)}
			for amount := int64(0); amount < 2000; amount += 13 {
				want := (amount*rate + c.div - 1) / c.div
				got, err := r.ToMicros(amount, c.currency)
				if err != nil || int64(got) != want {
					t.Fatalf("%d %s at %d: got %d, %v; want %d", amount, c.currency, rate, got, err, want)
				}
			}
		}
	}
}
