package stripe

import (
	"net/url"
	"strconv"
	"strings"

	"github.com/keybrake/keybrake"
)

// MaxFormKeys bounds the number of parameters in one request body; Stripe's
// own requests are far smaller, and a bound keeps hostile bodies cheap.
const MaxFormKeys = 1000

// maxDepth bounds bracket nesting (a[b][c]…): seven brackets, the deepest
// parameter API APIVersion documents on a write
// (invoices.create_preview's schedule_details[phases][0][items][0][price_data][recurring][interval]);
// TestParamsRoundTrip fails if params.txt lists a deeper one.
const maxDepth = 7

// Pair is one key=value of a form body, decoded, in the order sent.
type Pair struct {
	Key   string
	Value string
}

// Form is a decoded application/x-www-form-urlencoded body in Stripe's
// dialect: nested parameters written metadata[order]=42, lists written
// expand[]=a or items[0][price]=p.
//
// Tree holds the nested view: each value is a string, a map[string]any for
// a[b] or a[0] children, or a []any for a[] lists.
type Form struct {
	Pairs []Pair
	Tree  map[string]any
}

// ParseForm decodes body strictly. A malformed percent-escape, an empty or
// unbalanced bracket key, a key given twice, a key that is both a value and
// a parent (a=1&a[b]=2), nesting deeper than seven levels or more than
// MaxFormKeys parameters return EINVALID naming the parameter.
func ParseForm(body string) (*Form, error) {
	f := &Form{Tree: map[string]any{}}
	if body == "" {
		return f, nil
	}
	n := strings.Count(body, "&") + 1
	if n > MaxFormKeys {
		return nil, keybrake.Errorf(keybrake.EINVALID, "Too many parameters: at most %d are accepted.", MaxFormKeys)
	}
	f.Pairs = make([]Pair, 0, n)
	for rest := body; rest != ""; {
		var part string
		part, rest, _ = strings.Cut(rest, "&")
		if part == "" {
			continue
		}
		rawKey, rawValue, _ := strings.Cut(part, "=")
		key, err := url.QueryUnescape(rawKey)
		if err != nil {
			return nil, keybrake.Errorf(keybrake.EINVALID, "Invalid form encoding: bad escape in parameter name %q.", rawKey)
		}
		value, err := url.QueryUnescape(rawValue)
		if err != nil {
			return nil, keybrake.ErrorParam(key, "Invalid form encoding: bad escape in the value of %q.", key)
		}
		if err := f.add(key, value); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// SplitKey splits a[b][c] into ["a","b","c"]. Returns ok=false for a key that
// is empty or whose brackets do not balance.
func SplitKey(key string) (path []string, ok bool) {
	return splitKey(nil, key)
}

// splitKey is SplitKey appending to path, so a caller can split into an
// array on its stack.
func splitKey(path []string, key string) ([]string, bool) {
	i := strings.IndexByte(key, '[')
	if i < 0 {
		return append(path, key), key != "" && !strings.Contains(key, "]")
	}
	if i == 0 {
		return nil, false
	}
	path = append(path, key[:i])
	rest := key[i:]
	for rest != "" {
		if rest[0] != '[' {
			return nil, false
		}
		j := strings.IndexByte(rest, ']')
		if j < 0 {
			return nil, false
		}
		seg := rest[1:j]
		if strings.ContainsAny(seg, "[") {
			return nil, false
		}
		path = append(path, seg)
		rest = rest[j+1:]
	}
	return path, true
}

func (f *Form) add(key, value string) error {
	var buf [maxDepth + 2]string
	path, ok := splitKey(buf[:0], key)
	if !ok {
		return keybrake.ErrorParam(key, "Invalid parameter name %q: brackets do not balance.", key)
	}
	if len(path) > maxDepth+1 {
		return keybrake.ErrorParam(key, "Invalid parameter name %q: nested too deeply.", key)
	}
	f.Pairs = append(f.Pairs, Pair{Key: key, Value: value})

	node := f.Tree
	for i, seg := range path {
		last := i == len(path)-1
		if seg == "" {
			// a[] appends to a list held by the parent under the previous segment;
			// handled when visiting the previous segment below.
			return keybrake.ErrorParam(key, "Invalid parameter name %q.", key)
		}
		if last {
			if _, dup := node[seg]; dup {
				return keybrake.ErrorParam(key, "Parameter %q was given more than once.", key)
			}
			node[seg] = value
			return nil
		}
		// An append: seg[] with nothing after it.
		if path[i+1] == "" {
			if i+1 != len(path)-1 {
				return keybrake.ErrorParam(key, "Invalid parameter name %q: [] must come last.", key)
			}
			switch cur := node[seg].(type) {
			case nil:
				node[seg] = []any{value}
			case []any:
				node[seg] = append(cur, value)
			default:
				return keybrake.ErrorParam(key, "Parameter %q mixes a list with another kind of value.", key)
			}
			return nil
		}
		switch cur := node[seg].(type) {
		case nil:
			child := map[string]any{}
			node[seg] = child
			node = child
		case map[string]any:
			node = cur
		default:
			return keybrake.ErrorParam(key, "Parameter %q is given both as a value and as a parent of nested parameters.", key)
		}
	}
	return nil
}

// Has reports whether the top-level parameter name was sent in any form.
func (f *Form) Has(name string) bool {
	_, ok := f.Tree[name]
	return ok
}

// Get returns the string at the nested path (Get("metadata", "order")),
// and whether a string is there.
func (f *Form) Get(path ...string) (string, bool) {
	var node any = f.Tree
	for _, seg := range path {
		m, ok := node.(map[string]any)
		if !ok {
			return "", false
		}
		node = m[seg]
	}
	s, ok := node.(string)
	return s, ok
}

// Map returns the nested parameters at path (Map("metadata")) as strings;
// non-string children are left out. Returns nil if there is no map there.
func (f *Form) Map(path ...string) map[string]string {
	var node any = f.Tree
	for _, seg := range path {
		m, ok := node.(map[string]any)
		if !ok {
			return nil
		}
		node = m[seg]
	}
	m, ok := node.(map[string]any)
	if !ok {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

// ParseAmount parses a Stripe amount: a positive integer of at most eight
// digits, in the currency's minor unit. Returns EINVALID naming param.
func ParseAmount(param, s string) (int64, error) {
	if s == "" {
		return 0, keybrake.ErrorParam(param, "Missing required param: %s.", param)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, keybrake.ErrorParam(param, "Invalid integer: %s", s)
		}
	}
	if len(strings.TrimLeft(s, "0")) > 8 {
		return 0, keybrake.ErrorParam(param, "This value must be less than or equal to %d (it currently is '%s').", MaxAmount, s)
	}
	n, _ := strconv.ParseInt(s, 10, 64)
	if n <= 0 {
		return 0, keybrake.ErrorParam(param, "This value must be greater than or equal to 1.")
	}
	return n, nil
}
