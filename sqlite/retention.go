package sqlite

import (
	"context"
	"database/sql"

	"github.com/keybrake/keybrake"
)

var _ keybrake.RetentionService = (*Store)(nil)

// pruneLimit is a batch's size: args' limit, or the default.
func pruneLimit(limit int) int {
	if limit <= 0 {
		return keybrake.DefaultPruneBatch
	}
	return limit
}

// finalBefore is the instant before which a final reservation may go: the
// retention's cut, and never inside Stripe's idempotency window.
func finalBefore(args keybrake.PruneArgs) int64 {
	cut := args.Before
	if w := args.Now.Add(-keybrake.IdempotencyWindow); w.Before(cut) {
		cut = w
	}
	return cut.UnixMicro()
}

// PruneReservations deletes up to a batch of old settled or released
// reservations no holds row links to. The spend counters stay as they are
// (no delete trigger moves them); the repeat rule's fingerprints of the
// deleted reservations go (0026).
func (s *Store) PruneReservations(ctx context.Context, args keybrake.PruneArgs) (int64, error) {
	return s.pruneExec(ctx, "prune reservations", `DELETE FROM reservations WHERE id IN (
		SELECT r.id FROM reservations r
		WHERE r.state IN ('settled', 'released') AND r.updated_at < ?1 AND r.created_at < ?1
		AND NOT EXISTS (SELECT 1 FROM holds h WHERE h.reservation_id = r.id)
		LIMIT ?2)`, finalBefore(args), pruneLimit(args.Limit))
}

// PruneHolds deletes up to a batch of holds rows that lock and hold
// nothing any more.
func (s *Store) PruneHolds(ctx context.Context, args keybrake.PruneArgs) (int64, error) {
	before := args.Before.UnixMicro()
	return s.pruneExec(ctx, "prune holds", `DELETE FROM holds WHERE (key_id, object_id) IN (
		SELECT h.key_id, h.object_id FROM holds h LEFT JOIN reservations r ON r.id = h.reservation_id
		WHERE (h.lock_until IS NULL OR h.lock_until < ?1) AND (h.hold_until IS NULL OR h.hold_until < ?1)
		AND (r.id IS NULL OR (r.state IN ('settled', 'released') AND r.updated_at < ?1))
		LIMIT ?2)`, before, pruneLimit(args.Limit))
}

// PruneGuardCounters deletes up to a batch of expired guard counters.
func (s *Store) PruneGuardCounters(ctx context.Context, args keybrake.PruneArgs) (int64, error) {
	return s.pruneExec(ctx, "prune guard counters", `DELETE FROM guard_counters WHERE (key_id, scope, bucket, slot) IN (
		SELECT key_id, scope, bucket, slot FROM guard_counters WHERE expires < ?1 LIMIT ?2)`, args.Now.Unix(), pruneLimit(args.Limit))
}

// PruneSent deletes up to a batch of old records of sent objects, oldest
// first (sent_objects_created, 0032).
func (s *Store) PruneSent(ctx context.Context, args keybrake.PruneArgs) (int64, error) {
	return s.pruneExec(ctx, "prune sent objects", `DELETE FROM sent_objects WHERE (vendor, object_id, key_id) IN (
		SELECT vendor, object_id, key_id FROM sent_objects WHERE created_at < ?1 ORDER BY created_at LIMIT ?2)`,
		keybrake.SentCutoff(args).UnixMicro(), pruneLimit(args.Limit))
}

// CompactCounters deletes up to a batch of closed daily and monthly
// counters no open reservation counts in.
func (s *Store) CompactCounters(ctx context.Context, args keybrake.CompactArgs) (int64, error) {
	return s.pruneExec(ctx, "compact spend counters", `DELETE FROM spend_counters WHERE (key_id, period, bucket) IN (
		SELECT c.key_id, c.period, c.bucket FROM spend_counters c
		WHERE ((c.period = 'daily' AND c.bucket < ?1) OR (c.period = 'monthly' AND c.bucket < ?2))
		AND NOT EXISTS (SELECT 1 FROM reservations r
			WHERE r.key_id = c.key_id AND r.state IN ('reserved', 'held', 'uncertain')
			AND (CASE c.period WHEN 'daily' THEN r.day ELSE r.month END) = c.bucket)
		LIMIT ?3)`, args.DayBefore, args.MonthBefore, pruneLimit(args.Limit))
}

// PruneAlerts deletes up to a batch of old alerts whose deliveries are
// done, with the deliveries and their attempts.
func (s *Store) PruneAlerts(ctx context.Context, args keybrake.PruneArgs) (int64, error) {
	var n int64
	err := s.batch.write(ctx, func(tx *sql.Tx) error {
		ctx := context.WithoutCancel(ctx) // a batch runs without its callers' contexts (batch.go)
		n = 0
		var ids string // a JSON array of the batch's alert ids
		err := tx.QueryRowContext(ctx, `SELECT COALESCE(json_group_array(id), '[]') FROM (
			SELECT a.id FROM alerts a WHERE a.created_at < ?1 AND a.claimed = 1
			AND NOT EXISTS (SELECT 1 FROM alert_deliveries d WHERE d.alert_id = a.id AND d.state = 'pending')
			LIMIT ?2)`, args.Before.UnixMicro(), pruneLimit(args.Limit)).Scan(&ids)
		if err != nil {
			return wrap(err, "prune alerts")
		}
		for _, q := range []string{
			`DELETE FROM alert_attempts WHERE delivery_id IN (SELECT id FROM alert_deliveries WHERE alert_id IN (SELECT value FROM json_each(?)))`,
			`DELETE FROM alert_deliveries WHERE alert_id IN (SELECT value FROM json_each(?))`,
		} {
			if _, err := tx.ExecContext(ctx, q, ids); err != nil {
				return wrap(err, "prune alerts")
			}
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM alerts WHERE id IN (SELECT value FROM json_each(?))`, ids)
		if err != nil {
			return wrap(err, "prune alerts")
		}
		n, err = res.RowsAffected()
		return wrap(err, "prune alerts")
	})
	return n, err
}

// pruneExec runs one bounded DELETE as a write of its own batch slot.
func (s *Store) pruneExec(ctx context.Context, what, q string, args ...any) (int64, error) {
	var n int64
	err := s.batch.write(ctx, func(tx *sql.Tx) error {
		ctx := context.WithoutCancel(ctx) // a batch runs without its callers' contexts (batch.go)
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return wrap(err, "%s", what)
		}
		n, err = res.RowsAffected()
		return wrap(err, "%s", what)
	})
	return n, err
}
