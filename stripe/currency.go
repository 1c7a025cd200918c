// Package stripe knows the Stripe API as keybrake needs it: currencies and
// their decimals, operation names derived from method and path, the
// form-encoding Stripe uses, and the cost model that prices money-moving
// operations in USD micros.
package stripe

import (
	"strconv"
	"strings"
)

// currencyInfo is a currency's number of decimals and Stripe's minimum charge
// amount in its minor unit.
type currencyInfo struct {
	exponent int
	minimum  int64
}

// currencies lists the currencies keybrake and the simulator accept. Minimums
// follow Stripe's "minimum and maximum charge amounts" table; currencies it
// does not list get the equivalent of roughly USD 0.50.
var currencies = map[string]currencyInfo{
	// Two-decimal currencies.
	"usd": {2, 50}, "aed": {2, 200}, "aud": {2, 50}, "bgn": {2, 100}, "brl": {2, 50},
	"cad": {2, 50}, "chf": {2, 50}, "cny": {2, 400}, "czk": {2, 1500}, "dkk": {2, 250},
	"eur": {2, 50}, "gbp": {2, 30}, "hkd": {2, 400}, "huf": {2, 17500}, "idr": {2, 800000},
	"ils": {2, 200}, "inr": {2, 50}, "mxn": {2, 1000}, "myr": {2, 200}, "nok": {2, 300},
	"nzd": {2, 50}, "php": {2, 3000}, "pln": {2, 200}, "ron": {2, 200}, "sek": {2, 300},
	"sgd": {2, 50}, "thb": {2, 1000}, "try": {2, 1500}, "twd": {2, 1500}, "zar": {2, 900},
	// Zero-decimal currencies: the amount is in whole units.
	"bif": {0, 1000}, "clp": {0, 400}, "djf": {0, 100}, "gnf": {0, 5000}, "jpy": {0, 50},
	"kmf": {0, 250}, "krw": {0, 700}, "mga": {0, 2500}, "pyg": {0, 3500}, "rwf": {0, 700},
	"ugx": {0, 2000}, "vnd": {0, 13000}, "vuv": {0, 60}, "xaf": {0, 300}, "xof": {0, 300},
	"xpf": {0, 60},
	// Three-decimal currencies: Stripe requires the last digit to be 0.
	"bhd": {3, 200}, "jod": {3, 400}, "kwd": {3, 200}, "omr": {3, 200}, "tnd": {3, 1500},
}

// Exponent returns the number of decimals of currency (lower-case ISO code)
// and whether keybrake knows the currency.
func Exponent(currency string) (int, bool) {
	c, ok := currencies[currency]
	return c.exponent, ok
}

// MinimumAmount returns Stripe's minimum charge amount in currency's minor
// unit and whether the currency is known.
func MinimumAmount(currency string) (int64, bool) {
	c, ok := currencies[currency]
	return c.minimum, ok
}

// ZeroDecimal reports whether currency's amounts are whole units (JPY, KRW…).
func ZeroDecimal(currency string) bool {
	c, ok := currencies[currency]
	return ok && c.exponent == 0
}

// ThreeDecimal reports whether currency has three decimals (BHD, KWD…).
// Stripe requires such amounts to end in 0.
func ThreeDecimal(currency string) bool {
	c, ok := currencies[currency]
	return ok && c.exponent == 3
}

// ValidCurrencyCode reports whether s is shaped like a currency code as
// Stripe takes it: three lower-case ASCII letters.
func ValidCurrencyCode(s string) bool {
	if len(s) != 3 || strings.ToLower(s) != s {
		return false
	}
	for i := 0; i < 3; i++ {
		if s[i] < 'a' || s[i] > 'z' {
			return false
		}
	}
	return true
}

// MaxAmount is the largest amount Stripe takes: eight digits.
const MaxAmount = 99_999_999

// FormatAmount writes amount, in the minor unit of currency, as a decimal
// with the currency's code: 1050 usd is "10.50 USD", 500 jpy "500 JPY",
// 1000 kwd "1.000 KWD".
func FormatAmount(amount int64, currency string) string {
	exp, _ := Exponent(currency)
	neg := amount < 0
	if neg {
		amount = -amount
	}
	digits := strconv.FormatInt(amount, 10)
	if exp > 0 {
		for len(digits) <= exp {
			digits = "0" + digits
		}
		digits = digits[:len(digits)-exp] + "." + digits[len(digits)-exp:]
	}
	if neg {
		digits = "-" + digits
	}
	return digits + " " + strings.ToUpper(currency)
}
