package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
)

var _ keybrake.GuardService = (*Store)(nil)

// attempted is the condition on reservations that velocity limits and the
// spend-rate rule count: everything but a request Stripe refused before
// processing it (a decline, 402, was an attempt on the card).
const attempted = `(state <> 'released' OR upstream_status = 402)`

// checkGuards decides, inside the reservation's transaction tx, the guards
// of key k on reservation in: the breaker's repeat and spend-rate rules
// (which suspend the key, in tx), the duplicate guard, then the velocity
// limits. It returns the first refusal, or nil to reserve.
func (s *Store) checkGuards(ctx context.Context, tx *sql.Tx, k *keybrake.Key, in *keybrake.Reservation, now time.Time) (*keybrake.GuardRefusal, error) {
	g := k.Guards
	if g.IsZero() {
		return nil, nil
	}
	if b := g.Breaker; b != nil {
		rule, reason, err := s.breakerTrips(ctx, tx, k.ID, b, in, now)
		if err != nil || rule != "" {
			if err == nil {
				err = s.suspendIn(ctx, tx, k.ID, reason, now)
			}
			return &keybrake.GuardRefusal{Guard: keybrake.GuardBreaker, Rule: rule, Suspended: true}, err
		}
	}
	if d := g.Duplicate; d != nil && in.DupKey != "" && !(in.Override && d.AllowOverride) {
		var (
			id, obj string
			at      int64
		)
		err := tx.QueryRowContext(ctx, `SELECT id, object_id, created_at FROM reservations
			WHERE key_id = ? AND dup_key = ? AND created_at > ? AND state <> 'released'
			ORDER BY created_at DESC LIMIT 1`, k.ID, in.DupKey, now.Add(-keybrake.Window(d.WindowSeconds)).UnixMicro()).Scan(&id, &obj, &at)
		if err == nil {
			return &keybrake.GuardRefusal{Guard: keybrake.GuardDuplicate, EarlierID: id, EarlierObjectID: obj, EarlierAt: fromMicros(at)}, nil
		} else if !errors.Is(err, sql.ErrNoRows) {
			return nil, wrap(err, "duplicate guard on key %s", k.ID)
		}
	}
	for _, v := range g.Velocity {
		if !v.Applies(in.Operation) || (v.Per == keybrake.PerCustomer && in.Customer == "") {
			continue
		}
		if r, err := s.velocity(ctx, tx, k.ID, v, in, now); err != nil || r != nil {
			return r, err
		}
	}
	return nil, nil
}

// velocity counts, among the key's newest v.Limit counted reservations in
// v's window (of the customer and operations v names), how many there are
// and when the oldest of them leaves the window: then the limit frees up.
func (s *Store) velocity(ctx context.Context, tx *sql.Tx, keyID string, v keybrake.VelocityLimit, in *keybrake.Reservation, now time.Time) (*keybrake.GuardRefusal, error) {
	win := keybrake.Window(v.WindowSeconds)
	q := `SELECT created_at FROM reservations WHERE key_id = ? AND created_at > ? AND ` + attempted
	args := []any{keyID, now.Add(-win).UnixMicro()}
	if v.Per == keybrake.PerCustomer {
		q, args = q+` AND customer = ?`, append(args, in.Customer)
	}
	if len(v.Operations) > 0 {
		q += ` AND operation IN (?` + strings.Repeat(`, ?`, len(v.Operations)-1) + `)`
		for _, op := range v.Operations {
			args = append(args, op)
		}
	}
	q = `SELECT COUNT(*), MIN(created_at) FROM (` + q + ` ORDER BY created_at DESC LIMIT ?)`
	args = append(args, v.Limit)
	var (
		n      int
		oldest sql.NullInt64
	)
	if err := tx.QueryRowContext(ctx, q, args...).Scan(&n, &oldest); err != nil {
		return nil, wrap(err, "velocity %s on key %s", v.Name, keyID)
	}
	if n < v.Limit {
		return nil, nil
	}
	return &keybrake.GuardRefusal{Guard: keybrake.GuardVelocity, Rule: v.Name, Limit: v.Limit, Count: n,
		RetryAt: fromMicros(oldest.Int64).Add(win)}, nil
}

// breakerTrips returns the breaker rule that reservation in would trip,
// and the suspension's reason, or "" when none does.
func (s *Store) breakerTrips(ctx context.Context, tx *sql.Tx, keyID string, b *keybrake.Breaker, in *keybrake.Reservation, now time.Time) (rule, reason string, err error) {
	if b.RepeatBody > 0 && in.Fingerprint != "" {
		n, err := s.repeats(ctx, tx, keyID, in.Fingerprint, now.Add(-keybrake.Window(b.RepeatWindowSeconds)))
		if err != nil {
			return "", "", err
		}
		if n+1 >= b.RepeatBody {
			return keybrake.BreakerRepeat, fmt.Sprintf("breaker %s: the same %s request %d times within %ds under different Idempotency-Keys", keybrake.BreakerRepeat, in.Operation, n+1, b.RepeatWindowSeconds), nil
		}
	}
	if b.SpendMultiple > 0 {
		w, base := keybrake.Window(b.SpendWindowSeconds), keybrake.Window(b.BaselineSeconds)
		var recent, before int64
		err := tx.QueryRowContext(ctx, `SELECT
			COALESCE(SUM(CASE WHEN created_at > ?2 THEN micros END), 0),
			COALESCE(SUM(CASE WHEN created_at <= ?2 THEN micros END), 0)
			FROM reservations WHERE key_id = ?1 AND created_at > ?3 AND `+attempted,
			keyID, now.Add(-w).UnixMicro(), now.Add(-base).UnixMicro()).Scan(&recent, &before)
		if err != nil {
			return "", "", wrap(err, "breaker on key %s", keyID)
		}
		if SpendRateTrips(recent+int64(in.Micros), before, b) {
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
// fingerprint since since.
func (s *Store) repeats(ctx context.Context, tx *sql.Tx, keyID, fingerprint string, since time.Time) (int, error) {
	var n int
	err := tx.QueryRowContext(ctx, `SELECT
		(SELECT COUNT(*) FROM reservations WHERE key_id = ?1 AND created_at > ?3 AND fingerprint = ?2) +
		(SELECT COUNT(*) FROM guard_refusals WHERE key_id = ?1 AND at > ?3 AND fingerprint = ?2)`,
		keyID, fingerprint, since.UnixMicro()).Scan(&n)
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
			n, err := s.repeats(ctx, tx, args.KeyID, args.Fingerprint, now.Add(-keybrake.Window(b.RepeatWindowSeconds)))
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

// SuspendKey suspends the key and its descendants (suspend_cascade.go);
// suspending twice keeps the first time and reason. Returns ENOTFOUND for
// an unknown key.
func (s *Store) SuspendKey(ctx context.Context, id, reason string, now time.Time) (*keybrake.Key, error) {
	var children []string
	k, err := s.setSuspension(ctx, id, func(tx *sql.Tx) (err error) {
		if err := s.suspendIn(context.Background(), tx, id, reason, dbTime(now)); err != nil {
			return err
		}
		children, err = suspendDescendants(context.Background(), tx, id, reason, dbTime(now))
		return err
	})
	s.notifyKeys(children)
	return k, err
}

// ResumeKey clears the key's suspension. Returns ENOTFOUND for an unknown
// key.
func (s *Store) ResumeKey(ctx context.Context, id string, now time.Time) (*keybrake.Key, error) {
	var children []string
	k, err := s.setSuspension(ctx, id, func(tx *sql.Tx) (err error) {
		if _, err := tx.ExecContext(context.Background(), `UPDATE keys SET suspended_at = NULL, suspended_reason = '', suspended_by = '', updated_at = ?
			WHERE id = ? AND suspended_at IS NOT NULL`, dbTime(now).UnixMicro(), id); err != nil {
			return wrap(err, "resume key %s", id)
		}
		children, err = resumeDescendants(context.Background(), tx, id, dbTime(now))
		return err
	})
	s.notifyKeys(children)
	return k, err
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
