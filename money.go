package keybrake

import (
	"math"
	"strconv"
	"strings"
)

// Micros is an amount of US dollars in millionths of a dollar. All caps and
// spend are kept in Micros so that no float ever touches money. $1.00 is
// 1_000_000 Micros.
type Micros int64

// MicrosPerUSD is the number of Micros in one US dollar.
const MicrosPerUSD Micros = 1_000_000

// maxUSDDigits bounds the integer part of a parsed dollar amount so that the
// result always fits in an int64 of micros (9.2e18 / 1e6 ≈ 9.2e12).
const maxUSDDigits = 12

// ParseUSD parses a decimal dollar amount such as "250", "0.01" or
// "12.345678" exactly, without going through a float. At most six fractional
// digits are accepted (one micro-dollar); negative amounts, exponents and
// anything that is not a plain decimal return EINVALID.
func ParseUSD(s string) (Micros, error) {
	if s == "" {
		return 0, Errorf(EINVALID, "empty amount")
	}
	intPart, fracPart, hasDot := strings.Cut(s, ".")
	if intPart == "" || (hasDot && fracPart == "") {
		return 0, Errorf(EINVALID, "amount %q is not a plain decimal number", s)
	}
	if !allDigits(intPart) || !allDigits(fracPart) {
		return 0, Errorf(EINVALID, "amount %q is not a non-negative decimal number", s)
	}
	if len(strings.TrimLeft(intPart, "0")) > maxUSDDigits {
		return 0, Errorf(EINVALID, "amount %q is too large", s)
	}
	if len(fracPart) > 6 {
		return 0, Errorf(EINVALID, "amount %q has more than 6 decimal places", s)
	}
	whole, err := strconv.ParseInt(intPart, 10, 64)
	if err != nil {
		return 0, Errorf(EINVALID, "amount %q is too large", s)
	}
	frac := int64(0)
	if fracPart != "" {
		padded := fracPart + strings.Repeat("0", 6-len(fracPart))
		frac, _ = strconv.ParseInt(padded, 10, 64)
	}
	return Micros(whole*int64(MicrosPerUSD) + frac), nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String formats m as a plain decimal dollar amount with at least two
// decimals and no trailing zeros beyond them: "250.00", "0.015", "-1.50".
func (m Micros) String() string {
	neg := m < 0
	u := uint64(m)
	if neg {
		u = uint64(-(m + 1)) + 1 // safe for math.MinInt64
	}
	whole := u / uint64(MicrosPerUSD)
	frac := u % uint64(MicrosPerUSD)
	fs := strconv.FormatUint(frac+uint64(MicrosPerUSD), 10)[1:] // six digits
	fs = strings.TrimRight(fs, "0")
	for len(fs) < 2 {
		fs += "0"
	}
	out := strconv.FormatUint(whole, 10) + "." + fs
	if neg {
		out = "-" + out
	}
	return out
}

// MarshalJSON encodes m as a JSON number in dollars ("250.00"), exact.
func (m Micros) MarshalJSON() ([]byte, error) {
	return []byte(m.String()), nil
}

// UnmarshalJSON decodes a JSON number or string of dollars exactly.
func (m *Micros) UnmarshalJSON(b []byte) error {
	s := string(b)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	v, err := ParseUSD(s)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// AddMicros returns a+b, or ok=false when the sum overflows int64.
func AddMicros(a, b Micros) (sum Micros, ok bool) {
	if (b > 0 && a > math.MaxInt64-b) || (b < 0 && a < math.MinInt64-b) {
		return 0, false
	}
	return a + b, true
}
