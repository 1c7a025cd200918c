package stripe

import "strings"

// Scope is what a request names that a key's allowlists restrict.
type Scope struct {
	// Customers are the customer ids the request acts on: the customer
	// and customer_account params, and the id in a /v1/customers/{id}/...
	// path.
	Customers []string
	// Currencies are the lower-cased values of every currency param, at any
	// depth (currency, price_data[currency], line_items[0][price_data][currency]).
	Currencies []string
	// Accounts are the connected accounts money may be sent to, or that
	// the request acts as: destination (but a payout's, which is a bank
	// account or card of the paying account), destination[account],
	// transfer_data[destination] and on_behalf_of at any depth
	// (payment_intent_data[transfer_data][destination],
	// phases[0][on_behalf_of], ...), and the account of an account session
	// or account link.
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
	// customer_account names a customer by the Account that represents
	// it (acct_…), in place of a cus_ id: the intent, invoice,
	// subscription or session then charges that customer.
	for _, name := range []string{"customer", "customer_account"} {
		if c, ok := form.Get(name); ok && c != "" {
			s.Customers = appendNew(s.Customers, c)
		}
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
		if namesAccount(op, path) {
			s.Accounts = appendNew(s.Accounts, p.Value)
		}
	}
	return s
}

// namesAccount reports whether the parameter at path names a connected
// account. The same parameters nest under payment_intent_data,
// subscription_data, phases[] and default_settings, where they route the
// money of what those create.
func namesAccount(op Operation, path []string) bool {
	last := path[len(path)-1]
	switch {
	case last == "on_behalf_of":
		return true
	case last == "destination" && len(path) > 1:
		return path[len(path)-2] == "transfer_data"
	case last == "destination":
		return op.Resource != "payouts" // a payout's is a bank account or card
	case len(path) == 2 && path[0] == "destination" && last == "account":
		return true
	case len(path) == 1 && last == "account":
		return op.Name == "account_sessions.create" || op.Name == "account_links.create"
	}
	return false
}

func appendNew(list []string, v string) []string {
	for _, x := range list {
		if x == v {
			return list
		}
	}
	return append(list, v)
}
