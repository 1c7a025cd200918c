package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
)

var _ keybrake.GuardService = (*Store)(nil)

// CountRefusal records a refusal on the key and suspends it if its breaker
// trips, under the key row lock, so replicas counting refusals of one key
// at once see each other's. See keybrake.GuardService.
func (s *Store) CountRefusal(ctx context.Context, args keybrake.RefusalArgs) (bool, error) {
	now := args.Now
	if now.IsZero() && s.Now != nil {
		now = s.Now()
	} else if now.IsZero() {
		now = time.Now()
	}
	args.Reason = keybrake.CleanText(args.Reason) // quoted in the suspension's reason
	now = ts(now)
	var suspended bool
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var (
			raw []byte
			at  *time.Time
		)
		err := tx.QueryRow(ctx, `SELECT guards, suspended_at FROM keys WHERE id = $1 FOR NO KEY UPDATE`, args.KeyID).Scan(&raw, &at)
		if err != nil {
			return notFound(err, "No such key: %s.", args.KeyID)
		}
		var g keybrake.Guards
		if raw != nil {
			if err := json.Unmarshal(raw, &g); err != nil {
				return fmt.Errorf("key %s: guards: %w", args.KeyID, err)
			}
		}
		b := g.Breaker
		if b == nil || at != nil {
			return nil
		}
		keep := keybrake.Window(max(b.RefusalWindowSeconds, b.RepeatWindowSeconds))
		if _, err := tx.Exec(ctx, `DELETE FROM guard_refusals WHERE key_id = $1 AND at <= $2`, args.KeyID, now.Add(-keep)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO guard_refusals (key_id, at, fingerprint) VALUES ($1, $2, $3)`, args.KeyID, now, args.Fingerprint); err != nil {
			return err
		}
		reason := ""
		if b.RefusalBurst > 0 {
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM guard_refusals WHERE key_id = $1 AND at > $2`,
				args.KeyID, now.Add(-keybrake.Window(b.RefusalWindowSeconds))).Scan(&n); err != nil {
				return err
			}
			if n >= b.RefusalBurst {
				reason = fmt.Sprintf("breaker %s: %d refusals within %ds, the last: %s", keybrake.BreakerRefusals, n, b.RefusalWindowSeconds, truncate(args.Reason, 200))
			}
		}
		if reason == "" && b.RepeatBody > 0 && args.Fingerprint != "" {
			var n int
			since := now.Add(-keybrake.Window(b.RepeatWindowSeconds))
			if err := tx.QueryRow(ctx, `SELECT
				(SELECT count(*) FROM reservations WHERE key_id = $1 AND repeat_rule AND created_at > $3 AND fingerprint = $2) +
				(SELECT count(*) FROM guard_refusals WHERE key_id = $1 AND at > $3 AND fingerprint = $2)`,
				args.KeyID, args.Fingerprint, since).Scan(&n); err != nil {
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
		_, err = tx.Exec(ctx, `UPDATE keys SET suspended_at = $2, suspended_reason = $3, updated_at = $2 WHERE id = $1`, args.KeyID, now, reason)
		return err
	})
	if err != nil {
		return false, s.wrap("count refusal on "+args.KeyID, err)
	}
	return suspended, nil
}

// SuspendKey suspends the key; suspending twice keeps the first time and
// reason. Returns ENOTFOUND for an unknown key, ECONFLICT for a revoked one.
func (s *Store) SuspendKey(ctx context.Context, id, reason string, now time.Time) (*keybrake.Key, error) {
	return s.suspendKey(ctx, id, reason, now, nil)
}

// suspendKey is SuspendKey appending e, when not nil, in the same
// transaction.
func (s *Store) suspendKey(ctx context.Context, id, reason string, now time.Time, e *keybrake.AdminEvent) (*keybrake.Key, error) {
	// The key's descendants that are neither suspended nor revoked are
	// suspended in the same statement, marked suspended_by it, so resuming
	// it resumes exactly them.
	// A key, or descendant, that an ancestor's cascade had suspended
	// (suspended_by another key) becomes this suspension's own: otherwise
	// the suspension changed nothing, and the ancestor's resume resumed
	// what an operator had just suspended
	// (TestAttackLifecycle_OwnSuspensionUndoneByParentResume). The two
	// CTEs update disjoint rows: unsuspended ones, and suspended ones.
	return s.setSuspension(ctx, "suspend key "+id, e, `WITH RECURSIVE d(id) AS (
			SELECT id FROM keys WHERE parent_id = $1
			UNION SELECT c.id FROM keys c JOIN d ON c.parent_id = d.id),
		children AS (UPDATE keys SET suspended_at = $2, suspended_reason = $4, suspended_by = $1, updated_at = $2
			WHERE id IN (SELECT id FROM d) AND suspended_at IS NULL AND revoked_at IS NULL),
		taken AS (UPDATE keys SET suspended_by = $1, suspended_reason = $4, updated_at = $2
			WHERE id IN (SELECT id FROM d) AND suspended_at IS NOT NULL AND suspended_by <> ''
				AND suspended_by <> $1 AND suspended_by NOT IN (SELECT id FROM d))
		UPDATE keys
		SET suspended_reason = CASE WHEN suspended_at IS NULL OR suspended_by <> '' THEN $3 ELSE suspended_reason END,
		    updated_at = CASE WHEN suspended_at IS NULL OR suspended_by <> '' THEN $2 ELSE updated_at END,
		    suspended_by = '',
		    suspended_at = COALESCE(suspended_at, $2)
		WHERE id = $1 RETURNING `+keyColumns, id, ts(now), reason, "parent "+id+" suspended: "+reason)
}

// ResumeKey clears the key's suspension. Returns ENOTFOUND for an unknown
// key, ECONFLICT for a revoked one: revocation is final.
func (s *Store) ResumeKey(ctx context.Context, id string, now time.Time) (*keybrake.Key, error) {
	return s.resumeKey(ctx, id, now, nil)
}

// resumeKey is ResumeKey appending e, when not nil, in the same
// transaction.
func (s *Store) resumeKey(ctx context.Context, id string, now time.Time, e *keybrake.AdminEvent) (*keybrake.Key, error) {
	// Resuming it resumes the descendants its suspension suspended.
	return s.setSuspension(ctx, "resume key "+id, e, `WITH children AS (
			UPDATE keys SET suspended_at = NULL, suspended_reason = '', suspended_by = '', updated_at = $2
			WHERE suspended_by = $1 AND suspended_at IS NOT NULL)
		UPDATE keys
		SET updated_at = CASE WHEN suspended_at IS NULL THEN updated_at ELSE $2 END,
		    suspended_at = NULL, suspended_reason = '', suspended_by = ''
		WHERE id = $1 RETURNING `+keyColumns, id, ts(now))
}

// setSuspension runs the suspension statement sql, which returns the key,
// and appends e (when not nil) in one transaction. A revoked key is
// refused with ECONFLICT and left as it was: revocation is final.
func (s *Store) setSuspension(ctx context.Context, op string, e *keybrake.AdminEvent, sql string, args ...any) (*keybrake.Key, error) {
	var k *keybrake.Key
	err := s.inTx(ctx, func(tx pgx.Tx) (err error) {
		if k, err = scanKey(tx.QueryRow(ctx, sql, args...)); err != nil {
			return notFound(err, "No such key: %s.", args[0])
		}
		if err := revokedConflict(k); err != nil {
			return err
		}
		if e != nil {
			return addAdminEvent(ctx, tx, e)
		}
		return nil
	})
	if err != nil {
		return nil, s.wrap(op, err)
	}
	return k, nil
}

// encodeGuards is the guards column: NULL for none.
func encodeGuards(g *keybrake.Guards) []byte {
	if g.IsZero() {
		return nil
	}
	b, _ := json.Marshal(g) // plain structs: cannot fail
	return b
}

// revokedConflict is ECONFLICT for a revoked key.
func revokedConflict(k *keybrake.Key) error {
	if k.RevokedAt != nil {
		return keybrake.Errorf(keybrake.ECONFLICT, "Key %s was revoked at %s; revocation is final. Create a new key.", k.ID, k.RevokedAt.UTC().Format(time.RFC3339))
	}
	return nil
}

// truncate cuts s to n bytes, marking the cut.
func truncate(s string, n int) string {
	return keybrake.TruncateText(s, n)
}
