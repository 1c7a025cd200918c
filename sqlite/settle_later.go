package sqlite

import (
	"context"
	"time"

	"github.com/keybrake/keybrake"
)

// laterDrain bounds how long Close waits for queued settlements.
const laterDrain = 10 * time.Second

var _ keybrake.LaterSettler = (*Store)(nil)

// SettleLater queues a settlement to settled in the background: the settlement joins the writer's next group commit (batch.go) instead of holding the request until it. See inflight.Settlements.
func (s *Store) SettleLater(ctx context.Context, args keybrake.SettleArgs, done func(*keybrake.Reservation, error)) error {
	return s.later.Settle(ctx, args, s.Settle, done)
}

// FlushSettlements waits until no settlement queued by SettleLater is left.
func (s *Store) FlushSettlements(ctx context.Context) error { return s.later.Wait(ctx) }
