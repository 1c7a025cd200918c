package twilio

import (
	"fmt"
	"sort"
	"strings"

	"github.com/keybrake/keybrake"
)

// AnyCountry is the Rates entry that prices a country the table does not
// list. Without it such a country is refused.
const AnyCountry = "*"

// Rate is what Twilio charges for one country, in USD micros. A zero field
// is not configured: keybrake refuses what it would price.
type Rate struct {
	SMS   keybrake.Micros // per SMS segment
	MMS   keybrake.Micros // per MMS message
	Voice keybrake.Micros // per started minute of an outbound call
}

// Rates is the operator's price table, by ISO 3166-1 alpha-2 country
// (upper case) or AnyCountry. Set prices at or above what Twilio bills,
// carrier fees included: keybrake reserves with them and settles with
// Twilio's reported price, so a rate below Twilio's lets a cap be passed
// until the price arrives.
type Rates map[string]Rate

// ParseRates parses the operator's table: one country a line (or entries
// separated by ";"), the country code then kind=dollars pairs:
//
//	US sms=0.0083 mms=0.0220 voice=0.0140
//	GB sms=0.0524 voice=0.0150
//	* sms=0.20
//
// Dollars are exact decimals with at most six places (keybrake.ParseUSD).
// Blank lines and lines starting with # are skipped. Returns EINVALID
// naming the line for an unknown kind, a country that is not two letters
// or *, a country listed twice, a kind given twice, or a zero rate.
func ParseRates(s string) (Rates, error) {
	r := Rates{}
	for _, line := range strings.FieldsFunc(s, func(c rune) bool { return c == '\n' || c == ';' }) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		country := strings.ToUpper(fields[0])
		if country != AnyCountry && (len(country) != 2 || !letters(country)) {
			return nil, keybrake.Errorf(keybrake.EINVALID, "twilio rate %q: want a two-letter country code or *", line)
		}
		if _, dup := r[country]; dup {
			return nil, keybrake.Errorf(keybrake.EINVALID, "twilio rate %q: %s is listed twice", line, country)
		}
		if len(fields) == 1 {
			return nil, keybrake.Errorf(keybrake.EINVALID, "twilio rate %q: want sms=, mms= or voice= after the country", line)
		}
		var rate Rate
		for _, f := range fields[1:] {
			kind, value, ok := strings.Cut(f, "=")
			var dst *keybrake.Micros
			switch strings.ToLower(kind) {
			case "sms":
				dst = &rate.SMS
			case "mms":
				dst = &rate.MMS
			case "voice":
				dst = &rate.Voice
			}
			if !ok || dst == nil {
				return nil, keybrake.Errorf(keybrake.EINVALID, "twilio rate %q: %q is not sms=, mms= or voice=", line, f)
			}
			if *dst != 0 {
				return nil, keybrake.Errorf(keybrake.EINVALID, "twilio rate %q: %s is given twice", line, kind)
			}
			m, err := keybrake.ParseUSD(value)
			if err != nil {
				return nil, keybrake.Errorf(keybrake.EINVALID, "twilio rate %q: %s", line, keybrake.ErrorMessage(err))
			}
			if m == 0 {
				return nil, keybrake.Errorf(keybrake.EINVALID, "twilio rate %q: a rate must be above zero", line)
			}
			*dst = m
		}
		r[country] = rate
	}
	return r, nil
}

// String renders the table in the form ParseRates reads, countries sorted.
func (r Rates) String() string {
	countries := make([]string, 0, len(r))
	for c := range r {
		countries = append(countries, c)
	}
	sort.Strings(countries)
	var b strings.Builder
	for _, c := range countries {
		rate := r[c]
		b.WriteString(c)
		for _, kv := range []struct {
			k string
			v keybrake.Micros
		}{{"sms", rate.SMS}, {"mms", rate.MMS}, {"voice", rate.Voice}} {
			if kv.v != 0 {
				fmt.Fprintf(&b, " %s=%s", kv.k, kv.v)
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Rate returns the rate of kind ("sms", "mms" or "voice") for country,
// falling back to AnyCountry. Returns EFORBIDDEN when neither is
// configured.
func (r Rates) Rate(country, kind string) (keybrake.Micros, error) { return r.rate(country, kind) }

// dearest returns the highest rate of kind among countries, refusing as
// rate does when any of them has none: a number that may be in any of
// them is reserved at what the dearest would cost.
func (r Rates) dearest(countries []string, kind string) (keybrake.Micros, error) {
	var top keybrake.Micros
	for _, c := range countries {
		m, err := r.rate(c, kind)
		if err != nil {
			return 0, err
		}
		top = max(top, m)
	}
	return top, nil
}

// rate returns the rate of kind for country, falling back to AnyCountry.
// Returns EFORBIDDEN when neither is configured.
func (r Rates) rate(country, kind string) (keybrake.Micros, error) {
	pick := func(rt Rate) keybrake.Micros {
		switch kind {
		case "sms":
			return rt.SMS
		case "mms":
			return rt.MMS
		}
		return rt.Voice
	}
	if rt, ok := r[country]; ok && pick(rt) > 0 {
		return pick(rt), nil
	}
	if rt, ok := r[AnyCountry]; ok && pick(rt) > 0 {
		return pick(rt), nil
	}
	return 0, keybrake.Errorf(keybrake.EFORBIDDEN, "no Twilio %s rate is configured for %s, so keybrake cannot price this request.", kind, country)
}

// DefaultRates is the table serve starts with when the operator gives
// none: Twilio's list prices for a few countries, rounded up, as of 2025.
// They are examples for the simulator and first runs, not a promise:
// Twilio's prices and carrier fees change, so set your own.
func DefaultRates() Rates {
	r, err := ParseRates(`
US sms=0.0110 mms=0.0300 voice=0.0140
CA sms=0.0110 mms=0.0300 voice=0.0140
GB sms=0.0524 voice=0.0410
DE sms=0.0897 voice=0.0850
FR sms=0.0809 voice=0.0750
ES sms=0.0850 voice=0.0450
IT sms=0.0880 voice=0.0550
NL sms=0.1090 voice=0.0900
AU sms=0.0515 voice=0.0500
BR sms=0.0625 voice=0.0400
MX sms=0.0550 voice=0.0350
IN sms=0.0832 voice=0.0450
`)
	if err != nil {
		panic(err)
	}
	return r
}

func letters(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}
