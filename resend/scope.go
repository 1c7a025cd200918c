package resend

import "strings"

// Policy is a key's Resend allowlists; an empty list allows anything.
type Policy struct {
	// Senders are the from addresses the key may use: an address
	// ("billing@example.com") or a whole domain ("example.com" or
	// "@example.com"). Compared case-insensitively.
	Senders []string
	// RecipientDomains are the domains every recipient (to, cc and bcc)
	// must be in, exactly: "example.com" does not allow
	// "mail.example.com".
	RecipientDomains []string
	// MaxRecipients, when above zero, bounds to + cc + bcc of each email.
	MaxRecipients int
}

// Check returns the reason e is outside p, or "" when it is inside.
func (p Policy) Check(e *Email) string {
	if len(p.Senders) > 0 && !senderAllowed(p.Senders, e.From) {
		return "sender " + printable(e.From) + " is not allowed for this key"
	}
	if len(p.RecipientDomains) > 0 {
		for _, d := range e.Domains() {
			if !containsFold(p.RecipientDomains, d) {
				return "recipient domain " + printable(d) + " is not allowed for this key"
			}
		}
	}
	if p.MaxRecipients > 0 && e.Recipients() > p.MaxRecipients {
		return "the email has " + itoa(e.Recipients()) + " recipients; this key allows at most " + itoa(p.MaxRecipients)
	}
	return ""
}

func senderAllowed(allowed []string, from string) bool {
	domain := domainOf(from)
	for _, a := range allowed {
		a = strings.ToLower(a)
		if strings.Contains(strings.TrimPrefix(a, "@"), "@") {
			if strings.EqualFold(a, from) {
				return true
			}
		} else if strings.TrimPrefix(a, "@") == domain {
			return true
		}
	}
	return false
}

func containsFold(list []string, v string) bool {
	for _, x := range list {
		if strings.EqualFold(strings.TrimPrefix(x, "@"), v) {
			return true
		}
	}
	return false
}
