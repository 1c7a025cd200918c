package http

import (
	"context"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
)

// resolveVendor settles a reservation of another vendor than Stripe that
// the resolver leased (uncertain, or reserved past StaleAfter) through
// Vendor.Resolve. What the vendor cannot tell yet stays counted.
func (s *Server) resolveVendor(ctx context.Context, p *vendorRoute, rsv *keybrake.Reservation) (bool, error) {
	if p == nil {
		return false, s.leaveUncertain(ctx, rsv, 0, "resolver: the vendor of "+rsv.Request.Path+" is not configured on this server")
	}
	out, err := p.Resolve(ctx, rsv, s.Transport)
	if err != nil {
		return false, s.leaveUncertain(ctx, rsv, 0, "resolver: "+err.Error())
	}
	if !out.Final {
		return false, s.leaveUncertain(ctx, rsv, 0, "resolver: "+out.Reason)
	}
	return s.finishVendor(ctx, rsv, out)
}

// settleVendorPrices settles held Twilio messages and calls whose price
// Twilio has reported since: the hold was the reserved amount, the
// settlement is the price, and the difference is released. A reservation
// Twilio has not priced yet stays held, counted in full.
func (s *Server) settleVendorPrices(ctx context.Context) {
	p := s.vendors[keybrake.VendorTwilio]
	if p == nil || p.upstream == nil {
		return
	}
	held, err := s.Store.FindReservations(ctx, keybrake.ReservationFilter{State: keybrake.StateHeld})
	if err != nil {
		s.logger().Warn("listing held reservations failed; will retry", "err", err)
		return
	}
	for _, rsv := range held {
		if !strings.HasPrefix(rsv.Request.Path, "/twilio/") || rsv.ObjectID == "" {
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
