package stripesim

import (
	"strconv"
	"strings"
)

// clause is one term of a search query: field op value, where field is
// metadata['key'] (metaKey set) or a charge field.
type clause struct {
	field   string
	metaKey string
	op      string // ":", ">", ">=", "<", "<="
	value   string
	number  int64
}

// searchable lists the charge fields a query may name and whether they are
// numeric.
var searchable = map[string]bool{
	"amount": true, "created": true,
	"customer": false, "status": false, "currency": false, "payment_intent": false,
}

// parseQuery parses clauses joined by AND. Returns a 400 naming query for
// anything else.
func parseQuery(q string) ([]clause, *apiError) {
	var out []clause
	for _, term := range strings.Split(q, " AND ") {
		cl, ok := parseClause(strings.TrimSpace(term))
		if !ok {
			return nil, invalid("", "query", "We were unable to parse your search query. Try using the format `metadata['key']:'value'` or `field:'value'`, clauses joined with AND: %q", term)
		}
		out = append(out, cl)
	}
	return out, nil
}

func parseClause(t string) (clause, bool) {
	var cl clause
	if rest, ok := strings.CutPrefix(t, "metadata["); ok {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return cl, false
		}
		key, ok := unquote(rest[:end])
		if !ok || key == "" {
			return cl, false
		}
		cl.field, cl.metaKey, t = "metadata", key, rest[end+1:]
	} else {
		i := strings.IndexAny(t, ":<>")
		if i <= 0 {
			return cl, false
		}
		cl.field, t = t[:i], t[i:]
		if _, ok := searchable[cl.field]; !ok {
			return cl, false
		}
	}
	for _, op := range []string{">=", "<=", ":", ">", "<"} {
		if v, ok := strings.CutPrefix(t, op); ok {
			cl.op, t = op, v
			break
		}
	}
	if cl.op == "" || t == "" {
		return cl, false
	}
	numeric := searchable[cl.field]
	if v, ok := unquote(t); ok {
		cl.value = v
	} else if numeric {
		cl.value = t
	} else {
		return cl, false
	}
	if numeric {
		n, err := strconv.ParseInt(cl.value, 10, 64)
		if err != nil {
			return cl, false
		}
		cl.number = n
	} else if cl.op != ":" {
		return cl, false
	}
	return cl, true
}

// unquote strips matching single or double quotes.
func unquote(s string) (string, bool) {
	if len(s) >= 2 && (s[0] == '\'' || s[0] == '"') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1], true
	}
	return "", false
}

func matchAll(clauses []clause, ch *Charge) bool {
	for _, cl := range clauses {
		if !cl.match(ch) {
			return false
		}
	}
	return true
}

func (cl clause) match(ch *Charge) bool {
	switch cl.field {
	case "metadata":
		v, ok := ch.Metadata[cl.metaKey]
		return ok && v == cl.value
	case "customer":
		return ch.Customer == cl.value
	case "status":
		return ch.Status == cl.value
	case "currency":
		return ch.Currency == strings.ToLower(cl.value)
	case "payment_intent":
		return ch.PaymentIntent == cl.value
	case "amount":
		return compare(ch.Amount, cl.op, cl.number)
	case "created":
		return compare(ch.Created, cl.op, cl.number)
	}
	return false
}

func compare(v int64, op string, n int64) bool {
	switch op {
	case ":":
		return v == n
	case ">":
		return v > n
	case ">=":
		return v >= n
	case "<":
		return v < n
	case "<=":
		return v <= n
	}
	return false
}
