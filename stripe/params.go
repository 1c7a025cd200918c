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
// Each line is a write's name and its top-level parameters, each written
//
//	name        a value; nothing nested under it
//	name{a,b}   an object with children a and b
//	name{*}     an object with children of any name (metadata, currency maps)
//	name[]      a list of values (name[]=x or name[0]=x)
//	name[]{a,b} a list of objects with children a and b (name[0][a]=x)
//
// and a parameter that takes several shapes has each (name{a}[]{b}).
//
//go:embed params.txt
var paramsTxt string

// APIVersion is the Stripe API version whose parameters params.txt lists.
const APIVersion = "2026-08-26"

// shape is what one top-level parameter takes one level down.
type shape struct {
	anyKey  bool            // an object with children of any name
	keys    map[string]bool // an object with these children; nil: not an object
	list    bool            // a list
	anyItem bool            // of objects with children of any name
	items   map[string]bool // of objects with these children; nil: of values
}

// paramsOf parses paramsTxt once: write name -> top-level name -> shape.
var paramsOf = sync.OnceValue(func() map[string]map[string]*shape {
	m := map[string]map[string]*shape{}
	for _, line := range strings.Split(paramsTxt, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		fs := strings.Fields(line)
		ps := make(map[string]*shape, len(fs)-1)
		for _, tok := range fs[1:] {
			name, sh := parseShape(tok)
			ps[name] = sh
		}
		m[fs[0]] = ps
	}
	return m
})

// parseShape parses one token of paramsTxt.
func parseShape(tok string) (string, *shape) {
	sh := &shape{}
	i := strings.IndexAny(tok, "{[")
	if i < 0 {
		return tok, sh
	}
	name, rest := tok[:i], tok[i:]
	if rest[0] == '{' {
		j := strings.IndexByte(rest, '}')
		sh.anyKey, sh.keys = parseKeys(rest[1:j])
		rest = rest[j+1:]
	}
	if strings.HasPrefix(rest, "[]") {
		sh.list = true
		if rest = rest[2:]; rest != "" {
			sh.anyItem, sh.items = parseKeys(rest[1 : len(rest)-1])
		}
	}
	return name, sh
}

func parseKeys(s string) (bool, map[string]bool) {
	if s == "*" {
		return true, map[string]bool{}
	}
	m := map[string]bool{}
	for _, k := range strings.Split(s, ",") {
		if k != "" {
			m[k] = true
		}
	}
	return false, m
}

// ParamNames returns the top-level parameters API APIVersion documents for
// the write op, sorted; empty for a write that takes none, nil for one
// params.txt does not list.
func ParamNames(op string) []string {
	ps, ok := paramsOf()[op]
	if !ok {
		return nil
	}
	names := make([]string, 0, len(ps))
	for n := range ps {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// CheckParams refuses a write that keybrake lets through as free or
// prices itself (class ClassWrite or ClassPriced, as Classify returned for
// form) when it sends a parameter keybrake has not reviewed: a top-level
// name that API APIVersion does not document for the operation and that
// is not a reviewed legacy or preview name (LegacyParams), or a child of a
// documented parameter that API APIVersion does not document (children of
// objects, and of the objects in lists, one level down; deeper ones are
// not checked).
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
	ps, ok := paramsOf()[op.Name]
	if !ok {
		return keybrake.Errorf(keybrake.EINVALID, "keybrake has no list of the parameters of %s, so it cannot tell what the request moves.", op.Name)
	}
	var buf [maxDepth + 2]string
	for _, p := range form.Pairs {
		path, ok := splitKey(buf[:0], p.Key)
		if !ok {
			return keybrake.ErrorParam(p.Key, "Invalid parameter name %q.", p.Key)
		}
		sh, known := ps[path[0]]
		if !known {
			if _, reviewed := legacyParam(op.Name, path[0]); reviewed {
				continue
			}
			return unknownParam(op, path[0])
		}
		if bad := sh.unknownChild(path); bad != "" {
			return unknownParam(op, bad)
		}
	}
	return nil
}

// unknownChild returns the name, Stripe-style, of the first level of path
// below the top that sh does not take, or "" if it takes the path.
func (sh *shape) unknownChild(path []string) string {
	if len(path) == 1 {
		return ""
	}
	child := path[1]
	switch {
	case sh.keys != nil && (sh.anyKey || sh.keys[child]):
		return ""
	case sh.list && isIndex(child):
		if len(path) == 2 {
			return ""
		}
		if sh.items != nil && (sh.anyItem || sh.items[path[2]]) {
			return ""
		}
		return path[0] + "[" + child + "][" + path[2] + "]"
	}
	return path[0] + "[" + child + "]"
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
