package resend

import (
	"fmt"
	"strings"

	"github.com/keybrake/keybrake"
	"golang.org/x/net/idna"
)

// Policy is a key's Resend allowlists (keybrake.ResendScope, which the
// admin API stores normalized by NormalizePolicy); an empty list allows
// anything. Every email of a send or a batch is checked; one outside the
// scope refuses the whole request.
//
// Addresses are compared as keybrake parsed them (the address of
// "Name <a@b>", never the display name). Domains are compared in their
// ASCII form (IDNA: bücher.example is xn--bcher-kva.example), in lower
// case and without a trailing dot, and exactly: example.com does not allow
// mail.example.com, which must be listed itself. A domain that cannot be
// put in that form (an address literal, an invalid label) is refused. The
// local part of a sender address is compared in any case.
type Policy keybrake.ResendScope

// addressHeaders are headers that name senders or recipients; under a
// scope they may not be set through the headers field, where keybrake
// does not check them.
var addressHeaders = map[string]bool{"to": true, "cc": true, "bcc": true, "from": true, "sender": true,
	"resent-to": true, "resent-cc": true, "resent-bcc": true, "resent-from": true, "resent-sender": true}

// Check returns nil when every email is inside p, or EFORBIDDEN naming
// the rule (resend_scope.allowed_senders…) and, in a batch, the email.
func (p Policy) Check(emails []*Email, batch bool) error {
	if keybrake.ResendScope(p).IsZero() {
		return nil
	}
	for i, e := range emails {
		where := "the email"
		if batch {
			where = fmt.Sprintf("email [%d] of the batch", i)
		}
		if err := p.check(e, where); err != nil {
			return err
		}
	}
	return nil
}

func (p Policy) check(e *Email, where string) error {
	for _, h := range e.Headers {
		if addressHeaders[strings.ToLower(h)] {
			return refuse("", "%s sets the %s header, which names senders or recipients keybrake does not check against this vault key's resend_scope", where, printable(h))
		}
	}
	if len(p.Senders) > 0 && !senderAllowed(p.Senders, e.From) {
		return refuse("allowed_senders", "%s is from %s, which is not in this vault key's resend_scope.allowed_senders (%s)", where, printable(e.From), strings.Join(p.Senders, ", "))
	}
	if len(p.RecipientDomains) > 0 {
		for _, list := range []struct {
			field string
			addrs []string
		}{{"to", e.To}, {"cc", e.Cc}, {"bcc", e.Bcc}} {
			for _, a := range list.addrs {
				d, ok := Domain(a)
				if !ok || !containsExact(p.RecipientDomains, d) {
					return refuse("allowed_recipient_domains", "%s has %s recipient %s, whose domain is not in this vault key's resend_scope.allowed_recipient_domains (%s)", where, list.field, printable(a), strings.Join(p.RecipientDomains, ", "))
				}
			}
		}
	}
	if p.MaxRecipients > 0 && e.Recipients() > p.MaxRecipients {
		return refuse("max_recipients", "%s has %d recipients in to, cc and bcc; this vault key's resend_scope.max_recipients is %d", where, e.Recipients(), p.MaxRecipients)
	}
	return nil
}

// refuse returns the EFORBIDDEN of a scope rule.
func refuse(rule, format string, args ...any) error {
	e := &keybrake.Error{Code: keybrake.EFORBIDDEN, Message: "keybrake refused this request: " + fmt.Sprintf(format, args...) + ". Nothing was sent to Resend."}
	if rule != "" {
		e.Param = "resend_scope." + rule
	}
	return e
}

// senderAllowed reports whether from (an address as parsed) is listed as
// an address or by its domain.
func senderAllowed(allowed []string, from string) bool {
	at := strings.LastIndexByte(from, '@')
	if at < 0 {
		return false
	}
	d, ok := Domain(from)
	if !ok {
		return false
	}
	addr := strings.ToLower(from[:at]) + "@" + d
	for _, a := range allowed {
		if a == addr || a == d {
			return true
		}
	}
	return false
}

// Domain returns the domain of addr as scopes compare it: ASCII (IDNA
// A-labels), lower case, without a trailing dot; ok=false when it cannot
// be put in that form.
func Domain(addr string) (string, bool) {
	return canonicalDomain(addr[strings.LastIndexByte(addr, '@')+1:])
}

func canonicalDomain(d string) (string, bool) {
	d = strings.TrimSuffix(d, ".")
	if d == "" || strings.HasSuffix(d, ".") {
		return "", false
	}
	a, err := idna.Lookup.ToASCII(d)
	if err != nil || len(a) > 253 || !strings.Contains(a, ".") {
		return "", false
	}
	a = strings.ToLower(a)
	for _, label := range strings.Split(a, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "", false
		}
		for i := 0; i < len(label); i++ {
			if c := label[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				return "", false
			}
		}
	}
	return a, true
}

func containsExact(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// maxScopeEntries bounds each allowlist.
const maxScopeEntries = 100

// NormalizePolicy validates a scope as the admin API receives it and
// returns it normalized, or EINVALID naming the field
// (resend_scope.allowed_senders[1]): senders are addresses
// (billing@example.com, stored with the local part and domain lower-cased)
// or domains (example.com or @example.com, stored as example.com);
// recipient domains are domains; both in their ASCII form; max_recipients
// is 0 (no limit) to MaxRecipients. Duplicates are dropped, order kept.
func NormalizePolicy(s keybrake.ResendScope) (keybrake.ResendScope, error) {
	var out keybrake.ResendScope
	var err error
	if out.Senders, err = normalizeList("allowed_senders", s.Senders, func(v string) (string, bool) {
		local, domain, isAddr := strings.Cut(strings.TrimPrefix(v, "@"), "@")
		if !isAddr {
			return canonicalDomain(local)
		}
		d, ok := canonicalDomain(domain)
		if !ok || local == "" || strings.ContainsAny(local, " <>\"(),;:\\[]") {
			return "", false
		}
		return strings.ToLower(local) + "@" + d, true
	}); err != nil {
		return out, err
	}
	if out.RecipientDomains, err = normalizeList("allowed_recipient_domains", s.RecipientDomains, func(v string) (string, bool) {
		return canonicalDomain(strings.TrimPrefix(v, "@"))
	}); err != nil {
		return out, err
	}
	if s.MaxRecipients < 0 || s.MaxRecipients > MaxRecipients {
		return out, keybrake.ErrorParam("resend_scope.max_recipients", "resend_scope.max_recipients must be from 1 to %d (0 or absent for no limit beyond keybrake's %d).", MaxRecipients, MaxRecipients)
	}
	out.MaxRecipients = s.MaxRecipients
	return out, nil
}

func normalizeList(field string, in []string, norm func(string) (string, bool)) ([]string, error) {
	if len(in) > maxScopeEntries {
		return nil, keybrake.ErrorParam("resend_scope."+field, "resend_scope.%s has %d entries; at most %d are allowed.", field, len(in), maxScopeEntries)
	}
	var out []string
	seen := map[string]bool{}
	for i, v := range in {
		n, ok := norm(v)
		if !ok || strings.TrimSpace(v) != v {
			return nil, keybrake.ErrorParam("resend_scope."+field, "resend_scope.%s[%d] %q is not a valid %s.", field, i, printable(v), map[string]string{
				"allowed_senders":           "address (billing@example.com) or domain (example.com)",
				"allowed_recipient_domains": "domain (example.com)",
			}[field])
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out, nil
}
