package stripesim

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/keybrake/keybrake/stripe"
)

// maxIntervals is the longest a recurring price's period may be: three
// years, in each interval.
var maxIntervals = map[string]int64{"day": 1095, "week": 156, "month": 36, "year": 3}

// createPrice serves POST /v1/prices: a per_unit price of an existing
// product, or of a product created with it from product_data; one_time, or
// recurring with recurring[interval].
func createPrice(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "currency", "unit_amount", "product", "product_data", "recurring", "metadata", "tax_behavior",
		"active", "nickname", "lookup_key", "billing_scheme"); aerr != nil {
		return nil, aerr
	}
	productID, aerr := optional(f, "product")
	if aerr != nil {
		return nil, aerr
	}
	var product *Product
	switch {
	case productID != "" && f.Has("product_data"):
		return nil, invalid("", "product_data", "You may only specify one of these parameters: product, product_data.")
	case productID != "":
		var ok bool
		if product, ok = lookup(s.st, s.st.products, c.scope, productID); !ok {
			return nil, errNoSuch(http.StatusBadRequest, "product", "product", productID)
		}
	case f.Has("product_data"):
		if product, aerr = productData(c, f); aerr != nil {
			return nil, aerr
		}
	default:
		return nil, errMissingParam("product")
	}
	if scheme, aerr := optional(f, "billing_scheme"); aerr != nil {
		return nil, aerr
	} else if scheme != "" && scheme != "per_unit" {
		return nil, invalid("", "billing_scheme", "Invalid billing_scheme: stripesim simulates per_unit prices only (tiered prices need tiers).")
	}
	p, aerr := newPrice(s, c, f, product.ID)
	if aerr != nil {
		return nil, aerr
	}
	if p.Active, aerr = boolParam(f, "active", true); aerr != nil {
		return nil, aerr
	}
	if p.Nickname, aerr = optional(f, "nickname"); aerr != nil {
		return nil, aerr
	}
	if p.LookupKey, aerr = optional(f, "lookup_key"); aerr != nil {
		return nil, aerr
	}
	if len(p.LookupKey) > 200 {
		return nil, invalid("", "lookup_key", "Invalid lookup_key: must be at most 200 characters.")
	}
	for _, other := range s.st.Prices {
		if p.LookupKey != "" && other.LookupKey == p.LookupKey && other.Active && s.st.Owners[other.ID] == c.scope {
			return nil, invalid("", "lookup_key", "A price (%s) already uses that lookup key.", other.ID)
		}
	}
	if f.Has("product_data") {
		s.addProduct(c, product)
	}
	s.addPrice(c, p)
	return p, nil
}

// productData makes the product of product_data[…]; it is stored only
// once the price is valid too.
func productData(c *call, f *stripe.Form) (*Product, *apiError) {
	sub, aerr := subForm(f, "product_data")
	if aerr != nil {
		return nil, aerr
	}
	if aerr := allow(sub, "name", "active", "metadata", "statement_descriptor", "unit_label"); aerr != nil {
		return nil, prefixed("product_data", aerr)
	}
	name, aerr := required(sub, "name")
	if aerr != nil {
		return nil, prefixed("product_data", aerr)
	}
	p := &Product{ID: newID("prod"), Object: "product", Name: name, Created: c.now.Unix(), Updated: c.now.Unix(),
		Images: []string{}, MarketingFeatures: []any{}, Account: c.account}
	if p.Active, aerr = boolParam(sub, "active", true); aerr != nil {
		return nil, prefixed("product_data", aerr)
	}
	if p.StatementDescriptor, aerr = optional(sub, "statement_descriptor"); aerr != nil {
		return nil, prefixed("product_data", aerr)
	}
	if p.UnitLabel, aerr = optional(sub, "unit_label"); aerr != nil {
		return nil, prefixed("product_data", aerr)
	}
	md, aerr := metadataParam(sub)
	if aerr != nil {
		return nil, prefixed("product_data", aerr)
	}
	p.Metadata = mergeMetadata(nil, md)
	return p, nil
}

// newPrice parses what a price and a product's default_price_data share:
// currency, unit_amount, recurring, metadata and tax_behavior.
func newPrice(s *Server, c *call, f *stripe.Form, productID string) (*Price, *apiError) {
	currency, aerr := currencyParam(f)
	if aerr != nil {
		return nil, aerr
	}
	amount, aerr := unitAmountParam(f)
	if aerr != nil {
		return nil, aerr
	}
	if aerr := checkAmount("unit_amount", amount, currency, false); aerr != nil {
		return nil, aerr
	}
	p := &Price{ID: newID("price"), Object: "price", Active: true, BillingScheme: "per_unit", Created: c.now.Unix(),
		Currency: currency, Product: productID, TaxBehavior: "unspecified", Type: "one_time", UnitAmount: amount,
		Account: c.account}
	if f.Has("recurring") {
		if p.Recurring, aerr = recurringParam(f); aerr != nil {
			return nil, aerr
		}
		p.Type = "recurring"
	}
	if tb, aerr := optional(f, "tax_behavior"); aerr != nil {
		return nil, aerr
	} else if tb != "" {
		if tb != "inclusive" && tb != "exclusive" && tb != "unspecified" {
			return nil, invalid("", "tax_behavior", "Invalid tax_behavior: must be one of inclusive, exclusive or unspecified")
		}
		p.TaxBehavior = tb
	}
	md, aerr := metadataParam(f)
	if aerr != nil {
		return nil, aerr
	}
	p.Metadata = mergeMetadata(nil, md)
	return p, nil
}

func (s *Server) addPrice(c *call, p *Price) {
	s.st.Prices = append(s.st.Prices, p)
	s.st.prices[p.ID] = p
	s.st.Owners[p.ID] = c.scope
}

// unitAmountParam parses unit_amount, required for per_unit prices: a
// non-negative integer of at most eight digits (0 is a free price).
func unitAmountParam(f *stripe.Form) (int64, *apiError) {
	s, ok, aerr := str(f, "unit_amount")
	if aerr != nil {
		return 0, aerr
	}
	if !ok {
		return 0, errMissingParam("unit_amount")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil && strings.TrimLeft(s, "0123456789") == "" && s != "":
		return 0, invalid("amount_too_large", "unit_amount", "Amount must be no more than %d (eight digits).", stripe.MaxAmount)
	case err != nil:
		return 0, invalid("parameter_invalid_integer", "unit_amount", "Invalid integer: %s", s)
	case n < 0:
		return 0, invalid("parameter_invalid_integer", "unit_amount", "This value must be greater than or equal to 0.")
	case n > stripe.MaxAmount:
		return 0, invalid("amount_too_large", "unit_amount", "Amount must be no more than %d (eight digits).", stripe.MaxAmount)
	}
	return n, nil
}

// recurringParam parses recurring[interval], [interval_count] and
// [usage_type] (licensed only: metered prices need a billing meter).
func recurringParam(f *stripe.Form) (*Recurring, *apiError) {
	m, ok := f.Tree["recurring"].(map[string]any)
	if !ok {
		return nil, invalid("", "recurring", "Invalid object: recurring must be a hash.")
	}
	r := &Recurring{IntervalCount: 1, UsageType: "licensed"}
	for k, v := range m {
		param := "recurring[" + k + "]"
		s, isStr := v.(string)
		if !isStr {
			return nil, invalid("", param, "Invalid string: %s must be a string.", param)
		}
		switch k {
		case "interval":
			if _, known := maxIntervals[s]; !known {
				return nil, invalid("", param, "Invalid recurring[interval]: must be one of day, week, month or year")
			}
			r.Interval = s
		case "interval_count":
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 1 {
				return nil, invalid("parameter_invalid_integer", param, "Invalid integer: %s", s)
			}
			r.IntervalCount = n
		case "usage_type":
			if s != "licensed" {
				return nil, invalid("", param, "Invalid recurring[usage_type]: stripesim simulates licensed prices only (metered prices need recurring[meter]).")
			}
		default:
			return nil, errUnknownParam(param)
		}
	}
	if r.Interval == "" {
		return nil, errMissingParam("recurring[interval]")
	}
	if r.IntervalCount > maxIntervals[r.Interval] {
		return nil, invalid("", "recurring[interval_count]", "Invalid recurring[interval_count]: maximum of three years interval allowed (%d %ss).", maxIntervals[r.Interval], r.Interval)
	}
	return r, nil
}

// retrievePrice serves GET /v1/prices/{id}.
func retrievePrice(s *Server, c *call) (any, *apiError) {
	if aerr := noParams(c.form); aerr != nil {
		return nil, aerr
	}
	p, ok := lookup(s.st, s.st.prices, c.scope, c.id)
	if !ok {
		return nil, errNoSuch(http.StatusNotFound, "price", "id", c.id)
	}
	return p, nil
}

// listPrices serves GET /v1/prices, newest first, filtered by product,
// active, currency and type.
func listPrices(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "product", "active", "currency", "type", "limit"); aerr != nil {
		return nil, aerr
	}
	limit, aerr := limitParam(f)
	if aerr != nil {
		return nil, aerr
	}
	active, aerr := optionalBool(f, "active")
	if aerr != nil {
		return nil, aerr
	}
	product, aerr := optional(f, "product")
	if aerr != nil {
		return nil, aerr
	}
	currency := ""
	if f.Has("currency") {
		if currency, aerr = currencyParam(f); aerr != nil {
			return nil, aerr
		}
	}
	typ, aerr := optional(f, "type")
	if aerr != nil {
		return nil, aerr
	}
	if typ != "" && typ != "one_time" && typ != "recurring" {
		return nil, invalid("", "type", "Invalid type: must be one of one_time or recurring")
	}
	all := []*Price{}
	for i := len(s.st.Prices) - 1; i >= 0; i-- {
		p := s.st.Prices[i]
		if s.st.Owners[p.ID] != c.scope || (active != nil && p.Active != *active) || (product != "" && p.Product != product) ||
			(currency != "" && p.Currency != currency) || (typ != "" && p.Type != typ) {
			continue
		}
		all = append(all, p)
	}
	more := len(all) > limit
	if more {
		all = all[:limit]
	}
	return listObject{Object: "list", Data: all, HasMore: more, URL: "/v1/prices"}, nil
}
