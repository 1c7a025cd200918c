package http

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

// Bounds of what an approval keeps of its request's parameters: enough to
// judge a payment or a message, never a copy of a large body.
const (
	approvalMaxParams     = 40   // parameters listed; the rest are counted in More
	approvalMaxValueRunes = 200  // characters of one value before it is cut
	approvalMaxParamBytes = 4096 // names and values listed, in all
	approvalMaxNameRunes  = 100  // characters of one name before it is cut
)

// approvalMasked is the value shown in place of a secret or card data.
const approvalMasked = "(not shown)"

// approvalParams is what an approval of c's request shows its approver:
// the parameters its fingerprint covers, as the vendor parsed them — the
// Stripe form (stripe.ParseForm, the client's parameters, which
// stripe.Fingerprint hashes), the Twilio form (twilio.ParseForm) or the
// addressing of each Resend email (resend.ParseEmail; the JSON body the
// fingerprint hashes also holds the content, which is not shown). Secrets
// and card data are masked (approvalSensitive); the list is bounded, the
// parameters that say who receives the money or the message first
// (approvalRank), so padding a request with metadata cannot push its
// destination out of view.
func approvalParams(req *VendorRequest) *keybrake.ApprovalParams {
	var pairs []keybrake.ApprovalParam
	switch p := req.Parsed.(type) {
	case *stripeRequest:
		if p.form != nil {
			for _, kv := range p.form.Pairs {
				pairs = append(pairs, keybrake.ApprovalParam{Name: kv.Key, Value: kv.Value})
			}
		}
	case *twilioRequest:
		if p.form != nil {
			for _, kv := range p.form.Pairs {
				pairs = append(pairs, keybrake.ApprovalParam{Name: kv.Name, Value: kv.Value})
			}
		}
	case *resendRequest:
		for i, e := range p.emails {
			prefix := ""
			if len(p.emails) > 1 || p.op.Name == "emails.batch" {
				prefix = "[" + strconv.Itoa(i) + "]."
			}
			add := func(name, value string) {
				pairs = append(pairs, keybrake.ApprovalParam{Name: prefix + name, Value: value})
			}
			add("from", e.From)
			for _, list := range []struct {
				name  string
				addrs []string
			}{{"to", e.To}, {"cc", e.Cc}, {"bcc", e.Bcc}} {
				for _, a := range list.addrs {
					add(list.name, a)
				}
			}
			add("subject", e.Subject)
			if e.ScheduledAt != "" {
				add("scheduled_at", e.ScheduledAt)
			}
			if e.Attachments > 0 {
				add("attachments", strconv.Itoa(e.Attachments))
			}
			for _, h := range e.Headers {
				add("headers", h)
			}
		}
	}
	out := &keybrake.ApprovalParams{List: []keybrake.ApprovalParam{}}
	slices.SortStableFunc(pairs, func(a, b keybrake.ApprovalParam) int { return approvalRank(a.Name) - approvalRank(b.Name) })
	size := 0
	for i, p := range pairs {
		if approvalSensitive(p.Name, p.Value) {
			p.Value, p.Masked = approvalMasked, true
		}
		p.Name = approvalShow(p.Name, approvalMaxNameRunes)
		if !p.Masked {
			p.Value = approvalShow(p.Value, approvalMaxValueRunes)
		}
		size += len(p.Name) + len(p.Value)
		if i >= approvalMaxParams || size > approvalMaxParamBytes {
			out.More = len(pairs) - i
			break
		}
		out.List = append(out.List, p)
	}
	return out
}

// approvalFirst are the parameters that say where money or a message
// goes, and how much: listed before the others.
var approvalFirst = map[string]bool{
	"amount": true, "currency": true, "destination": true, "customer": true, "charge": true,
	"payment_intent": true, "payment_method": true, "source": true, "on_behalf_of": true,
	"account": true, "application_fee_amount": true, "transfer_group": true, "method": true,
	"to": true, "from": true, "cc": true, "bcc": true, "messagingservicesid": true,
}

// approvalRank orders the listed parameters: those naming a destination,
// a payer or an amount (at any depth: transfer_data[destination]) first,
// then the others, metadata and expand[] last.
func approvalRank(name string) int {
	if strings.HasPrefix(name, "[") { // a Resend batch's [i].to
		_, name, _ = strings.Cut(name, "].")
	}
	path, ok := stripe.SplitKey(name)
	if !ok || len(path) == 0 {
		path = []string{name}
	}
	switch strings.ToLower(path[0]) {
	case "metadata", "expand":
		return 2
	}
	for _, seg := range path {
		if approvalFirst[strings.ToLower(seg)] {
			return 0
		}
	}
	return 1
}

// approvalSecretWords mark a parameter name whose value is a credential.
var approvalSecretWords = []string{"secret", "password", "passwd", "token", "cvc", "cvv", "credential", "api_key", "apikey", "private"}

// approvalSecretPrefixes mark a value that is a credential whatever its
// name: Stripe secret and restricted keys, webhook secrets, vault keys.
var approvalSecretPrefixes = []string{"sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_", keybrake.VaultKeyPrefix}

// approvalSensitive reports whether name=value must not be stored or
// shown: a name like a secret, password or token (client_secret,
// card[token]), card or bank account data as the proxy's card-data check
// reads it (stripe.IsCardData: such a Stripe request is refused anyway),
// a value holding a client secret (pi_…_secret_…) or a key, or a URL with
// a password (a Twilio StatusCallback with basic auth).
func approvalSensitive(name, value string) bool {
	lower := strings.ToLower(name)
	for _, w := range approvalSecretWords {
		if strings.Contains(lower, w) {
			return true
		}
	}
	if stripe.IsCardData(name, value) || stripe.LooksLikePAN(value) || strings.Contains(value, "_secret_") {
		return true
	}
	for _, p := range approvalSecretPrefixes {
		if strings.Contains(value, p) {
			return true
		}
	}
	if strings.Contains(value, "@") && strings.Contains(value, "://") {
		if u, err := url.Parse(strings.TrimSpace(value)); err == nil && u.User != nil {
			if _, ok := u.User.Password(); ok {
				return true
			}
		}
	}
	return false
}

// approvalShow returns s cut to max characters, with every character that
// is not printable (a newline, a tab, a bidi override) written as a \uXXXX
// escape, so a value cannot add a line to an alert or turn a page's text
// around.
func approvalShow(s string, max int) string {
	var b strings.Builder
	n := 0
	for i, r := range s {
		if n == max {
			fmt.Fprintf(&b, "… (%d more characters)", utf8.RuneCountInString(s[i:]))
			break
		}
		n++
		switch {
		case r == utf8.RuneError:
			b.WriteString(`\uFFFD`)
		case unicode.IsPrint(r):
			b.WriteRune(r)
		default:
			fmt.Fprintf(&b, `\u%04X`, r)
		}
	}
	return b.String()
}
