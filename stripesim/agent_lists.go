package stripesim

import (
	"net/http"
	"sort"
)

// The reads agents start from (keybrake's MCP tools list_customers,
// list_payment_intents and retrieve_balance): the newest objects first, as
// far as a first page goes. Cursors are not taken; Stripe's other list
// filters are refused, like any unknown parameter.

// agentListRoute maps GET /v1/customers, /v1/payment_intents and
// /v1/balance.
func agentListRoute(method string, parts []string) (handler, bool) {
	if method != http.MethodGet || len(parts) != 1 {
		return nil, false
	}
	switch parts[0] {
	case "customers":
		return listCustomers, true
	case "payment_intents":
		return listPaymentIntents, true
	case "balance":
		return retrieveBalance, true
	}
	return nil, false
}

// listCustomers serves GET /v1/customers, optionally by email.
func listCustomers(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "email", "limit"); aerr != nil {
		return nil, aerr
	}
	limit, aerr := limitParam(f)
	if aerr != nil {
		return nil, aerr
	}
	email, aerr := optional(f, "email")
	if aerr != nil {
		return nil, aerr
	}
	all := []*Customer{}
	for i := len(s.st.Customers) - 1; i >= 0; i-- {
		cu := s.st.Customers[i]
		if s.st.Owners[cu.ID] == c.scope && (email == "" || cu.Email == email) {
			all = append(all, cu)
		}
	}
	more := len(all) > limit
	if more {
		all = all[:limit]
	}
	return listObject{Object: "list", Data: all, HasMore: more, URL: "/v1/customers"}, nil
}

// listPaymentIntents serves GET /v1/payment_intents, optionally of one
// customer.
func listPaymentIntents(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "customer", "limit"); aerr != nil {
		return nil, aerr
	}
	limit, aerr := limitParam(f)
	if aerr != nil {
		return nil, aerr
	}
	customer, aerr := optional(f, "customer")
	if aerr != nil {
		return nil, aerr
	}
	all := []*PaymentIntent{}
	for i := len(s.st.PaymentIntents) - 1; i >= 0; i-- {
		pi := s.st.PaymentIntents[i]
		if s.st.Owners[pi.ID] == c.scope && (customer == "" || pi.Customer == customer) {
			all = append(all, pi)
		}
	}
	more := len(all) > limit
	if more {
		all = all[:limit]
	}
	return listObject{Object: "list", Data: all, HasMore: more, URL: "/v1/payment_intents"}, nil
}

// balanceAmount is one currency of a balance.
type balanceAmount struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// balance is Stripe's balance object, reduced to what the simulator knows.
type balance struct {
	Object    string          `json:"object"`
	Available []balanceAmount `json:"available"`
	Pending   []balanceAmount `json:"pending"`
	Livemode  bool            `json:"livemode"`
}

// retrieveBalance serves GET /v1/balance: per currency, what the scope's
// captured charges brought in less what was refunded, less what was
// transferred or paid out. Everything is available at once; nothing pends.
func retrieveBalance(s *Server, c *call) (any, *apiError) {
	if aerr := allow(c.form); aerr != nil {
		return nil, aerr
	}
	sum := map[string]int64{"usd": 0}
	for _, ch := range s.st.Charges {
		if s.st.Owners[ch.ID] == c.scope && ch.Captured {
			sum[ch.Currency] += ch.AmountCaptured - ch.AmountRefunded
		}
	}
	for _, t := range s.st.Transfers {
		if s.st.Owners[t.ID] == c.scope {
			sum[t.Currency] -= t.Amount
		}
	}
	for _, p := range s.st.Payouts {
		if s.st.Owners[p.ID] == c.scope {
			sum[p.Currency] -= p.Amount
		}
	}
	b := balance{Object: "balance", Available: []balanceAmount{}, Pending: []balanceAmount{}}
	for cur, amt := range sum {
		b.Available = append(b.Available, balanceAmount{Amount: amt, Currency: cur})
	}
	sort.Slice(b.Available, func(i, j int) bool { return b.Available[i].Currency < b.Available[j].Currency })
	return b, nil
}
