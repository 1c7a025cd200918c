package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/keybrake/keybrake"
)

// CountRequest decides and counts a request on the key's velocity limits
// that count requests, in one write transaction (the writer is the only
// one, so concurrent requests see each other's counts). See
// keybrake.GuardService.
func (s *Store) CountRequest(ctx context.Context, args keybrake.RequestArgs) (*keybrake.GuardRefusal, error) {
	now := args.Now
	if now.IsZero() {
		now = s.now()
	}
	now = dbTime(now)
	var refusal *keybrake.GuardRefusal
	err := s.batch.write(ctx, func(tx *sql.Tx) error {
		ctx := context.Background() // a batch runs without its callers' contexts
		var raw string
		if err := tx.QueryRowContext(ctx, `SELECT guards FROM keys WHERE id = ?`, args.KeyID).Scan(&raw); err != nil {
			return wrapKeyErr(err, "count request on key %s", args.KeyID)
		}
		plan, err := s.planOf(raw)
		if err != nil || plan == nil {
			return wrap(err, "count request on key %s: decode guards", args.KeyID)
		}
		limits, counters := keybrake.RequestCounters(plan.g, args, now)
		if len(limits) == 0 {
			return nil
		}
		counts := make([]int64, len(limits))
		dest := make([]any, len(limits))
		qargs := []any{args.KeyID}
		for i, v := range limits {
			dest[i] = &counts[i]
			qargs = append(qargs, v.Scope(args.Customer), v.Since(now))
		}
		if err := s.runQuery(ctx, tx, requestProbeText(len(limits)), qargs, dest); err != nil {
			return wrap(err, "count request on key %s", args.KeyID)
		}
		for i, v := range limits {
			if counts[i] < int64(v.Limit) {
				continue
			}
			buckets, err := s.counters(ctx, tx, args.KeyID, v.Scope(args.Customer), v.Since(now))
			if err != nil {
				return wrap(err, "velocity %s on key %s", v.Name, args.KeyID)
			}
			refusal = &keybrake.GuardRefusal{Guard: keybrake.GuardVelocity, Rule: v.Name, Limit: v.Limit, Count: int(counts[i]), RetryAt: v.RetryAt(buckets)}
			return nil
		}
		return s.addCounters(ctx, tx, args.KeyID, 0, counters)
	})
	if err != nil {
		return nil, err
	}
	if s.probeMisses.Load() {
		s.probeMisses.Store(false)
		s.prepareProbes()
	}
	return refusal, nil
}

// requestProbeText sums n scopes' counters from a bucket on, in one row.
func requestProbeText(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(probeSum, "n")
	}
	return "SELECT " + strings.Join(parts, ", ")
}

// runQuery runs a one-row query in tx through a statement prepared once
// per text (runProbe).
func (s *Store) runQuery(ctx context.Context, tx *sql.Tx, q string, args, dest []any) error {
	if st, ok := s.probes.Load(q); ok && st != nil {
		return tx.StmtContext(ctx, st.(*sql.Stmt)).QueryRowContext(ctx, args...).Scan(dest...)
	}
	s.probes.LoadOrStore(q, nil)
	s.probeMisses.Store(true)
	return tx.QueryRowContext(ctx, q, args...).Scan(dest...)
}
