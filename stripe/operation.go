package stripe

import (
	"strings"

	"github.com/keybrake/keybrake"
)

// Class says how the proxy treats an operation.
type Class int

// The classes, from harmless to refused-by-default.
const (
	ClassRead     Class = iota // GET: no money moves
	ClassWrite                 // a known write that moves no money (customers.create, payment_intents.update, ...)
	ClassPriced                // moves money and keybrake can price it
	ClassUnpriced              // moves money (or might) and keybrake cannot price it: refused unless the key allows unpriced
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

// Operation is a Stripe API request named the way Stripe's API reference
// names it: charges.create, payment_intents.confirm, customers.sources.list.
type Operation struct {
	Name     string // Resource + "." + Action: "charges.create", "checkout.sessions.create"
	Resource string // everything before the action: "charges", "checkout.sessions", "customers.sources"
	Action   string // "create", "retrieve", "update", "list", "search", "delete", "confirm", "capture", ...
	ID       string // the first object id in the path: pi_123 in /v1/payment_intents/pi_123/confirm, cus_1 in /v1/customers/cus_1/sources/card_1
	SubID    string // the nested object id, if any: card_1 in /v1/customers/cus_1/sources/card_1
	Path     string // the path as checked, "/v1/payment_intents/pi_123/confirm"
	Class    Class  // the most cautious class for any body; see Classify
}

// MaxPathLen bounds the length of a request path. Stripe's longest paths are
// well under 200 bytes.
const MaxPathLen = 512

// Names of keybrake's own endpoint, answered by the proxy and never forwarded.
const (
	KeybrakePath = "/v1/keybrake/key"
	KeybrakeKey  = "keybrake.key"
)

// ParseOperation names the operation of method and path: the raw (still
// escaped) request path after any /stripe prefix, starting /v1/, without the
// query string.
//
// Names follow Stripe's API reference: POST /v1/X is X.create, GET /v1/X is
// X.list, GET /v1/X/search is X.search, GET, POST and DELETE /v1/X/{id} are
// X.retrieve, X.update and X.delete, POST /v1/X/{id}/verb is X.verb, and
// nested resources such as /v1/customers/{id}/sources follow the same rules
// (customers.sources.create). Namespaces such as checkout/ and test_helpers/
// prefix the resource (checkout.sessions.create). Any other path still gets a
// name built by these rules, and any other method becomes the action.
//
// The returned Class does not depend on the body, so it is the most cautious
// class the operation can have: payment_intents.create is ClassPriced because
// it moves money when confirm=true. Callers holding the parsed body narrow it
// with Classify.
//
// Returns EINVALID for a method that is not an upper-case token and for a path
// that is not clean: not under /v1/, longer than MaxPathLen, with an empty,
// "." or ".." segment, an escaped slash, dot, backslash or percent sign, a
// malformed escape, a query, or any byte that is not printable ASCII, and for
// a namespace, resource or verb segment that is not lower-case snake_case.
func ParseOperation(method, path string) (Operation, error) {
	if !validMethod(method) {
		return Operation{}, keybrake.Errorf(keybrake.EINVALID, "Unsupported request method %q.", method)
	}
	segs, err := splitPath(path)
	if err != nil {
		return Operation{}, err
	}
	op, ok := nameOperation(method, segs)
	if !ok {
		return Operation{}, keybrake.Errorf(keybrake.EINVALID, "Unrecognized request URL %q.", printable(path))
	}
	op.Path = path
	if method == "GET" && path == KeybrakePath {
		op = Operation{Name: KeybrakeKey, Resource: "keybrake", Action: "key", Path: path}
	}
	op.Class = classOf(method, op.Name)
	return op, nil
}

func validMethod(m string) bool {
	if m == "" || len(m) > 16 {
		return false
	}
	for i := 0; i < len(m); i++ {
		if m[i] < 'A' || m[i] > 'Z' {
			return false
		}
	}
	return true
}

// splitPath checks the raw path and returns its decoded segments after /v1/.
func splitPath(path string) ([]string, error) {
	if len(path) > MaxPathLen {
		return nil, keybrake.Errorf(keybrake.EINVALID, "Request path is too long (%d bytes, at most %d).", len(path), MaxPathLen)
	}
	if !strings.HasPrefix(path, "/v1/") {
		return nil, keybrake.Errorf(keybrake.EINVALID, "Unrecognized request URL %q: keybrake proxies /v1/ paths only.", printable(path))
	}
	raw := strings.Split(path[len("/v1/"):], "/")
	segs := make([]string, 0, len(raw))
	for _, r := range raw {
		seg, ok := decodeSegment(r)
		if !ok || seg == "" || seg == "." || seg == ".." {
			return nil, keybrake.Errorf(keybrake.EINVALID, "Unrecognized request URL %q: the path is not clean.", printable(path))
		}
		segs = append(segs, seg)
	}
	return segs, nil
}

// decodeSegment unescapes one raw path segment. It refuses bytes outside
// printable ASCII, the query and fragment markers, backslashes, and escapes
// that would hide a separator, a dot, a backslash or another escape.
func decodeSegment(r string) (string, bool) {
	if !strings.ContainsRune(r, '%') {
		for i := 0; i < len(r); i++ {
			if !segmentByte(r[i]) {
				return "", false
			}
		}
		return r, true
	}
	var b strings.Builder
	for i := 0; i < len(r); i++ {
		c := r[i]
		if c == '%' {
			if i+2 >= len(r) {
				return "", false
			}
			hi, ok1 := unhex(r[i+1])
			lo, ok2 := unhex(r[i+2])
			if !ok1 || !ok2 {
				return "", false
			}
			c = hi<<4 | lo
			if c == '/' || c == '.' || c == '\\' || c == '%' || !segmentByte(c) {
				return "", false
			}
			i += 2
		} else if !segmentByte(c) {
			return "", false
		}
		b.WriteByte(c)
	}
	return b.String(), true
}

func segmentByte(c byte) bool {
	return c > ' ' && c < 0x7f && c != '?' && c != '#' && c != '\\'
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// printable returns s with non-printable bytes replaced, cut to a length fit
// for an error message.
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
