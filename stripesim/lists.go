package stripesim

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/keybrake/keybrake/stripe"
)

// Stripe's page sizes.
const (
	defaultLimit = 10
	maxLimit     = 100
)

// limitParam parses limit, 1 to 100, default 10.
func limitParam(f *stripe.Form) (int, *apiError) {
	s, ok, aerr := str(f, "limit")
	if aerr != nil || !ok {
		return defaultLimit, aerr
	}
	n, err := strconv.Atoi(s)
	switch {
	case err != nil:
		return 0, invalid("parameter_invalid_integer", "limit", "Invalid integer: %s", s)
	case n < 1:
		return 0, invalid("parameter_invalid_integer", "limit", "This value must be greater than or equal to 1.")
	case n > maxLimit:
		return 0, invalid("parameter_invalid_integer", "limit", "This value must be less than or equal to %d.", maxLimit)
	}
	return n, nil
}

// createdRange is the created filter of a list: created=ts, or any of
// created[gt], [gte], [lt], [lte].
type createdRange struct {
	gt, gte, lt, lte *int64
}

func createdParam(f *stripe.Form) (createdRange, *apiError) {
	var r createdRange
	switch v := f.Tree["created"].(type) {
	case nil:
	case string:
		n, aerr := intParam("created", v)
		if aerr != nil {
			return r, aerr
		}
		r.gte, r.lte = &n, &n
	case map[string]any:
		for op, raw := range v {
			param := "created[" + op + "]"
			s, ok := raw.(string)
			if !ok {
				return r, invalid("", param, "Invalid integer: %s must be an integer.", param)
			}
			n, aerr := intParam(param, s)
			if aerr != nil {
				return r, aerr
			}
			switch op {
			case "gt":
				r.gt = &n
			case "gte":
				r.gte = &n
			case "lt":
				r.lt = &n
			case "lte":
				r.lte = &n
			default:
				return r, errUnknownParam(param)
			}
		}
	default:
		return r, invalid("", "created", "Invalid created: want an integer or a hash of gt, gte, lt, lte.")
	}
	return r, nil
}

func (r createdRange) contains(t int64) bool {
	return (r.gt == nil || t > *r.gt) && (r.gte == nil || t >= *r.gte) &&
		(r.lt == nil || t < *r.lt) && (r.lte == nil || t <= *r.lte)
}

// listCharges serves GET /v1/charges: newest first, filtered by customer,
// payment_intent and created, paginated with starting_after or ending_before.
func listCharges(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "customer", "created", "limit", "starting_after", "ending_before", "payment_intent", "transfer_group"); aerr != nil {
		return nil, aerr
	}
	limit, aerr := limitParam(f)
	if aerr != nil {
		return nil, aerr
	}
	created, aerr := createdParam(f)
	if aerr != nil {
		return nil, aerr
	}
	var customer, pi, after, before string
	for _, p := range []struct {
		name string
		dst  *string
	}{{"customer", &customer}, {"payment_intent", &pi}, {"starting_after", &after}, {"ending_before", &before}} {
		if *p.dst, aerr = optional(f, p.name); aerr != nil {
			return nil, aerr
		}
	}
	if after != "" && before != "" {
		return nil, invalid("", "ending_before", "You may only specify one of these parameters: starting_after, ending_before.")
	}
	for param, id := range map[string]string{"starting_after": after, "ending_before": before} {
		if _, ok := lookup(s.st, s.st.charges, c.scope, id); id != "" && !ok {
			return nil, errNoSuch(http.StatusBadRequest, "charge", param, id)
		}
	}

	// Cursors are positions in creation order, so a cursor that the filters
	// leave out still marks where the page starts.
	cursor := func(id string) int {
		for i, ch := range s.st.Charges {
			if ch.ID == id {
				return i
			}
		}
		return -1
	}
	lo, hi := 0, len(s.st.Charges) // the window of positions, hi exclusive
	if after != "" {
		hi = cursor(after)
	}
	if before != "" {
		lo = cursor(before) + 1
	}
	var all []*Charge // newest first
	for i := hi - 1; i >= lo; i-- {
		ch := s.st.Charges[i]
		if s.st.Owners[ch.ID] != c.scope || !created.contains(ch.Created) ||
			(customer != "" && ch.Customer != customer) || (pi != "" && ch.PaymentIntent != pi) {
			continue
		}
		all = append(all, ch)
	}
	more := len(all) > limit
	switch {
	case more && before != "":
		all = all[len(all)-limit:] // the page just before the cursor
	case more:
		all = all[:limit]
	case all == nil:
		all = []*Charge{}
	}
	return listObject{Object: "list", Data: all, HasMore: more, URL: "/v1/charges"}, nil
}

// searchCharges serves GET /v1/charges/search with Stripe's query language,
// as far as billing uses it: clauses joined by AND, each metadata['k']:'v',
// customer:'…', status:'…', currency:'…', payment_intent:'…', or amount and
// created compared with :, >, >=, < or <=.
func searchCharges(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "query", "limit", "page"); aerr != nil {
		return nil, aerr
	}
	query, aerr := required(f, "query")
	if aerr != nil {
		return nil, aerr
	}
	limit, aerr := limitParam(f)
	if aerr != nil {
		return nil, aerr
	}
	clauses, aerr := parseQuery(query)
	if aerr != nil {
		return nil, aerr
	}
	page, aerr := optional(f, "page")
	if aerr != nil {
		return nil, aerr
	}
	offset := 0
	if page != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(page, "page_"))
		if err != nil || n < 0 || !strings.HasPrefix(page, "page_") {
			return nil, invalid("", "page", "Invalid page: %s", page)
		}
		offset = n
	}
	var hits []*Charge
	for i := len(s.st.Charges) - 1; i >= 0; i-- {
		ch := s.st.Charges[i]
		if s.st.Owners[ch.ID] == c.scope && matchAll(clauses, ch) {
			hits = append(hits, ch)
		}
	}
	res := searchResult{Object: "search_result", Data: []*Charge{}, URL: "/v1/charges/search"}
	if offset < len(hits) {
		hits = hits[offset:]
		if len(hits) > limit {
			next := "page_" + strconv.Itoa(offset+limit)
			res.HasMore, res.NextPage = true, &next
			hits = hits[:limit]
		}
		res.Data = hits
	}
	return res, nil
}
