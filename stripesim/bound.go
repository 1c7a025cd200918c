package stripesim

import "sort"

// A simulator used as a long-running upstream (serve's built-in one, a
// demo) would keep every object it ever created. With Options.MaxObjects it
// keeps a bounded window instead: past the bound, the oldest finished
// objects of the high-volume kinds (charges, payment intents, refunds,
// transfers, payouts) and the oldest saved idempotent responses are
// forgotten. What they moved is kept as running sums (state.Retired), so
// Moved stays exact. Objects that can still change are never forgotten: an
// uncaptured authorization, a payment intent not yet succeeded or canceled.
//
// A forgotten object is gone as if deleted: retrieving, refunding or listing
// it no longer finds it, GroundTruth no longer returns it, and a request
// retried under a forgotten Idempotency-Key runs anew. Tests that need every
// object keep the default, MaxObjects 0.

// trimSlack is how far past the bound a kind may grow before it is trimmed
// back to the bound, so that trimming costs O(1) per created object.
func trimSlack(max int) int { return max/8 + 1 }

// trimLocked forgets the oldest finished objects and saved responses beyond
// opts.MaxObjects. The caller holds s.mu.
func (s *Server) trimLocked() {
	max := s.opts.MaxObjects
	if max <= 0 {
		return
	}
	st := s.st
	over := func(n int) bool { return n > max+trimSlack(max) }
	if over(len(st.Charges)) {
		st.Charges = trimOldest(st.Charges, max, func(ch *Charge) bool { return !authorized(ch) }, func(ch *Charge) {
			if ch.Status == "succeeded" && ch.Captured {
				st.retire(ch.Account, func(f Flow) map[string]int64 { return f.Captured }, ch.Currency, ch.AmountCaptured, true)
			}
			delete(st.charges, ch.ID)
			delete(st.uncaptured, ch.ID)
			delete(st.Owners, ch.ID)
		})
	}
	if over(len(st.PaymentIntents)) {
		st.PaymentIntents = trimOldest(st.PaymentIntents, max, func(pi *PaymentIntent) bool {
			return pi.Status == piSucceeded || pi.Status == piCanceled
		}, func(pi *PaymentIntent) {
			delete(st.paymentIntents, pi.ID)
			delete(st.Owners, pi.ID)
		})
	}
	if over(len(st.Refunds)) {
		st.Refunds = trimOldest(st.Refunds, max, func(*Refund) bool { return true }, func(re *Refund) {
			st.retire(re.Account, func(f Flow) map[string]int64 { return f.Refunded }, re.Currency, re.Amount, false)
			delete(st.refunds, re.ID)
			delete(st.Owners, re.ID)
		})
	}
	if over(len(st.Transfers)) {
		st.Transfers = trimOldest(st.Transfers, max, func(*Transfer) bool { return true }, func(tr *Transfer) {
			st.retire(tr.Account, func(f Flow) map[string]int64 { return f.Transferred }, tr.Currency, tr.Amount, true)
			delete(st.transfers, tr.ID)
			delete(st.Owners, tr.ID)
		})
	}
	if over(len(st.Payouts)) {
		st.Payouts = trimOldest(st.Payouts, max, func(*Payout) bool { return true }, func(po *Payout) {
			st.retire(po.Account, func(f Flow) map[string]int64 { return f.PaidOut }, po.Currency, po.Amount, true)
			delete(st.payouts, po.ID)
			delete(st.Owners, po.ID)
		})
	}
	if over(len(st.Idempotency)) {
		keys := make([]string, 0, len(st.Idempotency))
		for k := range st.Idempotency {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return st.Idempotency[keys[i]].Created < st.Idempotency[keys[j]].Created })
		for _, k := range keys[:len(keys)-max] {
			delete(st.Idempotency, k)
		}
	}
}

// trimOldest forgets the oldest items for which finished holds, calling
// forget on each, until at most max are left or none is finished; the rest
// keep their order.
func trimOldest[T any](items []*T, max int, finished func(*T) bool, forget func(*T)) []*T {
	drop := len(items) - max
	kept := items[:0]
	for _, it := range items {
		if drop > 0 && finished(it) {
			forget(it)
			drop--
			continue
		}
		kept = append(kept, it)
	}
	clear(items[len(kept):]) // let the forgotten objects be collected
	return kept
}

// retire adds a forgotten object's money to the running sums Moved adds to
// the objects still kept.
func (st *state) retire(account string, kind func(Flow) map[string]int64, currency string, amount int64, total bool) {
	if st.Retired == nil {
		st.Retired = map[string]Flow{}
	}
	f, ok := st.Retired[account]
	if !ok {
		f = newFlow()
		st.Retired[account] = f
	}
	kind(f)[currency] += amount
	if total {
		f.Total[currency] += amount
	}
}
