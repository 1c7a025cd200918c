package sqlite

import (
	"context"
	"time"

	"github.com/keybrake/keybrake"
)

// laterTimeout bounds one settlement queued by SettleLater: past it the
// reservation is left reserved, counted in full, for the resolver.
const laterTimeout = 30 * time.Second

// laterDrain bounds how long Close waits for queued settlements.
const laterDrain = 10 * time.Second

var _ keybrake.LaterSettler = (*Store)(nil)

// SettleLater runs Settle in the background and returns at once: the
// settlement joins the writer's next group commit (batch.go) instead of
// holding the request until it. Until it commits the reservation stays
// reserved and counts in full; if the process dies first, the resolver
// settles it once stale. done, if not nil, gets the outcome. Returns
// EINVALID for another state or a negative amount.
func (s *Store) SettleLater(ctx context.Context, args keybrake.SettleArgs, done func(*keybrake.Reservation, error)) error {
	if args.State != keybrake.StateSettled {
		return keybrake.ErrorParam("state", "Only a settlement to %q can be deferred, not %q.", keybrake.StateSettled, args.State)
	}
	if args.SettledMicros < 0 {
		return keybrake.ErrorParam("settled_usd", "A settled amount cannot be negative.")
	}
	s.later.Add()
	go func() {
		defer s.later.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), laterTimeout)
		defer cancel()
		r, err := s.Settle(ctx, args)
		if done != nil {
			done(r, err)
		}
	}()
	return nil
}

// FlushSettlements waits until no settlement queued by SettleLater is left.
func (s *Store) FlushSettlements(ctx context.Context) error {
	return s.later.Wait(ctx)
}

// drainLater gives the queued settlements up to laterDrain to commit.
func (s *Store) drainLater() {
	ctx, cancel := context.WithTimeout(context.Background(), laterDrain)
	defer cancel()
	_ = s.later.Wait(ctx)
}
