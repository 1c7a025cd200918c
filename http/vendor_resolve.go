package http

import (
	"context"
	"time"

	"github.com/keybrake/keybrake"
)

// settleVendorPrices settles held Twilio messages and calls whose price
// Twilio has reported since: the hold was the reserved amount, the
// settlement is the price, and the difference is released. A reservation
// Twilio has not priced yet stays held, counted in full, and is looked at
// again heldRecheck later. Each pass leases at most heldPerPass of the
// ones that are due (Store.LeaseHeld), never every held reservation, and
// no two replicas fetch the same one.
func (s *Server) settleVendorPrices(ctx context.Context) {
	p := s.vendors[keybrake.VendorTwilio]
	if p == nil || p.upstream == nil {
		return
	}
	now := s.Now()
	held, err := s.Store.LeaseHeld(ctx, keybrake.LeaseHeldArgs{
		Operations: twilioPricedOperations, Owner: s.ID, Now: now, Until: now.Add(heldRecheck), Limit: heldPerPass,
	})
	if err != nil {
		s.logger().Warn("leasing held reservations failed; will retry", "err", err)
		return
	}
	for _, rsv := range held {
		if rsv.ObjectID == "" {
			continue
		}
		out, err := p.Resolve(ctx, rsv, s.Transport)
		if err != nil || !out.Final {
			continue
		}
		if _, err := s.finishVendor(ctx, rsv, out); err != nil && keybrake.ErrorCode(err) != keybrake.ECONFLICT {
			s.logger().Warn("settling a Twilio price failed; will retry", "reservation", rsv.ID, "err", err)
		}
	}
}

// The held reservations the price pass reads, how many a pass, and how
// long one Twilio has not priced yet waits before it is fetched again.
var twilioPricedOperations = []string{keybrake.VendorTwilio + ".messages.create", keybrake.VendorTwilio + ".calls.create"}

const (
	heldPerPass = 100
	heldRecheck = 30 * time.Second
)

// finishVendor applies a final outcome and audits it as a resolution.
func (s *Server) finishVendor(ctx context.Context, rsv *keybrake.Reservation, out VendorOutcome) (bool, error) {
	if _, err := s.settleVendor(ctx, rsv, out, 0); err != nil {
		return false, err
	}
	s.metrics.resolved(out.State)
	m := out.Micros
	if out.AtReserved {
		m = rsv.Micros
	}
	s.audit.add(&keybrake.Event{
		KeyID: rsv.KeyID, Time: s.Now().UTC().Truncate(time.Microsecond), Operation: rsv.Operation,
		Method: rsv.Request.Method, Path: rsv.Request.Path, Amount: usdCents(m), Currency: "usd", Micros: m,
		Decision: keybrake.DecisionResolve, Reason: "resolver: " + out.Reason,
		ObjectID: out.ObjectID, IdempotencyKey: rsv.IdempotencyKey, ReservationID: rsv.ID,
	})
	return out.State == keybrake.StateSettled || out.State == keybrake.StateReleased, nil
}
