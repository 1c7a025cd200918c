package postgres

import (
	"context"
	"time"

	"github.com/keybrake/keybrake"
)

// laterDrain bounds how long Close waits for queued settlements.
const laterDrain = 10 * time.Second

var _ keybrake.LaterSettler = (*Store)(nil)

// SettleLater queues a settlement to settled in this process's settlement queue (settle_batch.go): the batch that takes it commits it with the others queued meanwhile, in one keybrake_settle_batch statement, so the request path pays one commit (its reservation's) instead of two. Such a batch waits up to settleLinger for more to join it. See inflight.Settlements.
func (s *Store) SettleLater(ctx context.Context, args keybrake.SettleArgs, done func(*keybrake.Reservation, error)) error {
	return s.later.Settle(ctx, args, s.settleLater, done)
}

// FlushSettlements waits until no settlement queued by SettleLater is left.
func (s *Store) FlushSettlements(ctx context.Context) error { return s.later.Wait(ctx) }
