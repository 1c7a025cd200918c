package stripesim

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/keybrake/keybrake/stripe"
)

// The catalogue: products, their prices, and payment links that sell them.
// None of it moves money in the simulator; prices give invoice items their
// amount, and a payment link's page is never served.

// catalogRoute maps the product, price and payment link endpoints, and
// returns the object id in the path.
func catalogRoute(method string, parts []string) (handler, string, bool) {
	switch parts[0] {
	case "products", "prices", "payment_links":
	default:
		return nil, "", false
	}
	key, id := method+" "+parts[0], ""
	switch len(parts) {
	case 1:
	case 2:
		key, id = key+"/{id}", parts[1]
	default:
		return nil, "", false
	}
	h, ok := map[string]handler{
		"POST products":          createProduct,
		"GET products":           listProducts,
		"GET products/{id}":      retrieveProduct,
		"POST prices":            createPrice,
		"GET prices":             listPrices,
		"GET prices/{id}":        retrievePrice,
		"POST payment_links":     createPaymentLink,
		"GET payment_links/{id}": retrievePaymentLink,
	}[key]
	return h, id, ok
}

// customProductID is the shape Stripe accepts for a product's own id.
var customProductID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)

// createProduct serves POST /v1/products: name required; a custom id,
// which must be new in the account; default_price_data creates its price.
func createProduct(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "name", "active", "description", "id", "metadata", "shippable", "statement_descriptor",
		"unit_label", "url", "default_price_data"); aerr != nil {
		return nil, aerr
	}
	name, aerr := required(f, "name")
	if aerr != nil {
		return nil, aerr
	}
	p := &Product{ID: newID("prod"), Object: "product", Name: name, Created: c.now.Unix(), Updated: c.now.Unix(),
		Images: []string{}, MarketingFeatures: []any{}, Account: c.account}
	if id, aerr := optional(f, "id"); aerr != nil {
		return nil, aerr
	} else if id != "" {
		if !customProductID.MatchString(id) {
			return nil, invalid("", "id", "Invalid id: a product id may contain only letters, digits, _ and -, at most 255 characters.")
		}
		if _, taken := s.st.products[id]; taken {
			return nil, invalid("resource_already_exists", "id", "Product already exists.")
		}
		p.ID = id
	}
	if p.Active, aerr = boolParam(f, "active", true); aerr != nil {
		return nil, aerr
	}
	if f.Has("shippable") {
		b, aerr := boolParam(f, "shippable", false)
		if aerr != nil {
			return nil, aerr
		}
		p.Shippable = &b
	}
	for _, o := range []struct {
		name string
		dst  *string
		max  int
	}{{"description", &p.Description, 40000}, {"statement_descriptor", &p.StatementDescriptor, 22},
		{"unit_label", &p.UnitLabel, 12}, {"url", &p.URL, 5000}} {
		if *o.dst, aerr = optional(f, o.name); aerr != nil {
			return nil, aerr
		}
		if len(*o.dst) > o.max {
			return nil, invalid("", o.name, "Invalid %s: must be at most %d characters.", o.name, o.max)
		}
	}
	md, aerr := metadataParam(f)
	if aerr != nil {
		return nil, aerr
	}
	p.Metadata = mergeMetadata(nil, md)
	var price *Price
	if f.Has("default_price_data") {
		sub, aerr := subForm(f, "default_price_data")
		if aerr != nil {
			return nil, aerr
		}
		if aerr := allow(sub, "currency", "unit_amount", "recurring", "metadata", "tax_behavior"); aerr != nil {
			return nil, prefixed("default_price_data", aerr)
		}
		if price, aerr = newPrice(s, c, sub, p.ID); aerr != nil {
			return nil, prefixed("default_price_data", aerr)
		}
		p.DefaultPrice = price.ID
	}
	s.addProduct(c, p)
	if price != nil {
		s.addPrice(c, price)
	}
	return p, nil
}

func (s *Server) addProduct(c *call, p *Product) {
	s.st.Products = append(s.st.Products, p)
	s.st.products[p.ID] = p
	s.st.Owners[p.ID] = c.scope
}

// retrieveProduct serves GET /v1/products/{id}.
func retrieveProduct(s *Server, c *call) (any, *apiError) {
	if aerr := noParams(c.form); aerr != nil {
		return nil, aerr
	}
	p, ok := lookup(s.st, s.st.products, c.scope, c.id)
	if !ok {
		return nil, errNoSuch(http.StatusNotFound, "product", "id", c.id)
	}
	return p, nil
}

// listProducts serves GET /v1/products, newest first, optionally only the
// active or inactive ones.
func listProducts(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "active", "limit"); aerr != nil {
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
	all := []*Product{}
	for i := len(s.st.Products) - 1; i >= 0; i-- {
		p := s.st.Products[i]
		if s.st.Owners[p.ID] == c.scope && (active == nil || p.Active == *active) {
			all = append(all, p)
		}
	}
	more := len(all) > limit
	if more {
		all = all[:limit]
	}
	return listObject{Object: "list", Data: all, HasMore: more, URL: "/v1/products"}, nil
}

// optionalBool parses a boolean filter; nil when not sent.
func optionalBool(f *stripe.Form, name string) (*bool, *apiError) {
	if !f.Has(name) {
		return nil, nil
	}
	b, aerr := boolParam(f, name, false)
	if aerr != nil {
		return nil, aerr
	}
	return &b, nil
}

// subForm returns the parameters nested under name (product_data[name]=…)
// as a form of their own, for the parsers of the top-level object.
func subForm(f *stripe.Form, name string) (*stripe.Form, *apiError) {
	tree, ok := f.Tree[name].(map[string]any)
	if !ok {
		return nil, invalid("", name, "Invalid object: %s must be a hash.", name)
	}
	sub := &stripe.Form{Tree: tree}
	for _, p := range f.Pairs {
		if rest, ok := strings.CutPrefix(p.Key, name+"["); ok {
			top, after, _ := strings.Cut(rest, "]")
			sub.Pairs = append(sub.Pairs, stripe.Pair{Key: top + after, Value: p.Value})
		}
	}
	return sub, nil
}

// prefixed names the parameter of an error found in a subForm as sent:
// currency becomes default_price_data[currency].
func prefixed(name string, aerr *apiError) *apiError {
	if aerr.Param != "" {
		top, rest, _ := strings.Cut(aerr.Param, "[")
		if rest != "" {
			rest = "[" + rest
		}
		aerr.Param = name + "[" + top + "]" + rest
	}
	return aerr
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
