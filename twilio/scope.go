package twilio

import "strings"

// Scope is what a request names that a key's allowlists restrict.
type Scope struct {
	To                  string // the destination number
	Country             string // To's ISO country, "" if unknown
	From                string // the sending number
	MessagingServiceSid string
}

// ScopeOf returns what op with body form names. Only creates name a
// destination; the country is left empty when To is not a number
// keybrake can place.
func ScopeOf(op Operation, form *Form) Scope {
	var s Scope
	if form == nil || op.Action != "create" {
		return s
	}
	s.To, _ = form.Get("To")
	s.From, _ = form.Get("From")
	s.MessagingServiceSid, _ = form.Get("MessagingServiceSid")
	s.Country, _ = Country("To", s.To)
	return s
}

// Policy is a key's Twilio allowlists; an empty list allows anything.
type Policy struct {
	Countries         []string // ISO countries To may be in: "US", "CA"
	NumberPrefixes    []string // E.164 prefixes To must start with: "+1415"
	From              []string // numbers the key may send from
	MessagingServices []string // MG… services the key may send through
}

// Check returns the reason s is outside p, or "" when it is inside. A
// create is checked on every list; a request naming no destination
// passes.
func (p Policy) Check(s Scope) string {
	if s.To == "" {
		return ""
	}
	if len(p.Countries) > 0 && !contains(p.Countries, s.Country) {
		return "destination country " + orUnknown(s.Country) + " is not allowed for this key"
	}
	if len(p.NumberPrefixes) > 0 && !hasPrefix(s.To, p.NumberPrefixes) {
		return "destination " + printable(s.To) + " does not start with an allowed prefix"
	}
	if len(p.From) > 0 && s.From != "" && !contains(p.From, s.From) {
		return "From " + printable(s.From) + " is not allowed for this key"
	}
	if s.MessagingServiceSid != "" && s.From == "" {
		// The service picks the sender from its pool: only a listed
		// service is known to send from allowed numbers.
		if (len(p.MessagingServices) > 0 || len(p.From) > 0) && !contains(p.MessagingServices, s.MessagingServiceSid) {
			return "messaging service " + printable(s.MessagingServiceSid) + " is not allowed for this key"
		}
	}
	return ""
}

func orUnknown(c string) string {
	if c == "" {
		return "(unknown)"
	}
	return c
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if strings.EqualFold(x, v) {
			return true
		}
	}
	return false
}

func hasPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
