package stripesim

// Flow is money that moved, per lower-case currency, in minor units.
//
// Captured is the amount_captured of every succeeded charge: only captured
// money, so an authorization that was never captured, or was released or
// expired, counts nothing, and a partial capture counts the captured part.
// Charges created by invoices that collected themselves count like any
// other. Transferred is every transfer to a connected account and PaidOut
// every payout, from the moment they are created. Refunded is every refund,
// reported separately and not subtracted from anything: money that moved
// and came back still moved.
//
// Total is Captured + Transferred + PaidOut.
type Flow struct {
	Captured    map[string]int64 `json:"captured"`
	Transferred map[string]int64 `json:"transferred"`
	PaidOut     map[string]int64 `json:"paid_out"`
	Refunded    map[string]int64 `json:"refunded"`
	Total       map[string]int64 `json:"total"`
}

// MoneyMoved is the ground truth of what moved: the Flow of every connected
// account the objects were created under (the Stripe-Account or
// Stripe-Context header, "" for the platform itself) and of all of them
// together. It is what a spend cap must have counted: spend recorded ≥ Total.
type MoneyMoved struct {
	Total    Flow            `json:"total"`
	Accounts map[string]Flow `json:"accounts"`
}

func newFlow() Flow {
	return Flow{Captured: map[string]int64{}, Transferred: map[string]int64{}, PaidOut: map[string]int64{},
		Refunded: map[string]int64{}, Total: map[string]int64{}}
}

// Moved returns what moved, after applying what has fallen due on the
// simulator clock (expired authorizations, invoices collecting themselves).
func (s *Server) Moved() MoneyMoved {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tickLocked()
	m := MoneyMoved{Total: newFlow(), Accounts: map[string]Flow{}}
	add := func(account string, kind func(Flow) map[string]int64, currency string, amount int64, total bool) {
		f, ok := m.Accounts[account]
		if !ok {
			f = newFlow()
			m.Accounts[account] = f
		}
		for _, fl := range []Flow{f, m.Total} {
			kind(fl)[currency] += amount
			if total {
				fl.Total[currency] += amount
			}
		}
	}
	for _, ch := range s.st.Charges {
		if ch.Status == "succeeded" && ch.Captured {
			add(ch.Account, func(f Flow) map[string]int64 { return f.Captured }, ch.Currency, ch.AmountCaptured, true)
		}
	}
	for _, tr := range s.st.Transfers {
		add(tr.Account, func(f Flow) map[string]int64 { return f.Transferred }, tr.Currency, tr.Amount, true)
	}
	for _, po := range s.st.Payouts {
		add(po.Account, func(f Flow) map[string]int64 { return f.PaidOut }, po.Currency, po.Amount, true)
	}
	for _, re := range s.st.Refunds {
		add(re.Account, func(f Flow) map[string]int64 { return f.Refunded }, re.Currency, re.Amount, false)
	}
	// What the objects forgotten under Options.MaxObjects moved (bound.go).
	for account, f := range s.st.Retired {
		if _, ok := m.Accounts[account]; !ok {
			m.Accounts[account] = newFlow()
		}
		for _, k := range []func(Flow) map[string]int64{
			func(f Flow) map[string]int64 { return f.Captured },
			func(f Flow) map[string]int64 { return f.Transferred },
			func(f Flow) map[string]int64 { return f.PaidOut },
			func(f Flow) map[string]int64 { return f.Refunded },
		} {
			for currency, amount := range k(f) {
				add(account, k, currency, amount, false)
			}
		}
		for currency, amount := range f.Total {
			for _, fl := range []Flow{m.Accounts[account], m.Total} {
				fl.Total[currency] += amount
			}
		}
	}
	return m
}
