package stripesim

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/keybrake/keybrake/stripe"
)

// Stripe's limits on metadata.
const (
	maxMetadataKeys   = 50
	maxMetadataKeyLen = 40
	maxMetadataValLen = 500
)

// allow rejects the first parameter, in the order sent, that is not one of
// names. expand is accepted everywhere, as SDKs send it, and ignored.
func allow(f *stripe.Form, names ...string) *apiError {
	for _, p := range f.Pairs {
		top, _, _ := strings.Cut(p.Key, "[")
		if top == "expand" {
			continue
		}
		known := false
		for _, n := range names {
			if n == top {
				known = true
				break
			}
		}
		if !known {
			return errUnknownParam(top)
		}
	}
	return nil
}

// str returns the string parameter name, whether it was sent, and an error
// when it was sent as nested parameters instead of a value.
func str(f *stripe.Form, name string) (string, bool, *apiError) {
	v, ok := f.Tree[name]
	if !ok {
		return "", false, nil
	}
	s, isStr := v.(string)
	if !isStr {
		return "", false, invalid("", name, "Invalid string: %s must be a string, not nested parameters.", name)
	}
	return s, true, nil
}

// required returns a string parameter that must be present and non-empty.
func required(f *stripe.Form, name string) (string, *apiError) {
	s, ok, aerr := str(f, name)
	if aerr != nil {
		return "", aerr
	}
	if !ok || s == "" {
		return "", errMissingParam(name)
	}
	return s, nil
}

// optional returns a string parameter, "" when absent.
func optional(f *stripe.Form, name string) (string, *apiError) {
	s, _, aerr := str(f, name)
	return s, aerr
}

// amountParam parses a Stripe amount, a positive integer of at most eight
// digits. ok is false when the parameter was not sent.
func amountParam(f *stripe.Form, name string) (n int64, ok bool, aerr *apiError) {
	s, ok, aerr := str(f, name)
	if aerr != nil || !ok {
		return 0, ok, aerr
	}
	n, err := stripe.ParseAmount(name, s)
	if err == nil {
		return n, true, nil
	}
	if s == "" {
		return 0, true, invalid("parameter_invalid_empty", name,
			"You passed an empty string for '%s'. We assume empty values are an attempt to unset a parameter; however '%s' cannot be unset. You should remove '%s' from your request or supply a non-empty value.", name, name, name)
	}
	digits := strings.TrimLeft(s, "0123456789") == ""
	if digits && len(strings.TrimLeft(s, "0")) > 8 {
		return 0, true, invalid("amount_too_large", name, "Amount must be no more than %d (eight digits).", stripe.MaxAmount)
	}
	if digits {
		return 0, true, invalid("parameter_invalid_integer", name, "This value must be greater than or equal to 1.")
	}
	return 0, true, invalid("parameter_invalid_integer", name, "Invalid integer: %s", s)
}

// requiredAmount is amountParam for a parameter that must be sent.
func requiredAmount(f *stripe.Form, name string) (int64, *apiError) {
	n, ok, aerr := amountParam(f, name)
	if aerr != nil {
		return 0, aerr
	}
	if !ok {
		return 0, errMissingParam(name)
	}
	return n, nil
}

// currencyParam returns the currency, lower-cased as Stripe answers it.
func currencyParam(f *stripe.Form) (string, *apiError) {
	s, aerr := required(f, "currency")
	if aerr != nil {
		return "", aerr
	}
	c := strings.ToLower(s)
	if _, known := stripe.Exponent(c); !known || !stripe.ValidCurrencyCode(c) {
		return "", invalid("invalid_currency", "currency", "Invalid currency: %s. Stripe currently supports these currencies: usd, eur, gbp, jpy, ... (see stripe.com/docs/currencies).", s)
	}
	return c, nil
}

// checkAmount applies the per-currency rules: three-decimal amounts end in 0,
// and charges are at least Stripe's minimum for the currency.
func checkAmount(param string, amount int64, currency string, minimum bool) *apiError {
	if stripe.ThreeDecimal(currency) && amount%10 != 0 {
		return invalid("invalid_amount", param,
			"Amounts in %s must be a multiple of 10 in the minor unit (the last digit must be 0); got %d.", strings.ToUpper(currency), amount)
	}
	if !minimum {
		return nil
	}
	if min, _ := stripe.MinimumAmount(currency); amount < min {
		return invalid("amount_too_small", param, "Amount must be at least %s %s", formatMajor(min, currency), currency)
	}
	return nil
}

// formatMajor renders a minor-unit amount in major units: 50 usd → "0.50".
func formatMajor(amount int64, currency string) string {
	exp, _ := stripe.Exponent(currency)
	if exp == 0 {
		return strconv.FormatInt(amount, 10)
	}
	div := int64(1)
	for range exp {
		div *= 10
	}
	return fmt.Sprintf("%d.%0*d", amount/div, exp, amount%div)
}

// metadataParam returns metadata[…] as a map, keeping empty values, which
// unset a key on update; metadata="" returns an empty map, which clears all.
// Stripe's limits on keys and values apply.
func metadataParam(f *stripe.Form) (map[string]string, *apiError) {
	v, ok := f.Tree["metadata"]
	if !ok {
		return nil, nil
	}
	if s, isStr := v.(string); isStr {
		if s != "" {
			return nil, invalid("", "metadata", "Invalid object: metadata must be a hash of keys and values.")
		}
		return map[string]string{}, nil
	}
	m, isMap := v.(map[string]any)
	if !isMap {
		return nil, invalid("", "metadata", "Invalid object: metadata must be a hash of keys and values.")
	}
	if len(m) > maxMetadataKeys {
		return nil, invalid("", "metadata", "Invalid metadata: metadata can have up to %d keys; you passed %d.", maxMetadataKeys, len(m))
	}
	out := make(map[string]string, len(m))
	for k, val := range m {
		s, isStr := val.(string)
		param := "metadata[" + k + "]"
		switch {
		case !isStr:
			return nil, invalid("", param, "Invalid string: metadata values must be strings.")
		case len(k) > maxMetadataKeyLen:
			return nil, invalid("", param, "Invalid metadata: keys can be at most %d characters.", maxMetadataKeyLen)
		case len(s) > maxMetadataValLen:
			return nil, invalid("", param, "Invalid metadata: values can be at most %d characters.", maxMetadataValLen)
		}
		out[k] = s
	}
	return out, nil
}

// mergeMetadata returns a new map: old with upd applied, empty values
// removing their key, as Stripe updates metadata. It never modifies old,
// which responses already sent may share.
func mergeMetadata(old, upd map[string]string) map[string]string {
	out := make(map[string]string, len(old)+len(upd))
	for k, v := range old {
		out[k] = v
	}
	for k, v := range upd {
		if v == "" {
			delete(out, k)
		} else {
			out[k] = v
		}
	}
	return out
}

// boolParam parses "true" or "false"; def when absent.
func boolParam(f *stripe.Form, name string, def bool) (bool, *apiError) {
	s, ok, aerr := str(f, name)
	if aerr != nil || !ok {
		return def, aerr
	}
	switch s {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, invalid("", name, "Invalid boolean: %s", s)
}

// intParam parses a non-negative integer parameter such as a timestamp.
func intParam(param, s string) (int64, *apiError) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, invalid("parameter_invalid_integer", param, "Invalid integer: %s", s)
	}
	return n, nil
}

// noParams is the check of retrieve endpoints, which take only expand.
func noParams(f *stripe.Form) *apiError { return allow(f) }
