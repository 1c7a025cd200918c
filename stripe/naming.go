package stripe

import "strings"

// namespaces are path segments that group resources rather than name one:
// /v1/checkout/sessions is the resource checkout.sessions.
var namespaces = map[string]bool{
	"apple_pay": true, "apps": true, "billing": true, "billing_portal": true, "checkout": true,
	"climate": true, "entitlements": true, "financial_connections": true,
	"forwarding": true, "identity": true, "issuing": true, "radar": true,
	"reporting": true, "sigma": true, "tax": true, "terminal": true,
	"test_helpers": true, "treasury": true,
}

// singletons are resources with no id: /v1/balance is retrieved, not listed,
// and /v1/customers/{id}/discount is deleted as a whole.
var singletons = map[string]bool{
	"account": true, "balance": true, "balance_settings": true, "tax.settings": true,
	"customers.cash_balance": true, "customers.discount": true,
	"subscriptions.discount": true, "charges.dispute": true,
	"test_helpers.issuing.cards.shipping": true,
}

// subCollections are the nested lists under an object. POST to one creates;
// any other last segment after an id is a verb (POST /v1/invoices/{id}/pay).
var subCollections = map[string]bool{
	"balance_transactions": true, "bank_accounts": true, "capabilities": true,
	"cards": true, "cash_balance_transactions": true, "computed_upfront_line_items": true,
	"external_accounts": true, "features": true, "funding_instructions": true,
	"line_items": true, "lines": true, "login_links": true, "payment_methods": true,
	"people": true, "persons": true, "refunds": true, "reversals": true, "sources": true, "subscriptions": true,
	"tax_ids": true, "usage_record_summaries": true, "usage_records": true,
}

// collectionVerbs are segments right after a collection that are actions, not
// ids: GET /v1/customers/search, GET /v1/invoices/upcoming/lines,
// POST /v1/tax/transactions/create_reversal. Search is a verb of every
// collection. Without them the verb would be read as an object id, and two
// writes would share a name.
var collectionVerbs = map[string]bool{
	"apps.secrets.delete":                                          true,
	"apps.secrets.find":                                            true,
	"credit_notes.preview":                                         true,
	"invoices.create_preview":                                      true,
	"invoices.upcoming":                                            true,
	"payment_records.report_payment":                               true,
	"tax.transactions.create_from_calculation":                     true,
	"tax.transactions.create_reversal":                             true,
	"test_helpers.issuing.authorizations.fraud_challenges.respond": true,
	"test_helpers.issuing.transactions.create_force_capture":       true,
	"test_helpers.issuing.transactions.create_unlinked_refund":     true,
}

// genericActions are never verbs, so that POST /v1/charges/ch_1/create is
// not charges.create.
var genericActions = map[string]bool{
	"create": true, "retrieve": true, "update": true, "delete": true, "list": true, "search": true,
}

// nameOperation applies the naming rules to the decoded segments after /v1/.
// It returns ok=false when a segment that names something (a namespace,
// resource or verb, as opposed to an id) is not lower-case snake_case, so
// that no two paths share a name: /v1/customers.sources is not
// customers.sources.create.
func nameOperation(method string, segs []string) (op Operation, ok bool) {
	i := 0
	base := ""
	for i < len(segs)-1 && namespaces[segs[i]] {
		base = join(base, segs[i])
		i++
	}
	if !word(segs[i]) {
		return op, false
	}
	base = join(base, segs[i])
	i++
	atObject := singletons[base]
	ids := 0
	for ; i < len(segs); i++ {
		seg, last := segs[i], i == len(segs)-1
		if !atObject {
			if seg == "search" || collectionVerbs[base+"."+seg] {
				// Anything after a collection verb qualifies it:
				// invoices/upcoming/lines is invoices.upcoming_lines.
				for _, s := range segs[i:] {
					if !word(s) {
						return op, false
					}
				}
				return finish(op, base, strings.Join(segs[i:], "_")), true
			}
			if ids == 0 {
				op.ID = seg
			} else {
				op.SubID = seg
			}
			ids++
			atObject = true
			continue
		}
		if !word(seg) {
			return op, false
		}
		if last && method == "POST" && !subCollections[seg] && !singletons[base+"."+seg] && !genericActions[seg] {
			return finish(op, base, seg), true // a verb: payment_intents.confirm
		}
		base = join(base, seg)
		atObject = singletons[base]
	}
	return finish(op, base, action(method, atObject)), true
}

// word reports whether s is lower-case snake_case, as every Stripe namespace,
// resource and verb is.
func word(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return s != ""
}

// action is the action of a request that ends at a collection or an object.
func action(method string, atObject bool) string {
	switch {
	case (method == "GET" || method == "HEAD") && atObject:
		return "retrieve"
	case method == "GET" || method == "HEAD":
		return "list"
	case method == "POST" && atObject:
		return "update"
	case method == "POST":
		return "create"
	case method == "DELETE":
		return "delete"
	}
	return strings.ToLower(method)
}

func finish(op Operation, resource, action string) Operation {
	op.Resource, op.Action = resource, action
	op.Name = resource + "." + action
	return op
}

func join(base, seg string) string {
	if base == "" {
		return seg
	}
	return base + "." + seg
}
