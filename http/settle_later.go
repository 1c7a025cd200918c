package http

import (
	"context"

	"github.com/keybrake/keybrake"
)

// settleAnswered settles the reservation of a request whose upstream answer
// is in hand. With SettleAfterAnswer, a success that counts no more than
// was reserved is queued (keybrake.LaterSettler) and the client is answered
// at once; the returned reservation is what the store will hold once the
// settlement commits. Everything else settles before the answer, as
// settleOutcome does:
//
//   - released and uncertain: a retry under the same Idempotency-Key, on
//     any replica, must see them at once (a released request runs anew at
//     Stripe and is reserved anew, Rearm);
//   - held, and a held reservation settling: the hold is linked to its
//     object in the same step;
//   - a settled amount above the reservation: the counters must rise before
//     anyone else reserves against them.
//
// Deferring the rest is safe because nothing counts less meanwhile: the
// reservation stays reserved, counted in full, until its settlement
// commits, and if this process dies first the resolver leases it once stale
// and settles it by idempotent replay.
func (s *Server) settleAnswered(ctx context.Context, rsv *keybrake.Reservation, args keybrake.SettleArgs) (*keybrake.Reservation, error) {
	ls, ok := s.Store.(keybrake.LaterSettler)
	if !ok || !s.SettleAfterAnswer || args.State != keybrake.StateSettled ||
		rsv.State != keybrake.StateReserved || args.SettledMicros > rsv.Micros {
		return s.settleOutcome(ctx, rsv, args)
	}
	s.answered.Store(args.ID, true)
	err := ls.SettleLater(ctx, args, func(_ *keybrake.Reservation, err error) {
		s.answered.Delete(args.ID)
		if err != nil {
			// Still reserved and counted in full (or settled by the
			// resolver first): the resolver finishes it.
			s.logger().Warn("settlement after the answer failed; left for the resolver", "reservation", args.ID, "err", err)
		}
	})
	if err != nil {
		s.answered.Delete(args.ID)
		return s.settleOutcome(ctx, rsv, args)
	}
	return projectSettled(rsv, args), nil
}

// projectSettled returns rsv as Settle(args) to settled leaves it.
func projectSettled(rsv *keybrake.Reservation, args keybrake.SettleArgs) *keybrake.Reservation {
	r := *rsv
	r.State, r.SettledMicros = keybrake.StateSettled, args.SettledMicros
	if args.Currency != "" {
		r.Amount, r.Currency = args.Amount, args.Currency
	}
	if args.ObjectID != "" {
		r.ObjectID = args.ObjectID
	}
	if args.UpstreamStatus != 0 {
		r.UpstreamStatus = args.UpstreamStatus
	}
	if !args.Now.IsZero() {
		r.UpdatedAt = args.Now
	}
	return &r
}
