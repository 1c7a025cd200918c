package http

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

// lockMargin is how much longer than the upstream timeout an object stays
// locked for the request holding it, so the lock outlives the request's
// forward and settlement unless the replica died.
const lockMargin = 30 * time.Second

// holdObject runs the request path's reserve step for a request on an
// existing money object of a Holder: it locks the object against every
// other write through keybrake, on every replica, and makes sure the key
// holds the most the object can move once the request has run. A live
// hold made by an earlier request is raised by the difference when the
// request raises the amount (RaiseHold, under every cap); with nothing
// held, the request is priced (by lookup) and reserved like a new one and
// becomes the object's hold. A cancel reserves nothing. A request that
// makes no reservation counts in the velocity limits naming it
// (countHeld). The caller unlocks.
// It writes the refusal and returns false when the request must not be
// forwarded.
func (p *proxy) holdObject(w http.ResponseWriter, r *http.Request, c *call, h Holder, object string, cancel bool) bool {
	s := p.s
	now := s.Now()
	hold, err := s.Store.LockObject(r.Context(), keybrake.LockArgs{
		KeyID: c.key.ID, ObjectID: object, Owner: c.requestID,
		Now: now, Until: now.Add(s.UpstreamTimeout + lockMargin),
	})
	if keybrake.ErrorCode(err) == keybrake.ECONFLICT {
		p.lockTimeout(w, r, c, object)
		return false
	} else if err != nil {
		p.deny(w, r, c, c.storeError(err), nil)
		return false
	}
	c.lock = object
	if cancel {
		if hold != nil && hold.Live() {
			c.rsv, c.held = hold, true
			return p.countHeld(w, r, c, hold.Operation)
		}
		return p.countHeld(w, r, c, "")
	}
	if hold == nil || !hold.Live() {
		c.raises = true // from nothing held to the whole object
		price := func() (VendorCost, error) { return h.Target(r.Context(), c.key, c.req, nil) }
		if !p.reserve(w, r, c, price) {
			return false
		}
		if !c.replay && c.rsv != nil {
			p.link(r.Context(), c, object)
		}
		return true
	}
	if !p.countHeld(w, r, c, hold.Operation) {
		return false
	}
	held := VendorCost{Amount: hold.Amount, Currency: hold.Currency, Micros: hold.Micros}
	target, err := h.Target(r.Context(), c.key, c.req, &held)
	if err != nil {
		p.deny(w, r, c, err, nil)
		return false
	}
	c.cost, c.priced = target, true
	c.rsv, c.held = hold, true
	if target.Micros <= hold.Micros {
		// Nothing to raise; an operation the key's approval policy names
		// still waits for a person (its amount was approved, or was below
		// the threshold, when the hold was made).
		if approvalRequires(c.key.Approval, c.req.Label, 0) == "" {
			return true
		}
		approval, ok := p.approve(w, r, c)
		if ok && p.refuseExpiredRetry(w, r, c, approval, "") { // a capture refused before acting (TestAttackApproval_UsedCaptureApprovalOutlivesItsTTL)
			return false
		}
		if ok {
			p.useApproval(r, approval, hold)
		}
		return ok
	}
	c.raises = true
	approval, ok := p.approve(w, r, c) // approval.go: raising past the threshold, or what the creation needs approved, waits too
	if !ok {
		return false
	}
	res, err := s.Store.RaiseHold(r.Context(), keybrake.RaiseArgs{ID: hold.ID, Amount: target.Amount, Currency: target.Currency, Micros: target.Micros, Now: now})
	if err != nil {
		p.deny(w, r, c, c.storeError(err), nil)
		return false
	}
	if res.Guard != nil { // the breaker's spend-rate rule, which the raise tripped
		p.guardRefused(w, r, c, res.Guard)
		return false
	}
	if res.OverCap != nil {
		if res.OverCap.Window != keybrake.WindowPerRequest { // which bounds the whole payment
			res.OverCap.Requested = target.Micros - hold.Micros
		}
		p.overCap(w, r, c, res.OverCap)
		return false
	}
	c.rsv = res.Reservation
	p.useApproval(r, approval, c.rsv)
	return true
}

// unlock releases the object the request locked, if any.
func (p *proxy) unlock(c *call) {
	if c.lock == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.s.Store.UnlockObject(ctx, c.key.ID, c.lock, c.requestID); err != nil {
		p.s.logger().Warn("unlock failed; the lock expires by itself", "object", c.lock, "err", err)
	}
}

// link records that the request's reservation holds object, until the hold
// sweeper ends it.
func (p *proxy) link(ctx context.Context, c *call, object string) {
	p.s.link(context.WithoutCancel(ctx), c.rsv, object)
}

// link records that rsv holds its key's object until HoldTTL from now. A
// failure is logged: the reservation stays counted in full either way, and
// a later request on the object reserves anew (counting twice, never less).
func (s *Server) link(ctx context.Context, rsv *keybrake.Reservation, object string) {
	if object == "" {
		return
	}
	err := s.Store.LinkHold(ctx, rsv.KeyID, object, rsv.ID, s.Now().Add(s.HoldTTL))
	if err != nil && keybrake.ErrorCode(err) != keybrake.ECONFLICT {
		s.logger().Warn("link hold failed", "reservation", rsv.ID, "object", object, "err", err)
	}
}

// lockTimeout refuses a request whose object another request is writing
// through keybrake, as Stripe itself answers concurrent writes to one
// object (429 lock_timeout, which Stripe's SDKs retry on their own).
func (p *proxy) lockTimeout(w http.ResponseWriter, r *http.Request, c *call, object string) {
	msg := fmt.Sprintf("This object (%s) cannot be accessed right now because another API request through keybrake is modifying it. Retry later. Nothing was sent to %s.", object, c.vendorTitle())
	p.s.metrics.decision(opName(c), "lock_timeout")
	p.audit(r, c, keybrake.DecisionDeny, msg, 0, "")
	c.v.WriteError(w, r, &refusal{err: &keybrake.Error{Code: keybrake.EOVERCAP, Message: msg}, status: http.StatusTooManyRequests, code: "lock_timeout", retry: "true"})
}

// settleHold applies an upstream answer to the hold of the object the
// request acted on. Only a 2xx changes it: an error answer leaves the
// object as it was (a declined confirmation leaves the intent confirmable),
// and a lost answer leaves the hold counted in full for the sweeper.
func (p *proxy) settleHold(ctx context.Context, c *call, status int, out VendorOutcome) string {
	if status < 200 || status >= 300 || !out.Final {
		return fmt.Sprintf("hold %s unchanged: upstream answered %d", c.rsv.ID, status)
	}
	args, reason := p.s.settleArgs(c.rsv, status, out)
	updated, err := p.s.settleOutcome(context.WithoutCancel(ctx), c.rsv, args)
	if err != nil {
		p.s.logger().Error("settling a hold failed; it stays counted", "reservation", c.rsv.ID, "err", err)
		return reason + " (settle failed: " + keybrake.ErrorMessage(err) + ")"
	}
	c.rsv = updated
	return reason
}

// outcomeArgs turns what a 2xx answer's Stripe object says about its money
// into the settlement of rsv (settleArgs), for the resolver and the hold
// sweeper.
func (s *Server) outcomeArgs(rsv *keybrake.Reservation, status int, out stripe.Outcome) (keybrake.SettleArgs, string) {
	return s.settleArgs(rsv, status, stripeOutcome(s.Rates, out))
}

// settleArgs turns a final outcome into the settlement of rsv: settled at
// what moved, held at what can still move, or released. An answer without
// an amount leaves a hold held. An amount above what was reserved raises
// an alarm: it is logged, counted in keybrake_hold_exceeded_total and
// named in the reason, and it is counted in full, never silently settled
// lower.
func (s *Server) settleArgs(rsv *keybrake.Reservation, status int, out VendorOutcome) (keybrake.SettleArgs, string) {
	args := keybrake.SettleArgs{ID: rsv.ID, State: out.State, ObjectID: out.ObjectID, UpstreamStatus: status, Now: s.Now()}
	reason := out.Reason
	if out.State == keybrake.StateReleased {
		args.Amount, args.Currency = out.Amount, out.Currency
		return args, reason
	}
	m := out.Micros
	if out.AtReserved {
		m = rsv.Micros
	}
	args.SettledMicros = m
	switch {
	case out.Currency != "":
		args.Amount, args.Currency = out.Amount, out.Currency
	case out.AtReserved:
		args.Amount, args.Currency = rsv.Amount, rsv.Currency
		if out.State == keybrake.StateSettled && rsv.State == keybrake.StateHeld {
			args.State, reason = keybrake.StateHeld, "held; the answer carried no amount"
		}
	default:
		args.Amount, args.Currency = usdCents(m), "usd"
	}
	if m > rsv.Micros {
		s.metrics.holdExceeded(rsv.Operation)
		s.logger().Error("ALARM: upstream amount above what keybrake reserved; counted in full",
			"reservation", rsv.ID, "key", rsv.KeyID, "object", out.ObjectID, "reserved_usd", rsv.Micros.String(), "upstream_usd", m.String())
		reason = fmt.Sprintf("ALARM: upstream answered $%s, above the $%s reserved; counted in full. %s", m, rsv.Micros, reason)
	}
	return args, reason
}

// settleFor settles rsv as args says, after the answer where it can
// (settleAnswered); a Holder's reservation that becomes held is linked to
// its object, another vendor's held reservation (a price not known yet)
// is not an object keybrake sweeps.
func (s *Server) settleFor(ctx context.Context, v Vendor, rsv *keybrake.Reservation, args keybrake.SettleArgs) (*keybrake.Reservation, error) {
	if _, ok := v.(Holder); !ok && args.State == keybrake.StateHeld {
		return s.Store.Settle(ctx, args)
	}
	return s.settleAnswered(ctx, rsv, args)
}

// settleOutcome settles rsv as args says and, when the object can still
// move money, links the hold to it.
func (s *Server) settleOutcome(ctx context.Context, rsv *keybrake.Reservation, args keybrake.SettleArgs) (*keybrake.Reservation, error) {
	updated, err := s.Store.Settle(ctx, args)
	if err != nil {
		return nil, err
	}
	if args.State == keybrake.StateHeld && rsv.State != keybrake.StateHeld {
		s.link(ctx, updated, args.ObjectID)
	}
	return updated, nil
}

// formatMinor writes an amount in minor units with its currency code.
func formatMinor(amount int64, currency string) string {
	return stripe.FormatAmount(amount, currency)
}
