package stripe

import (
	"sort"
	"strings"
)

// secretWrites are writes whose response hands out a credential, whatever
// the body: a key, a client secret or a URL that acts as the account or the
// customer.
var secretWrites = map[string]string{
	"ephemeral_keys.create":             "an ephemeral key, a credential for a customer or an issuing card",
	"account_links.create":              "an onboarding link that acts as the connected account",
	"accounts.login_links.create":       "an Express dashboard login link for the connected account",
	"account_sessions.create":           "an account session client secret for embedded components",
	"billing_portal.sessions.create":    "a customer portal URL that acts as the customer",
	"customer_sessions.create":          "a customer session client secret",
	"terminal.connection_tokens.create": "a Terminal connection token",
	"forwarding.requests.create":        "card details forwarded to a third party",
}

// secretFields are the fields Stripe leaves out of a response unless the
// request expands them (issuing.card's number and cvc, financial accounts'
// financial_addresses.aba.account_number, ...), by the last segment of the
// expand path. A field is matched wherever it is expanded: Stripe refuses
// an expansion that does not exist, so matching more is harmless.
var secretFields = map[string]string{
	"number":          "a full card number (or identity document number)",
	"cvc":             "a card CVC",
	"account_number":  "a full bank account number",
	"account_numbers": "full bank account numbers",
	"payload":         "the plaintext of a stored secret",
	"id_number":       "an identity number",
	"dob":             "a date of birth",
}

// SecretRead reports whether op, with the parameters in form, makes Stripe
// answer with a secret: a card number or CVC (expand[]=number, expand[]=cvc,
// expand[]=data.number on issuing cards), a full bank account number
// (treasury financial addresses, Financial Connections account numbers),
// a stored secret's plaintext (apps.secrets with expand[]=payload),
// identity numbers, or a credential handed out by a write
// (ephemeral_keys.create, login and onboarding links, portal and component
// sessions, Terminal connection tokens, forwarded card details). what says
// which, for a log line or an error message.
//
// form holds every parameter of the request: for GET the query string
// parsed with ParseForm, for a write its body (and its query string, if the
// caller forwards one); nil for none. Expansions are read in every form
// Stripe accepts: expand[]=a, expand[0]=a and expand=a.
func SecretRead(op Operation, form *Form) (what string, ok bool) {
	if op.Class != ClassRead {
		if what, ok := secretWrites[op.Name]; ok {
			return what, true
		}
	}
	if form == nil {
		return "", false
	}
	for _, path := range expansions(form) {
		field := path[strings.LastIndexByte(path, '.')+1:]
		if what, ok := secretFields[field]; ok {
			return "expand " + path + ": " + what, true
		}
	}
	return "", false
}

// expansions returns the values of the expand parameter, in a stable order.
func expansions(form *Form) []string {
	var out []string
	switch v := form.Tree["expand"].(type) {
	case string:
		out = append(out, v)
	case []any:
		for _, x := range v {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
	case map[string]any:
		for _, x := range v {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		sort.Strings(out)
	}
	return out
}
