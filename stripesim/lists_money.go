package stripesim

import (
	"net/http"
)

// listRefunds serves GET /v1/refunds: newest first, filtered by charge,
// payment_intent and created, paginated with starting_after.
func listRefunds(s *Server, c *call) (any, *apiError) {
	return listMoney(s, c, "refund", "/v1/refunds", s.st.Refunds, s.st.refunds,
		func(r *Refund) (string, int64) { return r.ID, r.Created },
		map[string]func(*Refund) string{
			"charge":         func(r *Refund) string { return r.Charge },
			"payment_intent": func(r *Refund) string { return r.PaymentIntent },
		})
}

// listTransfers serves GET /v1/transfers: newest first, filtered by
// destination, transfer_group and created, paginated with starting_after.
func listTransfers(s *Server, c *call) (any, *apiError) {
	return listMoney(s, c, "transfer", "/v1/transfers", s.st.Transfers, s.st.transfers,
		func(t *Transfer) (string, int64) { return t.ID, t.Created },
		map[string]func(*Transfer) string{
			"destination":    func(t *Transfer) string { return t.Destination },
			"transfer_group": func(t *Transfer) string { return t.TransferGroup },
		})
}

// listPayouts serves GET /v1/payouts: newest first, filtered by status and
// created, paginated with starting_after.
func listPayouts(s *Server, c *call) (any, *apiError) {
	return listMoney(s, c, "payout", "/v1/payouts", s.st.Payouts, s.st.payouts,
		func(p *Payout) (string, int64) { return p.ID, p.Created },
		map[string]func(*Payout) string{
			"status": func(p *Payout) string { return p.Status },
		})
}

// listMoney is a list endpoint over objects kept in creation order: the
// created filter, equality filters on the named fields, limit, and
// starting_after (a position in creation order, so a cursor the filters
// leave out still marks where the page starts).
func listMoney[T any](s *Server, c *call, kind, url string, objs []*T, index map[string]*T,
	ident func(*T) (string, int64), fields map[string]func(*T) string) (any, *apiError) {
	f := c.form
	allowed := []string{"created", "limit", "starting_after"}
	for name := range fields {
		allowed = append(allowed, name)
	}
	if aerr := allow(f, allowed...); aerr != nil {
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
	want := map[string]string{}
	for name := range fields {
		v, aerr := optional(f, name)
		if aerr != nil {
			return nil, aerr
		}
		if v != "" {
			want[name] = v
		}
	}
	after, aerr := optional(f, "starting_after")
	if aerr != nil {
		return nil, aerr
	}
	hi := len(objs)
	if after != "" {
		if _, ok := lookup(s.st, index, c.scope, after); !ok {
			return nil, errNoSuch(http.StatusBadRequest, kind, "starting_after", after)
		}
		for i, o := range objs {
			if id, _ := ident(o); id == after {
				hi = i
			}
		}
	}
	all := []*T{}
	for i := hi - 1; i >= 0; i-- {
		o := objs[i]
		id, at := ident(o)
		if s.st.Owners[id] != c.scope || !created.contains(at) {
			continue
		}
		match := true
		for name, v := range want {
			match = match && fields[name](o) == v
		}
		if match {
			all = append(all, o)
		}
	}
	more := len(all) > limit
	if more {
		all = all[:limit]
	}
	return listObject{Object: "list", Data: all, HasMore: more, URL: url}, nil
}
