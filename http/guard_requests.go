package http

import (
	"net/http"

	"github.com/keybrake/keybrake"
)

// countRequest is the request path's step for the key's velocity limits
// that count every request, reads included (VelocityLimit.Requests): the
// store decides and counts the request in a transaction of its own. A key
// without such limits pays nothing here: the check is in memory, on the
// cached key. It writes the refusal (a 429 with Retry-After, as for any
// velocity limit) and returns false when the request must not be
// forwarded; a store failure refuses too (fail closed).
func (p *proxy) countRequest(w http.ResponseWriter, r *http.Request, c *call) bool {
	if !c.key.Guards.CountsRequests() {
		return true
	}
	return p.count(w, r, c, keybrake.RequestArgs{})
}

// countHeld is countRequest for a request on a money object that makes no
// reservation (it acts on the object's hold, or cancels it): the velocity
// limits that count reservations and name its operation, but not the one
// that made the hold, count it when it arrives (keybrake.Guards.HeldLimits),
// so that a limit of one capture an hour limits captures of the
// authorizations the key holds too. holdOp is the operation that made the
// hold, "" for none.
func (p *proxy) countHeld(w http.ResponseWriter, r *http.Request, c *call, holdOp string) bool {
	if len(c.key.Guards.HeldLimits(c.req.Label, holdOp)) == 0 {
		return true
	}
	return p.count(w, r, c, keybrake.RequestArgs{Held: true, HoldOperation: holdOp})
}

// count has the store count c's request under args (its key, operation,
// customer and time filled in here) and writes the refusal when a limit,
// or the store, refuses it.
func (p *proxy) count(w http.ResponseWriter, r *http.Request, c *call, args keybrake.RequestArgs) bool {
	args.KeyID, args.Operation, args.Customer, args.Now = c.key.ID, c.req.Label, guardCustomer(c.req), p.s.Now()
	g, err := p.s.Store.CountRequest(r.Context(), args)
	if err != nil {
		p.deny(w, r, c, c.storeError(err), nil)
		return false
	}
	if g != nil {
		p.guardRefused(w, r, c, g)
		return false
	}
	return true
}
