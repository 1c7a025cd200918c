package stripe

import "strings"

// Scope is what a request names that a key's allowlists restrict.
type Scope struct {
	// Customers are the customer ids the request acts on: the customer param,
	// and the id in a /v1/customers/{id}/... path.
	Customers []string
	// Currencies are the lower-cased values of every currency param, at any
	// depth (currency, price_data[currency], line_items[0][price_data][currency]).
	Currencies []string
	// Accounts are the connected accounts money may be sent to: destination,
	// destination[account], transfer_data[destination] and on_behalf_of.
	Accounts []string
}

// ScopeOf returns the customers, currencies and destination accounts that op
// with body form (nil for none) names. It reads only the request: the
// currency of an operation priced by lookup (payment_intents.confirm,
// refunds.create, captures) is Price.Currency, and the customer of such an
// object is not known here, so a proxy restricting customers must treat an
// operation on an existing object with care. The connected account named by
// the Stripe-Account header is the caller's to check.
func ScopeOf(op Operation, form *Form) Scope {
	var s Scope
	if op.ID != "" && (op.Resource == "customers" || strings.HasPrefix(op.Resource, "customers.")) {
		s.Customers = appendNew(s.Customers, op.ID)
	}
	if form == nil {
		return s
	}
	if c, ok := form.Get("customer"); ok && c != "" {
		s.Customers = appendNew(s.Customers, c)
	}
	for _, p := range form.Pairs {
		if p.Value == "" {
			continue
		}
		path, ok := SplitKey(p.Key)
		if !ok {
			continue
		}
		if path[len(path)-1] == "currency" {
			s.Currencies = appendNew(s.Currencies, strings.ToLower(p.Value))
		}
		switch p.Key {
		case "destination", "destination[account]", "transfer_data[destination]", "on_behalf_of":
			s.Accounts = appendNew(s.Accounts, p.Value)
		}
	}
	return s
}

func appendNew(list []string, v string) []string {
	for _, x := range list {
		if x == v {
			return list
		}
	}
	return append(list, v)
}
