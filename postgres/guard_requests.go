package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
)

// CountRequest decides and counts a request on the key's velocity limits
// that count requests. Requests of one key are serialised by an advisory
// lock of their own, not the key row lock: a read never waits for a
// reservation of its key, and the counters it reads (scopes "q:…") are
// written by no reservation. A request on a held object (args.Held) counts
// in limits that reservations count in too (scopes "v:…"), so it also
// takes the key row lock, as keybrake_reserve does. See
// keybrake.GuardService.
func (s *Store) CountRequest(ctx context.Context, args keybrake.RequestArgs) (*keybrake.GuardRefusal, error) {
	now := args.Now
	if now.IsZero() && s.Now != nil {
		now = s.Now()
	} else if now.IsZero() {
		now = time.Now()
	}
	now = ts(now)
	if err := s.checkClock(ctx, now); err != nil {
		return nil, err
	}
	var refusal *keybrake.GuardRefusal
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		refusal = nil
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('keybrake-requests:' || $1, 0))`, args.KeyID); err != nil {
			return err
		}
		q := `SELECT guards FROM keys WHERE id = $1`
		if args.Held {
			q += ` FOR NO KEY UPDATE` // see 0002 for why NO KEY
		}
		var raw []byte
		if err := tx.QueryRow(ctx, q, args.KeyID).Scan(&raw); err != nil {
			return notFound(err, "No such key: %s.", args.KeyID)
		}
		var g keybrake.Guards
		if raw != nil {
			if err := json.Unmarshal(raw, &g); err != nil {
				return fmt.Errorf("key %s: guards: %w", args.KeyID, err)
			}
		}
		limits, counters := keybrake.RequestCounters(&g, args, now)
		for _, v := range limits {
			scope, since := v.Scope(args.Customer), v.Since(now)
			var n int64
			if err := tx.QueryRow(ctx, `SELECT coalesce(sum(n), 0) FROM guard_counters WHERE key_id = $1 AND scope = $2 AND bucket >= $3`,
				args.KeyID, scope, since).Scan(&n); err != nil {
				return err
			}
			if n < int64(v.Limit) {
				continue
			}
			buckets, err := requestBuckets(ctx, tx, args.KeyID, scope, since)
			if err != nil {
				return err
			}
			refusal = &keybrake.GuardRefusal{Guard: keybrake.GuardVelocity, Rule: v.Name, Limit: v.Limit, Count: int(n), RetryAt: v.RetryAt(buckets)}
			return nil
		}
		if len(counters) == 0 {
			return nil
		}
		scopes, buckets, expires := make([]string, len(counters)), make([]int64, len(counters)), make([]int64, len(counters))
		for i, c := range counters {
			scopes[i], buckets[i], expires[i] = c.Scope, c.Bucket, c.Expires
		}
		_, err := tx.Exec(ctx, `INSERT INTO guard_counters AS c (key_id, scope, bucket, slot, expires, n, micros)
			SELECT $1, u.s, u.b, '', u.x, 1, 0 FROM unnest($2::text[], $3::bigint[], $4::bigint[]) AS u(s, b, x) ORDER BY 2, 3
			ON CONFLICT (key_id, scope, bucket, slot) DO UPDATE SET n = c.n + 1`, args.KeyID, scopes, buckets, expires)
		return err
	})
	if err != nil {
		return nil, s.wrap("count request on "+args.KeyID, err)
	}
	return refusal, nil
}

// requestBuckets reads a scope's counters from bucket since on.
func requestBuckets(ctx context.Context, tx pgx.Tx, keyID, scope string, since int64) ([]keybrake.BucketCount, error) {
	rows, err := tx.Query(ctx, `SELECT bucket, sum(n)::bigint, sum(micros)::bigint FROM guard_counters
		WHERE key_id = $1 AND scope = $2 AND bucket >= $3 GROUP BY bucket HAVING sum(n) > 0`, keyID, scope, since)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (keybrake.BucketCount, error) {
		var b keybrake.BucketCount
		err := r.Scan(&b.Bucket, &b.N, &b.Micros)
		return b, err
	})
}
