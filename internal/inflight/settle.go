package inflight

import (
	"context"
	"time"

	"github.com/keybrake/keybrake"
)

// Settlements runs a store's deferred settlements (keybrake.LaterSettler)
// in the background and counts them, so that the store's Close can wait for
// them. The zero value is ready to use.
type Settlements struct{ g Group }

// settleTimeout bounds one deferred settlement: past it the reservation is
// left reserved, counted in full, for the resolver.
const settleTimeout = 30 * time.Second

// Settle runs settle(args) in the background and returns at once. Until it
// commits the reservation stays reserved and counts in full; if the process
// dies first, the resolver settles it once stale. done, if not nil, gets the
// outcome. Returns EINVALID for another state than settled or a negative
// amount.
func (l *Settlements) Settle(ctx context.Context, args keybrake.SettleArgs, settle func(context.Context, keybrake.SettleArgs) (*keybrake.Reservation, error), done func(*keybrake.Reservation, error)) error {
	if args.State != keybrake.StateSettled {
		return keybrake.ErrorParam("state", "Only a settlement to %q can be deferred, not %q.", keybrake.StateSettled, args.State)
	}
	if args.SettledMicros < 0 {
		return keybrake.ErrorParam("settled_usd", "A settled amount cannot be negative (%s).", args.SettledMicros)
	}
	l.g.Add()
	go func() {
		defer l.g.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		defer cancel()
		r, err := settle(ctx, args)
		if done != nil {
			done(r, err)
		}
	}()
	return nil
}

// Wait waits until no settlement is left running, or ctx ends.
func (l *Settlements) Wait(ctx context.Context) error { return l.g.Wait(ctx) }

// Drain gives the running settlements up to d to commit, for Close.
func (l *Settlements) Drain(d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_ = l.g.Wait(ctx)
}
