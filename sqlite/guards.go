package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/keybrake/keybrake"
)

var _ keybrake.GuardService = (*Store)(nil)

// checkGuards decides, inside the reservation's transaction tx, the guards
// of key k on reservation in: the breaker's repeat and spend-rate rules
// (which suspend the key, in tx), the duplicate guard, then the velocity
// limits. It returns the first refusal, or nil to reserve and the counters
// the reservation counts in (keybrake.EncodeCounters), which the insert
// records and the trigger reservations_guard_insert adds it to.
func (s *Store) checkGuards(ctx context.Context, tx *sql.Tx, k *keybrake.Key, in *keybrake.Reservation, now time.Time) (*keybrake.GuardRefusal, string, error) {
	g := k.Guards
	if g.IsZero() {
		return nil, "", nil
	}
	if b := g.Breaker; b != nil {
		rule, reason, err := s.breakerTrips(ctx, tx, k.ID, b, in, now)
		if err != nil || rule != "" {
			if err == nil {
				err = s.suspendIn(ctx, tx, k.ID, reason, now)
			}
			return &keybrake.GuardRefusal{Guard: keybrake.GuardBreaker, Rule: rule, Suspended: true}, "", err
		}
	}
	if d := g.Duplicate; d != nil && in.DupKey != "" && !(in.Override && d.AllowOverride) {
		var (
			id, obj string
			at      int64
		)
		err := s.txQueryRow(ctx, tx, qDuplicate, k.ID, in.DupKey, now.Add(-keybrake.Window(d.WindowSeconds)).UnixMicro()).Scan(&id, &obj, &at)
		if err == nil {
			return &keybrake.GuardRefusal{Guard: keybrake.GuardDuplicate, EarlierID: id, EarlierObjectID: obj, EarlierAt: fromMicros(at)}, "", nil
		} else if !errors.Is(err, sql.ErrNoRows) {
			return nil, "", wrap(err, "duplicate guard on key %s", k.ID)
		}
	}
	for _, v := range g.Velocity {
		if !v.Applies(in.Operation) || (v.Per == keybrake.PerCustomer && in.Customer == "") {
			continue
		}
		if r, err := s.velocity(ctx, tx, k.ID, v, v.Scope(in.Customer), now); err != nil || r != nil {
			return r, "", err
		}
	}
	return nil, keybrake.EncodeCounters(keybrake.CountersFor(g, in.Operation, in.Customer, now)), nil
}

// The guards' hot statements, prepared at Open.
const (
	// qDuplicate finds the newest reservation the duplicate guard
	// matches: a probe of reservations_dup, reading the row only for a
	// match.
	qDuplicate = `SELECT id, object_id, created_at FROM reservations
		WHERE key_id = ? AND dup_key = ? AND created_at > ? AND state <> 'released'
		ORDER BY created_at DESC LIMIT 1`
	// qCounterSum sums a scope's counters from a bucket on.
	qCounterSum = `SELECT COALESCE(SUM(n), 0), COALESCE(SUM(micros), 0) FROM guard_counters
		WHERE key_id = ? AND scope = ? AND bucket >= ?`
	// qRepeats counts, up to a bound, the key's reservations and
	// recorded refusals of a fingerprint since a time: index-only.
	qRepeats = `SELECT
		(SELECT COUNT(*) FROM (SELECT 1 FROM reservations WHERE key_id = ?1 AND fingerprint = ?2 AND created_at > ?3 LIMIT ?4)) +
		(SELECT COUNT(*) FROM (SELECT 1 FROM guard_refusals WHERE key_id = ?1 AND at > ?3 AND fingerprint = ?2 LIMIT ?4))`
)

// velocity sums the counters of v's window for scope and, at or over the
// limit, reads them to say when the limit frees up.
func (s *Store) velocity(ctx context.Context, tx *sql.Tx, keyID string, v keybrake.VelocityLimit, scope string, now time.Time) (*keybrake.GuardRefusal, error) {
	since := v.Since(now)
	var n, micros int64
	if err := s.txQueryRow(ctx, tx, qCounterSum, keyID, scope, since).Scan(&n, &micros); err != nil {
		return nil, wrap(err, "velocity %s on key %s", v.Name, keyID)
	}
	if n < int64(v.Limit) {
		return nil, nil
	}
	buckets, err := s.counters(ctx, tx, keyID, scope, since)
	if err != nil {
		return nil, wrap(err, "velocity %s on key %s", v.Name, keyID)
	}
	return &keybrake.GuardRefusal{Guard: keybrake.GuardVelocity, Rule: v.Name, Limit: v.Limit, Count: int(n),
		RetryAt: v.RetryAt(buckets)}, nil
}

// counters reads a scope's counters from bucket since on.
func (s *Store) counters(ctx context.Context, tx *sql.Tx, keyID, scope string, since int64) ([]keybrake.BucketCount, error) {
	rows, err := tx.QueryContext(ctx, `SELECT bucket, n, micros FROM guard_counters WHERE key_id = ? AND scope = ? AND bucket >= ? AND n > 0`, keyID, scope, since)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var bs []keybrake.BucketCount
	for rows.Next() {
		var b keybrake.BucketCount
		if err := rows.Scan(&b.Bucket, &b.N, &b.Micros); err != nil {
			return nil, err
		}
		bs = append(bs, b)
	}
	return bs, rows.Err()
}

// breakerTrips returns the breaker rule that reservation in would trip,
// and the suspension's reason, or "" when none does.
func (s *Store) breakerTrips(ctx context.Context, tx *sql.Tx, keyID string, b *keybrake.Breaker, in *keybrake.Reservation, now time.Time) (rule, reason string, err error) {
	if b.RepeatBody > 0 && in.Fingerprint != "" {
		n, err := s.repeats(ctx, tx, keyID, in.Fingerprint, now.Add(-keybrake.Window(b.RepeatWindowSeconds)), b.RepeatBody)
		if err != nil {
			return "", "", err
		}
		if n+1 >= b.RepeatBody {
			return keybrake.BreakerRepeat, fmt.Sprintf("breaker %s: the same %s request %d times within %ds under different Idempotency-Keys", keybrake.BreakerRepeat, in.Operation, n+1, b.RepeatWindowSeconds), nil
		}
	}
	if b.SpendMultiple > 0 {
		p := b.Probe(now)
		var n, recent, base int64
		err := s.txQueryRow(ctx, tx, qCounterSum, keyID, p.Recent, p.RecentSince).Scan(&n, &recent)
		if err == nil {
			err = s.txQueryRow(ctx, tx, qCounterSum, keyID, p.Base, p.BaseSince).Scan(&n, &base)
		}
		if err != nil {
			return "", "", wrap(err, "breaker on key %s", keyID)
		}
		if SpendRateTrips(recent+int64(in.Micros), base-recent, b) {
			return keybrake.BreakerSpendRate, fmt.Sprintf("breaker %s: $%s reserved in %ds, over %d times the key's rate in the %ds before",
				keybrake.BreakerSpendRate, keybrake.Micros(recent+int64(in.Micros)), b.SpendWindowSeconds, b.SpendMultiple, b.BaselineSeconds), nil
		}
	}
	return "", "", nil
}

// SpendRateTrips reports whether recent, spent in the breaker's spend
// window, is over SpendMultiple times the average per spend window of
// before, spent in the rest of the baseline. No baseline spend, no rate:
// it never trips. Computed exactly, in integers.
func SpendRateTrips(recent, before int64, b *keybrake.Breaker) bool {
	if before <= 0 || b.SpendMultiple <= 0 {
		return false
	}
	// recent / w > x * before / (base - w)  ⇔  recent·(base-w) > x·before·w
	lhs := new(big.Int).Mul(big.NewInt(recent), big.NewInt(b.BaselineSeconds-b.SpendWindowSeconds))
	rhs := new(big.Int).Mul(big.NewInt(b.SpendMultiple), big.NewInt(before))
	rhs.Mul(rhs, big.NewInt(b.SpendWindowSeconds))
	return lhs.Cmp(rhs) > 0
}

// repeats counts the key's reservations and recorded refusals of
// fingerprint since since, each up to bound: the rule only asks whether
// there are enough.
func (s *Store) repeats(ctx context.Context, tx *sql.Tx, keyID, fingerprint string, since time.Time, bound int) (int, error) {
	var n int
	err := s.txQueryRow(ctx, tx, qRepeats, keyID, fingerprint, since.UnixMicro(), bound).Scan(&n)
	return n, wrap(err, "breaker on key %s", keyID)
}

// suspendIn suspends the key inside tx, keeping an earlier suspension.
func (s *Store) suspendIn(ctx context.Context, tx *sql.Tx, keyID, reason string, now time.Time) error {
	_, err := tx.ExecContext(ctx, `UPDATE keys SET suspended_at = ?, suspended_reason = ?, updated_at = ?
		WHERE id = ? AND suspended_at IS NULL`, now.UnixMicro(), reason, now.UnixMicro(), keyID)
	return wrap(err, "suspend key %s", keyID)
}

// CountRefusal records a refusal on the key and suspends it if its breaker
// trips. See keybrake.GuardService.
func (s *Store) CountRefusal(ctx context.Context, args keybrake.RefusalArgs) (bool, error) {
	now := args.Now
	if now.IsZero() {
		now = s.now()
	}
	now = dbTime(now)
	var suspended bool
	err := s.batch.write(ctx, func(tx *sql.Tx) error {
		ctx := context.Background() // a batch runs without its callers' contexts
		var (
			guards string
			at     sql.NullInt64
		)
		err := tx.QueryRowContext(ctx, `SELECT guards, suspended_at FROM keys WHERE id = ?`, args.KeyID).Scan(&guards, &at)
		if err != nil {
			return wrapKeyErr(err, "count refusal on key %s", args.KeyID)
		}
		g, err := decodeGuards(guards)
		if err != nil || g == nil || g.Breaker == nil || at.Valid {
			return err
		}
		b := g.Breaker
		keep := max(b.RefusalWindowSeconds, b.RepeatWindowSeconds)
		if _, err := tx.ExecContext(ctx, `DELETE FROM guard_refusals WHERE key_id = ? AND at <= ?`, args.KeyID, now.Add(-keybrake.Window(keep)).UnixMicro()); err != nil {
			return wrap(err, "count refusal on key %s", args.KeyID)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO guard_refusals (key_id, at, fingerprint) VALUES (?, ?, ?)`, args.KeyID, now.UnixMicro(), args.Fingerprint); err != nil {
			return wrap(err, "count refusal on key %s", args.KeyID)
		}
		reason := ""
		if b.RefusalBurst > 0 {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM guard_refusals WHERE key_id = ? AND at > ?`,
				args.KeyID, now.Add(-keybrake.Window(b.RefusalWindowSeconds)).UnixMicro()).Scan(&n); err != nil {
				return wrap(err, "count refusal on key %s", args.KeyID)
			}
			if n >= b.RefusalBurst {
				reason = fmt.Sprintf("breaker %s: %d refusals within %ds, the last: %s", keybrake.BreakerRefusals, n, b.RefusalWindowSeconds, truncate(args.Reason, 200))
			}
		}
		if reason == "" && b.RepeatBody > 0 && args.Fingerprint != "" {
			n, err := s.repeats(ctx, tx, args.KeyID, args.Fingerprint, now.Add(-keybrake.Window(b.RepeatWindowSeconds)), b.RepeatBody)
			if err != nil {
				return err
			}
			if n >= b.RepeatBody {
				reason = fmt.Sprintf("breaker %s: the same request %d times within %ds under different Idempotency-Keys", keybrake.BreakerRepeat, n, b.RepeatWindowSeconds)
			}
		}
		if reason == "" {
			return nil
		}
		suspended = true
		return s.suspendIn(ctx, tx, args.KeyID, reason, now)
	})
	if err != nil {
		return false, err
	}
	if suspended {
		s.notifyKey(args.KeyID)
	}
	return suspended, nil
}

// SuspendKey suspends the key; suspending twice keeps the first time and
// reason. Returns ENOTFOUND for an unknown key.
func (s *Store) SuspendKey(ctx context.Context, id, reason string, now time.Time) (*keybrake.Key, error) {
	return s.setSuspension(ctx, id, func(tx *sql.Tx) error {
		return s.suspendIn(context.Background(), tx, id, reason, dbTime(now))
	})
}

// ResumeKey clears the key's suspension. Returns ENOTFOUND for an unknown
// key.
func (s *Store) ResumeKey(ctx context.Context, id string, now time.Time) (*keybrake.Key, error) {
	return s.setSuspension(ctx, id, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(context.Background(), `UPDATE keys SET suspended_at = NULL, suspended_reason = '', updated_at = ?
			WHERE id = ? AND suspended_at IS NOT NULL`, dbTime(now).UnixMicro(), id)
		return wrap(err, "resume key %s", id)
	})
}

func (s *Store) setSuspension(ctx context.Context, id string, fn func(tx *sql.Tx) error) (*keybrake.Key, error) {
	var k *keybrake.Key
	err := s.batch.write(ctx, func(tx *sql.Tx) error {
		before, err := scanKey(tx.QueryRowContext(context.Background(), qKeyByID, id))
		if err != nil {
			return wrapKeyErr(err, "key %s", id)
		}
		if before.RevokedAt != nil {
			// Revocation is final: neither suspending nor resuming changes it.
			return keybrake.Errorf(keybrake.ECONFLICT, "Key %s was revoked at %s; revocation is final. Create a new key.", id, before.RevokedAt.UTC().Format(time.RFC3339))
		}
		if err := fn(tx); err != nil {
			return err
		}
		k, err = scanKey(tx.QueryRowContext(context.Background(), qKeyByID, id))
		return wrapKeyErr(err, "key %s", id)
	})
	if err != nil {
		return nil, err
	}
	s.notifyKey(id)
	return k, nil
}

// encodeGuards is the guards column: "" for none.
func encodeGuards(g *keybrake.Guards) string {
	if g.IsZero() {
		return ""
	}
	b, _ := json.Marshal(g) // plain structs: cannot fail
	return string(b)
}

func decodeGuards(s string) (*keybrake.Guards, error) {
	if s == "" {
		return nil, nil
	}
	var g keybrake.Guards
	if err := json.Unmarshal([]byte(s), &g); err != nil {
		return nil, err
	}
	return &g, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// qInsertCounted inserts a reservation of a guarded key with the counters
// it counts in.
var qInsertCounted = `INSERT INTO reservations (` + resColumns + `, counted)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// insertReservation inserts r in tx, counted in the guard counters named
// by counted ("" for none), and now and then drops expired counters.
func (s *Store) insertReservation(ctx context.Context, tx *sql.Tx, r *keybrake.Reservation, counted string) (sql.Result, error) {
	if counted == "" {
		return s.txExec(ctx, tx, qInsertReservation, reservationArgs(r)...)
	}
	if err := s.pruneCounters(ctx, tx, r.CreatedAt); err != nil {
		return nil, err
	}
	return s.txExec(ctx, tx, qInsertCounted, append(reservationArgs(r), counted)...)
}

// pruneCounters deletes, at most once a minute, the guard counters no
// window reads any more.
func (s *Store) pruneCounters(ctx context.Context, tx *sql.Tx, now time.Time) error {
	next := s.nextPrune.Load()
	if now.Unix() < next {
		return nil
	}
	s.nextPrune.Store(now.Unix() + 60)
	_, err := tx.ExecContext(ctx, `DELETE FROM guard_counters WHERE expires < ?`, now.Unix())
	return wrap(err, "prune guard counters")
}
