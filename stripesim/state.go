package stripesim

import (
	"math/rand/v2"
	"time"
)

// state is everything the simulator remembers: the objects, who owns them,
// the saved idempotent responses and the clock offset. It is guarded by
// Server.mu and is also the persisted form.
type state struct {
	OffsetNanos    int64            `json:"offset_nanos"`
	Customers      []*Customer      `json:"customers"`
	Charges        []*Charge        `json:"charges"`
	PaymentIntents []*PaymentIntent `json:"payment_intents"`
	Refunds        []*Refund        `json:"refunds"`
	Transfers      []*Transfer      `json:"transfers"`
	Payouts        []*Payout        `json:"payouts"`
	InvoiceItems   []*InvoiceItem   `json:"invoice_items"`
	Invoices       []*Invoice       `json:"invoices"`
	Products       []*Product       `json:"products"`
	Prices         []*Price         `json:"prices"`
	PaymentLinks   []*PaymentLink   `json:"payment_links"`
	// LinkLines are the lines of each payment link, which its JSON leaves out.
	LinkLines   map[string][]PaymentLinkLine `json:"payment_link_lines"`
	Owners      map[string]string            `json:"owners"` // object id → scope
	Idempotency map[string]*idemRecord       `json:"idempotency"`
	// Retired is what the objects forgotten under Options.MaxObjects
	// moved, per account (bound.go): Moved adds it to the objects kept.
	Retired map[string]Flow `json:"retired,omitempty"`

	// Indexes rebuilt from the slices; not persisted.
	customers      map[string]*Customer
	charges        map[string]*Charge
	paymentIntents map[string]*PaymentIntent
	refunds        map[string]*Refund
	transfers      map[string]*Transfer
	payouts        map[string]*Payout
	invoiceItems   map[string]*InvoiceItem
	invoices       map[string]*Invoice // without deleted drafts
	uncaptured     map[string]*Charge  // authorizations that may still expire
	products       map[string]*Product
	prices         map[string]*Price
	paymentLinks   map[string]*PaymentLink
}

func newState() *state {
	st := &state{Owners: map[string]string{}, Idempotency: map[string]*idemRecord{}}
	st.index()
	return st
}

// index rebuilds the id maps from the slices, after loading.
func (st *state) index() {
	if st.Owners == nil {
		st.Owners = map[string]string{}
	}
	if st.Idempotency == nil {
		st.Idempotency = map[string]*idemRecord{}
	}
	st.customers = indexBy(st.Customers, func(c *Customer) string { return c.ID })
	st.charges = indexBy(st.Charges, func(c *Charge) string { return c.ID })
	st.paymentIntents = indexBy(st.PaymentIntents, func(p *PaymentIntent) string { return p.ID })
	st.refunds = indexBy(st.Refunds, func(r *Refund) string { return r.ID })
	st.transfers = indexBy(st.Transfers, func(t *Transfer) string { return t.ID })
	st.payouts = indexBy(st.Payouts, func(p *Payout) string { return p.ID })
	st.invoiceItems = indexBy(st.InvoiceItems, func(it *InvoiceItem) string { return it.ID })
	st.invoices = map[string]*Invoice{}
	for _, in := range st.Invoices {
		if !in.Deleted {
			st.invoices[in.ID] = in
		}
	}
	st.products = indexBy(st.Products, func(p *Product) string { return p.ID })
	st.prices = indexBy(st.Prices, func(p *Price) string { return p.ID })
	st.paymentLinks = indexBy(st.PaymentLinks, func(l *PaymentLink) string { return l.ID })
	if st.LinkLines == nil {
		st.LinkLines = map[string][]PaymentLinkLine{}
	}
	for _, l := range st.PaymentLinks {
		l.Lines = st.LinkLines[l.ID]
	}
	st.uncaptured = map[string]*Charge{}
	for _, ch := range st.Charges {
		if authorized(ch) {
			st.uncaptured[ch.ID] = ch
		}
	}
}

func indexBy[T any](items []*T, id func(*T) string) map[string]*T {
	m := make(map[string]*T, len(items))
	for _, it := range items {
		m[id(it)] = it
	}
	return m
}

// lookup returns the object with id if it belongs to scope. Objects of other
// API keys or accounts do not exist for the caller, as on Stripe.
func lookup[T any](st *state, m map[string]*T, scope, id string) (*T, bool) {
	obj, ok := m[id]
	if !ok || st.Owners[id] != scope {
		return nil, false
	}
	return obj, true
}

const idAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// newID returns prefix_ followed by 24 random base-62 characters, the shape of
// Stripe's ids.
func newID(prefix string) string {
	b := make([]byte, 0, len(prefix)+25)
	b = append(b, prefix...)
	b = append(b, '_')
	for range 24 {
		b = append(b, idAlphabet[rand.IntN(len(idAlphabet))])
	}
	return string(b)
}

// now returns the simulator clock: the base clock plus the Advance offset.
// The caller holds s.mu.
func (s *Server) nowLocked() time.Time {
	return s.base().Add(time.Duration(s.st.OffsetNanos))
}
