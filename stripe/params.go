package stripe

import (
	_ "embed"
	"sort"
	"strings"
	"sync"

	"github.com/keybrake/keybrake"
)

// paramsTxt is the request parameters of every write of the current API,
// generated from Stripe's OpenAPI description by stripe/internal/opsgen.
// Each line is a write's name and its top-level parameters, each a name
// and a shape, which says what the parameter takes nested under it:
//
//	shape  = [ "{" ( "*" shape | param { "," param } ) "}" ] [ "[]" shape ]
//	param  = name shape
//
// An empty shape is a value with nothing nested under it; {a,b{c}} is an
// object with children a and b, b an object with child c; {*} an object
// with children of any name, each a value (metadata), {*{a}} each an
// object with child a; [] a list of values (name[]=x or name[0]=x), []{a}
// a list of objects with child a (name[0][a]=x). A parameter that takes
// both an object and a list has both parts (name{a}[]).
//
//go:embed params.txt
var paramsTxt string

// APIVersion is the Stripe API version whose parameters params.txt lists.
const APIVersion = "2026-08-26"

// shape is what a parameter takes nested under it.
type shape struct {
	keys map[string]*shape // an object with these children (nil: not an object)
	any  *shape            // an object with children of any name, of this shape
	list *shape            // a list of items of this shape
}

// paramsOf parses paramsTxt once: write name -> its parameters as the
// children of one shape. A malformed table is a build defect, checked by
// the tests, so it panics.
var paramsOf = sync.OnceValue(func() map[string]*shape {
	m := map[string]*shape{}
	for _, line := range strings.Split(paramsTxt, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		fs := strings.Fields(line)
		top := &shape{keys: make(map[string]*shape, len(fs)-1)}
		for _, tok := range fs[1:] {
			name, sh, rest := parseParam(tok)
			if rest != "" || name == "" {
				panic("stripe: params.txt: malformed " + tok)
			}
			top.keys[name] = sh
		}
		m[fs[0]] = top
	}
	return m
})

// parseParam parses a param of the grammar and returns what follows it.
func parseParam(s string) (string, *shape, string) {
	i := strings.IndexAny(s, "{}[],")
	if i < 0 {
		return s, &shape{}, ""
	}
	sh, rest := parseShape(s[i:])
	return s[:i], sh, rest
}

// parseShape parses a shape of the grammar and returns what follows it.
func parseShape(s string) (*shape, string) {
	sh := &shape{}
	if strings.HasPrefix(s, "{") {
		s = s[1:]
		if strings.HasPrefix(s, "*") {
			sh.any, s = parseShape(s[1:])
		} else {
			sh.keys = map[string]*shape{}
			for s != "" && s[0] != '}' {
				var name string
				var c *shape
				name, c, s = parseParam(s)
				sh.keys[name] = c
				s = strings.TrimPrefix(s, ",")
			}
		}
		if !strings.HasPrefix(s, "}") {
			panic("stripe: params.txt: unclosed {")
		}
		s = s[1:]
	}
	if strings.HasPrefix(s, "[]") {
		sh.list, s = parseShape(s[2:])
	}
	return sh, s
}

// ParamNames returns the top-level parameters API APIVersion documents for
// the write op, sorted; empty for a write that takes none, nil for one
// params.txt does not list.
func ParamNames(op string) []string {
	top, ok := paramsOf()[op]
	if !ok {
		return nil
	}
	names := make([]string, 0, len(top.keys))
	for n := range top.keys {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// CheckParams refuses a write that keybrake lets through as free or
// prices itself (class ClassWrite or ClassPriced, as Classify returned for
// form) when it sends a parameter keybrake has not reviewed: a top-level
// name that API APIVersion does not document for the operation and that
// is not a reviewed legacy or preview name (LegacyParams), or a parameter
// nested under a documented one, at any depth, that API APIVersion does not
// document there (children of a reviewed legacy name are not checked).
//
// Stripe reads a request by the API version it names, old or preview, and
// those versions took parameters the current one no longer lists, some of
// which moved money (plan on customers.create subscribed and charged). A
// free write is free because of what keybrake knows of its parameters, so
// one it does not know is refused rather than guessed free; it is not made
// unpriced either, because a key that allows unpriced writes would then
// forward it uncounted. A write keybrake already classified unpriced is not
// checked: it is refused, or forwarded uncounted, whatever it sends.
//
// Returns EINVALID naming the first such parameter in the order sent.
func CheckParams(op Operation, form *Form, class Class) error {
	if class != ClassWrite && class != ClassPriced || form == nil {
		return nil
	}
	top, ok := paramsOf()[op.Name]
	if !ok {
		return keybrake.Errorf(keybrake.EINVALID, "keybrake has no list of the parameters of %s, so it cannot tell what the request moves.", op.Name)
	}
	var buf [maxDepth + 2]string
	for _, p := range form.Pairs {
		path, ok := splitKey(buf[:0], p.Key)
		if !ok {
			return keybrake.ErrorParam(p.Key, "Invalid parameter name %q.", p.Key)
		}
		if _, known := top.keys[path[0]]; !known {
			if _, reviewed := legacyParam(op.Name, path[0]); reviewed {
				continue
			}
			return unknownParam(op, path[0])
		}
		if n := top.known(path); n < len(path) {
			return unknownParam(op, stripeName(path[:n+1]))
		}
	}
	return nil
}

// known returns how many segments of path, from the first, sh takes: a
// child of an object by its name (or any name, for {*}), an item of a list
// by its position (empty for name[]=x, or decimal digits).
func (sh *shape) known(path []string) int {
	for i, seg := range path {
		switch {
		case sh.keys[seg] != nil:
			sh = sh.keys[seg]
		case sh.any != nil && seg != "":
			// name[]=x appends to a list: it names no child.
			sh = sh.any
		case sh.list != nil && isIndex(seg):
			sh = sh.list
		default:
			return i
		}
	}
	return len(path)
}

// stripeName writes path as Stripe names a parameter: a[b][c].
func stripeName(path []string) string {
	var b strings.Builder
	b.WriteString(path[0])
	for _, seg := range path[1:] {
		b.WriteString("[" + seg + "]")
	}
	return b.String()
}

// isIndex reports whether seg is a list position: empty (name[]=x) or
// decimal digits (name[0]=x).
func isIndex(seg string) bool {
	for i := 0; i < len(seg); i++ {
		if seg[i] < '0' || seg[i] > '9' {
			return false
		}
	}
	return true
}

func unknownParam(op Operation, name string) error {
	return keybrake.ErrorParam(name, "keybrake does not know parameter %s of %s in any Stripe API version it has reviewed (API %s and the legacy and preview names in docs/money-model.md), so it cannot tell whether it moves money: remove it, or ask keybrake's maintainers to review it.", name, op.Name, APIVersion)
}
