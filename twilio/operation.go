package twilio

import (
	"slices"
	"sort"
	"strings"

	"github.com/keybrake/keybrake"
)

// APIVersion is the only version of the REST API keybrake proxies.
const APIVersion = "2010-04-01"

// MaxPathLen bounds the length of a request path; Twilio's longest
// 2010-04-01 paths are well under 200 bytes.
const MaxPathLen = 256

// Class says how the proxy treats an operation.
type Class int

// The classes, from harmless to refused-by-default; they mean what the
// stripe package's classes of the same name mean.
const (
	ClassRead     Class = iota // GET: nothing is sent and no money moves
	ClassWrite                 // a known write that sends nothing and moves no money
	ClassPriced                // sends a message or places a call, and keybrake can price it
	ClassUnpriced              // may move money and keybrake cannot price it
)

// String returns the class's name as it appears in logs and audit events.
func (c Class) String() string {
	switch c {
	case ClassRead:
		return "read"
	case ClassWrite:
		return "write"
	case ClassPriced:
		return "priced"
	case ClassUnpriced:
		return "unpriced"
	}
	return "unknown"
}

// Operation is a Twilio API request named after the resource and the
// action of Twilio's own API reference: messages.create, calls.update.
type Operation struct {
	Name     string // Resource + "." + Action
	Resource string // "messages", "calls", "accounts", "incoming_phone_numbers", "balance"
	Action   string // "create", "fetch", "list", "update", "delete"
	Account  string // the AccountSid in the path: AC + 32 hex digits
	ID       string // the SM…, MM… or CA… sid in the path, if any
	Path     string // the path as checked
	Class    Class  // the most cautious class for any body; see Classify
}

// resources maps a path segment under the account to its resource name and
// the prefixes of its sids: a message's is SM, or MM for one with media
// (Twilio names an MMS so).
var resources = map[string]struct {
	name string
	sids []string
}{
	"Messages":             {"messages", []string{"SM", "MM"}},
	"Calls":                {"calls", []string{"CA"}},
	"IncomingPhoneNumbers": {"incoming_phone_numbers", []string{"PN"}},
	"Balance":              {"balance", nil},
}

// known lists every operation keybrake proxies, with its cautious class.
var known = map[string]Class{
	"messages.create": ClassPriced,
	"messages.list":   ClassRead,
	"messages.fetch":  ClassRead,
	"messages.update": ClassWrite,
	"messages.delete": ClassWrite,

	"calls.create": ClassPriced,
	"calls.list":   ClassRead,
	"calls.fetch":  ClassRead,
	"calls.update": ClassWrite,

	"accounts.fetch":              ClassRead,
	"incoming_phone_numbers.list": ClassRead,
	"balance.fetch":               ClassRead,
}

// Operations returns the names of every operation keybrake knows, the
// only ones a key can allow.
func Operations() []string {
	out := make([]string, 0, len(known))
	for name := range known {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// ParseOperation names the operation of method and path: the raw request
// path after any /twilio prefix, without the query string.
//
// Returns EINVALID for a path that is not clean (longer than MaxPathLen,
// not under /2010-04-01/Accounts/, an account sid that is not AC followed
// by 32 hex digits, a resource sid of the wrong kind, any escape, or a
// byte that is not printable ASCII), and ENOTFOUND for a clean path or
// method keybrake does not proxy: default deny.
func ParseOperation(method, path string) (Operation, error) {
	if len(path) > MaxPathLen {
		return Operation{}, keybrake.Errorf(keybrake.EINVALID, "Request path is too long (%d bytes, at most %d).", len(path), MaxPathLen)
	}
	for i := 0; i < len(path); i++ {
		if c := path[i]; c <= ' ' || c >= 0x7f || c == '%' || c == '\\' || c == '?' || c == '#' {
			return Operation{}, keybrake.Errorf(keybrake.EINVALID, "The requested resource %s was not found: the path is not clean.", printable(path))
		}
	}
	prefix := "/" + APIVersion + "/Accounts/"
	rest, ok := strings.CutPrefix(path, prefix)
	if !ok {
		return Operation{}, notFound(method, path)
	}
	segs := strings.Split(rest, "/")
	last := len(segs) - 1
	base, ok := strings.CutSuffix(segs[last], ".json")
	if !ok {
		return Operation{}, notFound(method, path)
	}
	segs[last] = base
	if !IsAccountSid(segs[0]) {
		return Operation{}, keybrake.ErrorParam("AccountSid", "Invalid AccountSid %q in the path: want AC followed by 32 hex digits.", printable(segs[0]))
	}
	op := Operation{Account: segs[0], Path: path}
	switch len(segs) {
	case 1:
		op.Resource, op.Action = "accounts", action(method, true)
	case 2, 3:
		r, ok := resources[segs[1]]
		if !ok {
			return Operation{}, notFound(method, path)
		}
		op.Resource = r.name
		if len(segs) == 3 {
			if !slices.ContainsFunc(r.sids, func(p string) bool { return isSid(segs[2], p) }) {
				return Operation{}, notFound(method, path)
			}
			op.ID = segs[2]
		}
		op.Action = action(method, len(segs) == 3 || len(r.sids) == 0)
	default:
		return Operation{}, notFound(method, path)
	}
	op.Name = op.Resource + "." + op.Action
	class, ok := known[op.Name]
	if !ok {
		return Operation{}, notFound(method, path)
	}
	op.Class = class
	return op, nil
}

// action is Twilio's name for method on a list (atObject false) or on one
// resource.
func action(method string, atObject bool) string {
	switch {
	case method == "GET" && atObject:
		return "fetch"
	case method == "GET":
		return "list"
	case method == "POST" && atObject:
		return "update"
	case method == "POST":
		return "create"
	case method == "DELETE" && atObject:
		return "delete"
	}
	return strings.ToLower(method)
}

func notFound(method, path string) error {
	return keybrake.Errorf(keybrake.ENOTFOUND, "keybrake does not proxy %s %s: only Messages, Calls and read-only account resources of the %s API are allowed.",
		printable(method), printable(path), APIVersion)
}

// IsAccountSid reports whether s is an account sid: AC and 32 lower-case
// hex digits.
func IsAccountSid(s string) bool { return isSid(s, "AC") }

// IsAPIKeySid reports whether s is an API key sid: SK and 32 lower-case
// hex digits.
func IsAPIKeySid(s string) bool { return isSid(s, "SK") }

// isSid reports whether s is prefix followed by 32 lower-case hex digits,
// the shape of every Twilio sid.
func isSid(s, prefix string) bool {
	if len(s) != 34 || s[:2] != prefix {
		return false
	}
	for i := 2; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// printable returns s with non-printable bytes replaced, cut to a length
// fit for an error message.
func printable(s string) string {
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}
