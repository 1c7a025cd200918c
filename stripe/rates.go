package stripe

import (
	"math"
	"math/bits"
	"strings"

	"github.com/keybrake/keybrake"
)

// Rates converts currency amounts to USD micros. Each entry is the USD value
// of one major unit of the currency, in micros: eur 1_080_000 is $1.08 per
// euro, jpy 6_700 is $0.0067 per yen. USD is always 1_000_000 and need not be
// listed. Keys are lower-case ISO codes.
type Rates map[string]keybrake.Micros

// ParseRates parses the operator's table: entries code=dollars separated by
// commas or newlines, "eur=1.08,gbp=1.27,jpy=0.0067". Codes may be given in
// upper case; dollars are exact decimals with at most six places (see
// keybrake.ParseUSD). Blank entries are skipped. Returns EINVALID naming the
// bad entry for a malformed entry, a currency keybrake does not know, a zero
// rate, a currency listed twice, or a usd rate other than 1.
func ParseRates(s string) (Rates, error) {
	r := Rates{}
	for _, entry := range strings.FieldsFunc(s, func(c rune) bool { return c == ',' || c == '\n' }) {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		code, value, ok := strings.Cut(entry, "=")
		code, value = strings.ToLower(strings.TrimSpace(code)), strings.TrimSpace(value)
		if !ok {
			return nil, keybrake.Errorf(keybrake.EINVALID, "exchange rate %q: want currency=usd_value, e.g. eur=1.08", entry)
		}
		if _, known := Exponent(code); !known {
			return nil, keybrake.Errorf(keybrake.EINVALID, "exchange rate %q: unknown currency %q", entry, code)
		}
		if _, dup := r[code]; dup {
			return nil, keybrake.Errorf(keybrake.EINVALID, "exchange rate %q: %s is listed twice", entry, code)
		}
		m, err := keybrake.ParseUSD(value)
		if err != nil {
			return nil, keybrake.Errorf(keybrake.EINVALID, "exchange rate %q: %s", entry, keybrake.ErrorMessage(err))
		}
		if m == 0 {
			return nil, keybrake.Errorf(keybrake.EINVALID, "exchange rate %q: a rate must be above zero", entry)
		}
		if code == "usd" && m != keybrake.MicrosPerUSD {
			return nil, keybrake.Errorf(keybrake.EINVALID, "exchange rate %q: usd is always 1", entry)
		}
		r[code] = m
	}
	return r, nil
}

// Rate returns the USD micros of one major unit of currency and whether a
// rate is configured. USD always has one.
func (r Rates) Rate(currency string) (keybrake.Micros, bool) {
	if currency == "usd" {
		return keybrake.MicrosPerUSD, true
	}
	m, ok := r[currency]
	return m, ok && m > 0
}

// ToMicros converts amount, in the minor unit of currency (cents, yen, fils),
// to USD micros, rounding up so that money is never under-counted. The
// arithmetic is exact for any int64 amount and rate.
//
// Returns EINVALID for a negative amount, a currency keybrake does not know,
// or a result too large for Micros; EFORBIDDEN when the currency is known but
// no exchange rate is configured for it, since keybrake cannot then tell what
// the request costs.
func (r Rates) ToMicros(amount int64, currency string) (keybrake.Micros, error) {
	exp, known := Exponent(currency)
	if !known {
		return 0, keybrake.ErrorParam("currency", "Invalid currency: %s.", printable(currency))
	}
	if amount < 0 {
		return 0, keybrake.ErrorParam("amount", "Invalid amount %d: must not be negative.", amount)
	}
	rate, ok := r.Rate(currency)
	if !ok {
		return 0, keybrake.Errorf(keybrake.EFORBIDDEN, "no exchange rate configured for %s", currency)
	}
	// micros = ceil(amount × rate / 10^exp), in 128 bits.
	div := uint64(1)
	for i := 0; i < exp; i++ {
		div *= 10
	}
	hi, lo := bits.Mul64(uint64(amount), uint64(rate))
	if hi >= div {
		return 0, tooLarge(amount, currency)
	}
	q, rem := bits.Div64(hi, lo, div)
	if q > math.MaxInt64 || (rem != 0 && q == math.MaxInt64) {
		return 0, tooLarge(amount, currency)
	}
	if rem != 0 {
		q++
	}
	return keybrake.Micros(q), nil
}

func tooLarge(amount int64, currency string) error {
	return keybrake.ErrorParam("amount", "Amount %d %s is too large to convert to USD.", amount, currency)
}
