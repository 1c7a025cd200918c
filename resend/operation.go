package resend

import (
	"strings"

	"github.com/keybrake/keybrake"
)

// MaxPathLen bounds the length of a request path.
const MaxPathLen = 128

// Class says how the proxy treats an operation, as the stripe and twilio
// packages' classes of the same names do.
type Class int

// The classes.
const (
	ClassRead     Class = iota // GET: nothing is sent
	ClassWrite                 // a known write that sends nothing
	ClassPriced                // sends email and keybrake can price it
	ClassUnpriced              // may send email and keybrake cannot price it
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

// Operation is a Resend API request named after the SDKs' methods:
// emails.send, emails.batch, domains.get.
type Operation struct {
	Name  string // "emails.send", …
	ID    string // the email or domain id in the path, if any
	Path  string // the path as checked
	Class Class
}

// Operations returns the names of every operation keybrake knows, the
// only ones a key can allow.
func Operations() []string {
	return []string{"domains.get", "domains.list", "emails.batch", "emails.cancel", "emails.get",
		"emails.list", "emails.send", "emails.update"}
}

// ParseOperation names the operation of method and path: the raw request
// path after any /resend prefix, without the query string.
//
// Returns EINVALID for a path that is not clean (too long, an escape, a
// byte that is not printable ASCII, an id that is not a UUID) and
// ENOTFOUND for a path or method keybrake does not proxy: default deny.
func ParseOperation(method, path string) (Operation, error) {
	if len(path) > MaxPathLen {
		return Operation{}, keybrake.Errorf(keybrake.EINVALID, "Request path is too long (%d bytes, at most %d).", len(path), MaxPathLen)
	}
	for i := 0; i < len(path); i++ {
		if c := path[i]; c <= ' ' || c >= 0x7f || c == '%' || c == '\\' || c == '?' || c == '#' {
			return Operation{}, keybrake.Errorf(keybrake.EINVALID, "The path %s is not clean.", printable(path))
		}
	}
	segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	op := Operation{Path: path}
	switch {
	case len(segs) == 1 && segs[0] == "emails" && method == "POST":
		op.Name, op.Class = "emails.send", ClassPriced
	case len(segs) == 1 && segs[0] == "emails" && method == "GET":
		op.Name, op.Class = "emails.list", ClassRead
	case len(segs) == 2 && segs[0] == "emails" && segs[1] == "batch" && method == "POST":
		op.Name, op.Class = "emails.batch", ClassPriced
	case len(segs) == 2 && segs[0] == "emails" && method == "GET":
		op.Name, op.Class = "emails.get", ClassRead
	case len(segs) == 2 && segs[0] == "emails" && method == "PATCH":
		op.Name, op.Class = "emails.update", ClassWrite
	case len(segs) == 3 && segs[0] == "emails" && segs[2] == "cancel" && method == "POST":
		op.Name, op.Class = "emails.cancel", ClassWrite
	case len(segs) == 1 && segs[0] == "domains" && method == "GET":
		op.Name, op.Class = "domains.list", ClassRead
	case len(segs) == 2 && segs[0] == "domains" && method == "GET":
		op.Name, op.Class = "domains.get", ClassRead
	default:
		return Operation{}, keybrake.Errorf(keybrake.ENOTFOUND, "keybrake does not proxy %s %s: only sending and reading emails and reading domains are allowed.", printable(method), printable(path))
	}
	if len(segs) >= 2 && op.Name != "emails.batch" {
		op.ID = segs[1]
		if !IsID(op.ID) {
			return Operation{}, keybrake.Errorf(keybrake.EINVALID, "The id %q is not a valid Resend id (a UUID).", printable(op.ID))
		}
	}
	return op, nil
}

// IsID reports whether s is a Resend id: a lower-case UUID.
func IsID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
	}
	return true
}

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
