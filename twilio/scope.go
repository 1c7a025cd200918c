package twilio

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/keybrake/keybrake"
)

// Scope is what a messages.create or calls.create names that a key's
// allowlists restrict, as sent.
type Scope struct {
	Create              bool   // a messages.create or calls.create: the only operations that name a destination
	Message             bool   // messages.create (MessagingServiceSid applies to messages only)
	To                  string // the destination, as sent
	From                string // the sender, as sent
	CallerID            string // calls.create's CallerId, as sent: another sender
	MessagingServiceSid string
	// Ambiguous is a parameter whose name differs from To, From, CallerId
	// or MessagingServiceSid only in case: keybrake checks one name and
	// cannot know which one Twilio reads.
	Ambiguous string
}

// scopeParams are the parameters a scope reads, by lower-cased name.
var scopeParams = map[string]string{"to": "To", "from": "From", "callerid": "CallerId", "messagingservicesid": "MessagingServiceSid"}

// ScopeOf returns what op with body form names. Only creates name a
// destination; any other operation returns a Scope that every Policy
// allows.
func ScopeOf(op Operation, form *Form) Scope {
	var s Scope
	if form == nil || (op.Name != "messages.create" && op.Name != "calls.create") {
		return s
	}
	s.Create, s.Message = true, op.Name == "messages.create"
	s.To, _ = form.Get("To")
	s.From, _ = form.Get("From")
	s.CallerID, _ = form.Get("CallerId")
	s.MessagingServiceSid, _ = form.Get("MessagingServiceSid")
	for _, p := range form.Pairs {
		if exact, ok := scopeParams[strings.ToLower(p.Name)]; ok && p.Name != exact && s.Ambiguous == "" {
			s.Ambiguous = p.Name
		}
	}
	return s
}

// Policy is a key's Twilio allowlists (keybrake.TwilioScope, which the
// admin API stores normalized by NormalizePolicy); an empty list allows
// anything. The rules, each refused with the field that states it:
//
//   - allowed_countries and allowed_number_prefixes: To must be an E.164
//     number (a whatsapp: address is checked on its number; any other
//     channel is refused), in a listed country and starting with a listed
//     prefix. Spaces, dashes or brackets in To are refused, not cleaned.
//   - allowed_from: From, and a call's CallerId, must be listed exactly
//     (the channel prefix, whatsapp:, compared in any case). A message
//     without From sends from its messaging service's pool, so it must
//     name a listed service.
//   - allowed_messaging_services: a MessagingServiceSid must be listed, and
//     a message must name one.
//
// A parameter whose name differs from one of these only in case (to,
// FROM) is refused under any scope.
type Policy keybrake.TwilioScope

// Check returns nil when s is inside p, or EFORBIDDEN naming the rule.
func (p Policy) Check(s Scope) error {
	if !s.Create || keybrake.TwilioScope(p).IsZero() {
		return nil
	}
	if s.Ambiguous != "" {
		return refuse("", "parameter %s differs from %s only in case, so keybrake cannot tell which one Twilio reads against this vault key's twilio_scope", printable(s.Ambiguous), scopeParams[strings.ToLower(s.Ambiguous)])
	}
	if len(p.Countries) > 0 || len(p.NumberPrefixes) > 0 {
		if err := p.checkDestination(s.To); err != nil {
			return err
		}
	}
	if len(p.From) > 0 {
		for _, f := range []struct{ name, v string }{{"From", s.From}, {"CallerId", s.CallerID}} {
			if f.v != "" && !containsExact(p.From, sender(f.v)) {
				return refuse("allowed_from", "%s %s is not in this vault key's twilio_scope.allowed_from (%s)", f.name, printable(f.v), strings.Join(p.From, ", "))
			}
		}
	}
	if !s.Message {
		return nil
	}
	switch {
	case s.MessagingServiceSid != "" && len(p.MessagingServices) > 0 && !containsExact(p.MessagingServices, s.MessagingServiceSid):
		return refuse("allowed_messaging_services", "messaging service %s is not in this vault key's twilio_scope.allowed_messaging_services (%s)", printable(s.MessagingServiceSid), strings.Join(p.MessagingServices, ", "))
	case s.MessagingServiceSid == "" && len(p.MessagingServices) > 0:
		return refuse("allowed_messaging_services", "this vault key sends only through its twilio_scope.allowed_messaging_services (%s); name one as MessagingServiceSid", strings.Join(p.MessagingServices, ", "))
	case s.From == "" && s.MessagingServiceSid != "" && len(p.From) > 0 && len(p.MessagingServices) == 0:
		return refuse("allowed_from", "a message without From sends from its messaging service's pool, which this vault key's twilio_scope.allowed_from cannot check; send From a listed number or list the service in twilio_scope.allowed_messaging_services")
	}
	return nil
}

// checkDestination applies the country and prefix lists to To.
func (p Policy) checkDestination(to string) error {
	rule := "allowed_countries"
	if len(p.Countries) == 0 {
		rule = "allowed_number_prefixes"
	}
	number := to
	if channel, rest, ok := strings.Cut(to, ":"); ok {
		if !strings.EqualFold(channel, "whatsapp") {
			return refuse(rule, "To %s is a %s: address, and this vault key's twilio_scope.%s restricts destinations to phone numbers", printable(to), printable(channel), rule)
		}
		number = rest
	}
	if to == "" {
		return refuse(rule, "the request names no To, and this vault key's twilio_scope.%s restricts destinations", rule)
	}
	countries, err := Countries("To", number)
	switch {
	case keybrake.ErrorCode(err) == keybrake.EFORBIDDEN:
		return refuse(rule, "%s", strings.TrimSuffix(keybrake.ErrorMessage(err), "."))
	case err != nil:
		return refuse(rule, "To %s is not an E.164 number (+ and digits only, no spaces or dashes), so keybrake cannot check it against this vault key's twilio_scope.%s", printable(to), rule)
	}
	for _, country := range countries {
		if len(p.Countries) > 0 && !containsExact(p.Countries, country) {
			if len(countries) > 1 {
				return refuse("allowed_countries", "To %s may be in any of %s, which its number cannot tell apart, and %s is not in this vault key's twilio_scope.allowed_countries (%s)", printable(to), strings.Join(countries, ", "), country, strings.Join(p.Countries, ", "))
			}
			return refuse("allowed_countries", "destination country %s (To %s) is not in this vault key's twilio_scope.allowed_countries (%s)", country, printable(to), strings.Join(p.Countries, ", "))
		}
	}
	if len(p.NumberPrefixes) > 0 && !hasPrefix(number, p.NumberPrefixes) {
		return refuse("allowed_number_prefixes", "To %s does not start with any of this vault key's twilio_scope.allowed_number_prefixes (%s)", printable(to), strings.Join(p.NumberPrefixes, ", "))
	}
	return nil
}

// refuse returns the EFORBIDDEN of a scope rule.
func refuse(rule, format string, args ...any) error {
	msg := "keybrake refused this request: " + fmt.Sprintf(format, args...) + ". Nothing was sent to Twilio."
	e := &keybrake.Error{Code: keybrake.EFORBIDDEN, Message: msg}
	if rule != "" {
		e.Param = "twilio_scope." + rule
	}
	return e
}

// sender returns a From as the allowlist stores it: the channel prefix
// lower-cased, the address as sent.
func sender(v string) string {
	if channel, rest, ok := strings.Cut(v, ":"); ok {
		return strings.ToLower(channel) + ":" + rest
	}
	return v
}

func containsExact(list []string, v string) bool {
	for _, x := range list {
		if x == v {
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

// NormalizePolicy validates a scope as the admin API receives it and
// returns it normalized, or EINVALID naming the field
// (twilio_scope.allowed_countries[2]). Countries are ISO 3166-1 alpha-2
// codes keybrake can place (upper-cased); prefixes are + and 1 to 15
// digits; senders are E.164 numbers, short codes (5 or 6 digits),
// alphanumeric sender ids (1 to 11 letters, digits and spaces, at least
// one letter), each optionally behind whatsapp: (whatsapp:+1…); services
// are MG and 32 hex digits. Duplicates are dropped, order kept.
func NormalizePolicy(s keybrake.TwilioScope) (keybrake.TwilioScope, error) {
	var out keybrake.TwilioScope
	var err error
	if out.Countries, err = normalizeList("allowed_countries", s.Countries, func(v string) (string, bool) {
		v = strings.ToUpper(v)
		return v, knownCountry(v)
	}); err != nil {
		return out, err
	}
	if out.NumberPrefixes, err = normalizeList("allowed_number_prefixes", s.NumberPrefixes, func(v string) (string, bool) {
		d, ok := strings.CutPrefix(v, "+")
		return v, ok && len(d) >= 1 && len(d) <= 15 && d[0] != '0' && digits(d)
	}); err != nil {
		return out, err
	}
	if out.From, err = normalizeList("allowed_from", s.From, func(v string) (string, bool) {
		v = sender(v)
		addr := v
		if channel, rest, ok := strings.Cut(v, ":"); ok {
			if channel != "whatsapp" {
				return v, false
			}
			addr = rest
		}
		return v, validSender(addr)
	}); err != nil {
		return out, err
	}
	if out.MessagingServices, err = normalizeList("allowed_messaging_services", s.MessagingServices, func(v string) (string, bool) {
		return v, isSid(v, "MG")
	}); err != nil {
		return out, err
	}
	return out, nil
}

// validSender reports whether a is an E.164 number, a short code or an
// alphanumeric sender id.
func validSender(a string) bool {
	if d, ok := strings.CutPrefix(a, "+"); ok {
		return len(d) >= 8 && len(d) <= 15 && d[0] != '0' && digits(d)
	}
	if digits(a) {
		return len(a) == 5 || len(a) == 6
	}
	letter := false
	for i := 0; i < len(a); i++ {
		c := a[i]
		isLetter := 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z'
		letter = letter || isLetter
		if !isLetter && !('0' <= c && c <= '9') && c != ' ' {
			return false
		}
	}
	return letter && len(a) <= 11 && strings.TrimSpace(a) == a
}

func knownCountry(iso string) bool {
	if len(iso) != 2 {
		return false
	}
	for _, c := range callingCodes {
		if c == iso {
			return true
		}
	}
	for _, all := range sharedCodes {
		if containsExact(all, iso) {
			return true
		}
	}
	return false
}

// maxScopeEntries bounds each allowlist.
const maxScopeEntries = 100

func normalizeList(field string, in []string, norm func(string) (string, bool)) ([]string, error) {
	if len(in) > maxScopeEntries {
		return nil, keybrake.ErrorParam("twilio_scope."+field, "twilio_scope.%s has %d entries; at most %d are allowed.", field, len(in), maxScopeEntries)
	}
	var out []string
	seen := map[string]bool{}
	for i, v := range in {
		n, ok := norm(v)
		if !ok {
			return nil, keybrake.ErrorParam("twilio_scope."+field, "twilio_scope.%s[%d] %q is not valid: %s.", field, i, printable(v), scopeHelp[field])
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out, nil
}

var scopeHelp = map[string]string{
	"allowed_countries":          "use ISO 3166-1 alpha-2 codes keybrake can place, like US or GB",
	"allowed_number_prefixes":    "use + and 1 to 15 digits, like +1415",
	"allowed_from":               "use an E.164 number (+14155550100), a short code, an alphanumeric sender id, or whatsapp:+14155550100",
	"allowed_messaging_services": "use a Messaging Service sid, MG and 32 hex digits",
}

// listFilters are the parameters of Twilio's messages and calls lists (its
// filters and paging, as the SDKs send them and next_page_uri repeats
// them): under allowed_from any other name is refused, so a name Twilio's
// stack might read as From (From[], "From\x00", From with a trailing
// space) never rides along with the From keybrake checked
// (TestAttackTwilio_ListParamLookalikes).
var listFilters = map[string]map[string]bool{
	"messages.list": setOf("From", "To", "DateSent", "DateSent<", "DateSent>", "Page", "PageSize", "PageToken"),
	"calls.list": setOf("From", "To", "ParentCallSid", "Status", "StartTime", "StartTime<", "StartTime>",
		"EndTime", "EndTime<", "EndTime>", "Page", "PageSize", "PageToken"),
}

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// CheckList returns nil when a messages.list or calls.list with query is
// inside p, or EFORBIDDEN naming allowed_from. Twilio lists every message
// or call of the account, whoever sent it; a key whose allowed_from is set
// may list only those from one of its senders, named by the list's own
// From filter, which Twilio keeps in every page's next_page_uri, so its
// paging is Twilio's. That is the key's own traffic only when no other key
// (and nothing outside keybrake) sends from those numbers: keybrake does
// not make a sender exclusive to a key. A key without allowed_from lists
// everything, as before. Under allowed_from, a From spelled in another
// case (from, FROM) is refused: keybrake cannot know which one Twilio
// reads. Any parameter that is not one of the list's filters or paging
// parameters (listFilters) is refused too.
func (p Policy) CheckList(op Operation, query url.Values) error {
	if op.Name != "messages.list" && op.Name != "calls.list" {
		return nil
	}
	if len(p.From) == 0 {
		return nil
	}
	for name := range query {
		if name != "From" && strings.EqualFold(name, "From") {
			return refuse("", "parameter %s differs from From only in case, so keybrake cannot tell which one Twilio reads against this vault key's twilio_scope", printable(name))
		}
		if !listFilters[op.Name][name] {
			return refuse("allowed_from", "parameter %s is not one of Twilio's %s filters or paging parameters, the only ones keybrake forwards on a list under this vault key's twilio_scope.allowed_from", printable(name), op.Name)
		}
	}
	what := strings.TrimSuffix(op.Name, ".list")
	from := query["From"]
	switch {
	case len(from) != 1:
		return refuse("allowed_from", "this vault key lists only the %s sent from its twilio_scope.allowed_from (%s): add one From=, which Twilio keeps on every page", what, strings.Join(p.From, ", "))
	case !containsExact(p.From, sender(from[0])):
		return refuse("allowed_from", "From %s is not in this vault key's twilio_scope.allowed_from (%s)", printable(from[0]), strings.Join(p.From, ", "))
	}
	return nil
}
