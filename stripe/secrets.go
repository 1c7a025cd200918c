package stripe

import "strings"

// secretExpands are the fields Stripe returns only when a request expands
// them, and which hold secrets: the last segment of the expand path, and the
// resource it is secret on ("" for any: a card number may be reached from
// an authorization, expand[]=card.number, as well as from the card).
var secretExpands = []struct {
	field    string
	resource string
	what     string
}{
	{"number", "", "an issuing card's full number"},
	{"cvc", "", "an issuing card's CVC"},
	{"account_number", "", "a full bank account number (treasury financial addresses)"},
	{"payload", "apps.secrets", "an apps secret's payload"},
}

// SecretRead reports whether op with form asks Stripe for a secret that it
// returns only on request, through expand: an issuing card's number or CVC
// (expand[]=number, expand[]=cvc, data.number on a list, card.number from
// an authorization), a treasury financial account's full account number
// (financial_addresses.aba.account_number), an apps secret's payload
// (apps.secrets.find and list with expand[]=payload). what names the
// expansion and what it reveals. Any method counts: a POST may expand its
// answer too.
func SecretRead(op Operation, form *Form) (what string, ok bool) {
	if form == nil {
		return "", false
	}
	for _, p := range form.Pairs {
		path, ok := SplitKey(p.Key)
		if !ok || path[0] != "expand" {
			continue
		}
		segs := strings.Split(p.Value, ".")
		last := segs[len(segs)-1]
		for _, s := range secretExpands {
			if last == s.field && (s.resource == "" || s.resource == op.Resource) {
				return p.Key + "=" + p.Value + " on " + op.Name + " (" + s.what + ")", true
			}
		}
	}
	return "", false
}
