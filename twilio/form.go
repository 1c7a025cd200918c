package twilio

import (
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/keybrake/keybrake"
)

// MaxFormKeys bounds the number of parameters in one body; Twilio's
// requests carry a few dozen at most.
const MaxFormKeys = 200

// MaxMediaURLs is the most MediaUrl parameters Twilio accepts on one
// message.
const MaxMediaURLs = 10

// listParams may be given more than once: every MediaUrl is one attachment,
// every StatusCallbackEvent one event.
var listParams = map[string]bool{
	"MediaUrl": true, "StatusCallbackEvent": true, "RecordingStatusCallbackEvent": true,
}

// Pair is one Name=Value of a form body, decoded, in the order sent.
type Pair struct {
	Name  string
	Value string
}

// Form is a decoded application/x-www-form-urlencoded body in Twilio's
// dialect: flat PascalCase names (To, From, Body, MediaUrl), a list
// written as the same name repeated (MediaUrl=a&MediaUrl=b).
type Form struct {
	Pairs []Pair
}

// ParseForm decodes body strictly. An unescaped semicolon, a malformed
// escape, a name that is not PascalCase (a letter, then letters and
// digits), a value that is not valid UTF-8, a name given twice that is
// not a list (MediaUrl,
// StatusCallbackEvent, RecordingStatusCallbackEvent), more than
// MaxMediaURLs media or more than MaxFormKeys parameters return EINVALID
// naming the parameter: two To's would let keybrake price one number while
// Twilio sends to the other.
func ParseForm(body string) (*Form, error) {
	f := &Form{}
	if body == "" {
		return f, nil
	}
	if strings.Contains(body, ";") {
		// Some form parsers split on ";" as well as "&" (Go's did until
		// 1.17): Body=hi;To=+1876… is one Body to keybrake and perhaps a
		// second To to Twilio. SDKs escape it as %3B.
		return nil, keybrake.Errorf(keybrake.EINVALID, "The body has an unescaped semicolon; escape it as %%3B.")
	}
	parts := strings.Split(body, "&")
	if len(parts) > MaxFormKeys {
		return nil, keybrake.Errorf(keybrake.EINVALID, "Too many parameters: at most %d are accepted.", MaxFormKeys)
	}
	seen := map[string]int{}
	for _, part := range parts {
		if part == "" {
			continue
		}
		rawName, rawValue, _ := strings.Cut(part, "=")
		name, err := url.QueryUnescape(rawName)
		if err != nil || !pascal(name) {
			return nil, keybrake.Errorf(keybrake.EINVALID, "Invalid parameter name %q.", printable(rawName))
		}
		value, err := url.QueryUnescape(rawValue)
		if err != nil {
			return nil, keybrake.ErrorParam(name, "Invalid form encoding: bad escape in the value of %s.", name)
		}
		if !utf8.ValidString(value) {
			return nil, keybrake.ErrorParam(name, "The value of %s is not valid UTF-8.", name)
		}
		seen[name]++
		if seen[name] > 1 && !listParams[name] {
			return nil, keybrake.ErrorParam(name, "Parameter %s was given more than once.", name)
		}
		if name == "MediaUrl" && seen[name] > MaxMediaURLs {
			return nil, keybrake.ErrorParam(name, "Too many MediaUrl parameters: at most %d.", MaxMediaURLs)
		}
		f.Pairs = append(f.Pairs, Pair{Name: name, Value: value})
	}
	return f, nil
}

// pascal reports whether s is a Twilio parameter name: a letter, then
// letters and digits.
func pascal(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// Has reports whether name was sent, even empty.
func (f *Form) Has(name string) bool {
	for _, p := range f.Pairs {
		if p.Name == name {
			return true
		}
	}
	return false
}

// Get returns the value of name and whether it was sent.
func (f *Form) Get(name string) (string, bool) {
	for _, p := range f.Pairs {
		if p.Name == name {
			return p.Value, true
		}
	}
	return "", false
}

// All returns every value of the list parameter name, in the order sent.
func (f *Form) All(name string) []string {
	var out []string
	for _, p := range f.Pairs {
		if p.Name == name {
			out = append(out, p.Value)
		}
	}
	return out
}

// only returns the first parameter sent that is not in allowed, or "".
func (f *Form) only(allowed map[string]bool) string {
	for _, p := range f.Pairs {
		if !allowed[p.Name] {
			return p.Name
		}
	}
	return ""
}
