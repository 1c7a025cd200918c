package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
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

// Each DELETE below picks its batch in a materialized CTE (a LIMIT inside
// an IN subquery may be re-run per row, deleting more than the batch) with
// FOR UPDATE SKIP LOCKED, so it never
// waits on a row the request path holds, and repeats the row's own
// conditions on the target, which READ COMMITTED re-checks on a row changed
// meanwhile (a re-armed reservation, a freshly locked hold): such a row is
// left alone.

// PruneReservations deletes up to a batch of old settled or released
// reservations no holds row links to. Deleting a final reservation changes
// no spend counter.
func (s *Store) PruneReservations(ctx context.Context, args keybrake.PruneArgs) (int64, error) {
	cut := args.Before
	if w := args.Now.Add(-keybrake.IdempotencyWindow); w.Before(cut) {
		cut = w
	}
	return s.pruneExec(ctx, "prune reservations", `WITH batch AS MATERIALIZED (
		SELECT r.id FROM reservations r
		WHERE r.state IN ('settled', 'released') AND r.updated_at < $1 AND r.created_at < $1
		AND NOT EXISTS (SELECT 1 FROM holds h WHERE h.reservation_id = r.id)
		LIMIT $2 FOR UPDATE SKIP LOCKED)
		DELETE FROM reservations t USING batch WHERE t.id = batch.id
		AND t.state IN ('settled', 'released') AND t.updated_at < $1`, ts(cut), pruneLimit(args.Limit))
}

// PruneHolds deletes up to a batch of holds rows that lock and hold
// nothing any more.
func (s *Store) PruneHolds(ctx context.Context, args keybrake.PruneArgs) (int64, error) {
	return s.pruneExec(ctx, "prune holds", `WITH batch AS MATERIALIZED (
		SELECT h.key_id, h.object_id FROM holds h LEFT JOIN reservations r ON r.id = h.reservation_id
		WHERE (h.lock_until IS NULL OR h.lock_until < $1) AND (h.hold_until IS NULL OR h.hold_until < $1)
		AND (r.id IS NULL OR (r.state IN ('settled', 'released') AND r.updated_at < $1))
		LIMIT $2 FOR UPDATE OF h SKIP LOCKED)
		DELETE FROM holds t USING batch WHERE t.key_id = batch.key_id AND t.object_id = batch.object_id
		AND (t.lock_until IS NULL OR t.lock_until < $1) AND (t.hold_until IS NULL OR t.hold_until < $1)`,
		ts(args.Before), pruneLimit(args.Limit))
}

// CompactCounters deletes up to a batch of closed daily and monthly
// counters no open reservation counts in.
func (s *Store) CompactCounters(ctx context.Context, args keybrake.CompactArgs) (int64, error) {
	return s.pruneExec(ctx, "compact spend counters", `WITH batch AS MATERIALIZED (
		SELECT c.key_id, c.window_name, c.bucket FROM spend_counters c
		WHERE ((c.window_name = 'daily' AND c.bucket < $1) OR (c.window_name = 'monthly' AND c.bucket < $2))
		AND NOT EXISTS (SELECT 1 FROM reservations r
			WHERE r.key_id = c.key_id AND r.state IN ('reserved', 'held', 'uncertain')
			AND (CASE c.window_name WHEN 'daily' THEN r.day ELSE r.month END) = c.bucket)
		LIMIT $3 FOR UPDATE OF c SKIP LOCKED)
		DELETE FROM spend_counters t USING batch
		WHERE t.key_id = batch.key_id AND t.window_name = batch.window_name AND t.bucket = batch.bucket`,
		args.DayBefore, args.MonthBefore, pruneLimit(args.Limit))
}

// PruneAlerts deletes up to a batch of old alerts whose deliveries are
// done, with the deliveries and their attempts.
func (s *Store) PruneAlerts(ctx context.Context, args keybrake.PruneArgs) (int64, error) {
	var n int64
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT a.id FROM alerts a WHERE a.created_at < $1 AND a.claimed
			AND NOT EXISTS (SELECT 1 FROM alert_deliveries d WHERE d.alert_id = a.id AND d.state = 'pending')
			LIMIT $2 FOR UPDATE SKIP LOCKED`, ts(args.Before), pruneLimit(args.Limit))
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(ids) == 0 {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM alert_attempts WHERE delivery_id IN
			(SELECT id FROM alert_deliveries WHERE alert_id = ANY($1))`, ids); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM alert_deliveries WHERE alert_id = ANY($1)`, ids); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM alerts WHERE id = ANY($1)`, ids)
		n = tag.RowsAffected()
		return err
	})
	return n, s.wrap("prune alerts", err)
}

// PruneGuardCounters deletes up to a batch of expired guard counters.
func (s *Store) PruneGuardCounters(ctx context.Context, args keybrake.PruneArgs) (int64, error) {
	return s.pruneExec(ctx, "prune guard counters", `WITH batch AS MATERIALIZED (
		SELECT key_id, scope, bucket, slot FROM guard_counters WHERE expires < $1
		LIMIT $2 FOR UPDATE SKIP LOCKED)
		DELETE FROM guard_counters t USING batch WHERE t.key_id = batch.key_id AND t.scope = batch.scope
		AND t.bucket = batch.bucket AND t.slot = batch.slot AND t.expires < $1`,
		args.Now.Unix(), pruneLimit(args.Limit))
}

// PruneSent deletes up to a batch of old records of sent objects, oldest
// first (sent_objects_created, 0038). A row is never changed after it is
// made, so the target repeats no condition.
func (s *Store) PruneSent(ctx context.Context, args keybrake.PruneArgs) (int64, error) {
	return s.pruneExec(ctx, "prune sent objects", `WITH batch AS MATERIALIZED (
		SELECT vendor, object_id, key_id FROM sent_objects WHERE created_at < $1
		ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED)
		DELETE FROM sent_objects t USING batch WHERE t.vendor = batch.vendor
		AND t.object_id = batch.object_id AND t.key_id = batch.key_id`,
		ts(keybrake.SentCutoff(args)), pruneLimit(args.Limit))
}

// pruneExec runs one bounded DELETE in a transaction of its own.
func (s *Store) pruneExec(ctx context.Context, what, q string, args ...any) (int64, error) {
	tag, err := s.pool.Exec(ctx, q, args...)
	if err != nil {
		return 0, s.wrap(what, err)
	}
	return tag.RowsAffected(), nil
}
