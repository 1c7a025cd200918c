package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
)

// keyColumns are the columns scanKey reads, in its order.
const keyColumns = `id, vendor, label, secret_hash, secret_prefix,
	per_request_cap, daily_cap, monthly_cap, total_cap,
	allowed_endpoints, allowed_customers, allowed_accounts, allowed_currencies,
	timezone, allow_unpriced, metadata, expires_at, revoked_at, created_at, updated_at,
	allow_secret_reads, guards, suspended_at, suspended_reason, COALESCE(prev_secret_hash, ''), prev_secret_until,
	parent_id, mint, approval, count_caps, scope, xmin::text`

// defaultKeyLimit is the page size of FindKeys when the filter sets none.
const defaultKeyLimit = 10

// CreateKey stores a new key. Returns EINVALID for a key without ID or
// secret hash, an unknown timezone or a negative cap, and ECONFLICT if the
// ID or the secret hash is already taken.
func (s *Store) CreateKey(ctx context.Context, k *keybrake.Key) error {
	return s.createKey(ctx, k.ID, k, nil)
}

// createKey is CreateKey appending e, when not nil, in the same
// transaction; id must be k's.
func (s *Store) createKey(ctx context.Context, id string, k *keybrake.Key, e *keybrake.AdminEvent) error {
	if k.ID != id {
		return keybrake.ErrorParam("id", "The key to create is %q, not %q.", k.ID, id)
	}
	if err := validateKey(k); err != nil {
		return err
	}
	if k.CreatedAt.IsZero() {
		k.CreatedAt = s.Now()
	}
	if k.UpdatedAt.IsZero() {
		k.UpdatedAt = k.CreatedAt
	}
	meta, err := encodeMetadata(k.Metadata)
	if err != nil {
		return err
	}
	const insert = `INSERT INTO keys (id, vendor, label, secret_hash, secret_prefix,
		per_request_cap, daily_cap, monthly_cap, total_cap,
		allowed_endpoints, allowed_customers, allowed_accounts, allowed_currencies,
		timezone, allow_unpriced, metadata, expires_at, revoked_at, created_at, updated_at,
		allow_secret_reads, guards, suspended_at, suspended_reason, parent_id, mint, approval, count_caps, scope)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29)`
	args := []any{k.ID, k.Vendor, k.Label, k.SecretHash, k.SecretPrefix,
		k.PerRequest, k.Daily, k.Monthly, k.Total,
		k.AllowedEndpoints, k.AllowedCustomers, k.AllowedAccounts, k.AllowedCurrencies,
		k.Timezone, k.AllowUnpriced, meta, tsPtr(k.ExpiresAt), tsPtr(k.RevokedAt), ts(k.CreatedAt), ts(k.UpdatedAt),
		k.AllowSecretReads, encodeGuards(k.Guards), tsPtr(k.SuspendedAt), k.SuspendedReason, k.ParentID, k.Mint, encodeApproval(k.Approval), encodeCountCaps(k.CountCaps), encodeScope(k)}
	if e == nil {
		_, err = s.pool.Exec(ctx, insert, args...)
		return s.wrap("create key "+k.ID, err)
	}
	return s.wrap("create key "+k.ID, s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, insert, args...); err != nil {
			return err
		}
		return addAdminEvent(ctx, tx, e)
	}))
}

// FindKeyByID returns the key. Returns ENOTFOUND if it does not exist.
func (s *Store) FindKeyByID(ctx context.Context, id string) (*keybrake.Key, error) {
	k, err := scanKey(s.pool.QueryRow(ctx, `SELECT `+keyColumns+` FROM keys WHERE id = $1`, id))
	if err != nil {
		return nil, s.wrap("find key "+id, notFound(err, "No such key: %s.", id))
	}
	return k, nil
}

// FindKeyBySecretHash returns the key whose vault key hashes to hash.
// Returns ENOTFOUND if there is none.
func (s *Store) FindKeyBySecretHash(ctx context.Context, hash string) (*keybrake.Key, error) {
	k, err := scanKey(s.pool.QueryRow(ctx, `SELECT `+keyColumns+` FROM keys WHERE secret_hash = $1
		UNION ALL SELECT `+keyColumns+` FROM keys WHERE prev_secret_hash = $1 LIMIT 1`, hash))
	if err != nil {
		return nil, s.wrap("find key by secret hash", notFound(err, "No such vault key."))
	}
	s.rememberZone(k) // reservation.go: its first reservation needs no lookup
	return k, nil
}

// FindKeys returns a page of keys, oldest first, and whether more follow.
// Returns EINVALID if StartingAfter names no key.
func (s *Store) FindKeys(ctx context.Context, f keybrake.KeyFilter) ([]*keybrake.Key, bool, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = defaultKeyLimit
	}
	var keys []*keybrake.Key
	var more bool
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var rows pgx.Rows
		var err error
		if f.StartingAfter == "" {
			rows, err = tx.Query(ctx, `SELECT `+keyColumns+` FROM keys ORDER BY created_at, seq LIMIT $1`, limit+1)
		} else {
			var exists bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM keys WHERE id = $1)`, f.StartingAfter).Scan(&exists); err != nil {
				return err
			}
			if !exists {
				return keybrake.ErrorParam("starting_after", "No such key: %s.", f.StartingAfter)
			}
			rows, err = tx.Query(ctx, `SELECT `+keyColumns+` FROM keys
				WHERE (created_at, seq) > (SELECT created_at, seq FROM keys WHERE id = $1)
				ORDER BY created_at, seq LIMIT $2`, f.StartingAfter, limit+1)
		}
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			k, err := scanKey(rows)
			if err != nil {
				return err
			}
			keys = append(keys, k)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, false, s.wrap("find keys", err)
	}
	if len(keys) > limit {
		keys, more = keys[:limit], true
	}
	return keys, more, nil
}

// UpdateKey applies upd and returns the updated key. Returns ENOTFOUND if
// the key does not exist and EINVALID for a negative cap. The key row is
// locked for the change, so it takes effect for the very next reservation on
// any replica.
func (s *Store) UpdateKey(ctx context.Context, id string, upd keybrake.KeyUpdate, now time.Time) (*keybrake.Key, error) {
	return s.updateKeyAudited(ctx, id, upd, now, nil)
}

// updateKeyAudited is UpdateKey appending e, when not nil, in the same
// transaction.
func (s *Store) updateKeyAudited(ctx context.Context, id string, upd keybrake.KeyUpdate, now time.Time, e *keybrake.AdminEvent) (*keybrake.Key, error) {
	var k *keybrake.Key
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		if k, err = lockKey(ctx, tx, id); err != nil {
			return err
		}
		k.Apply(upd)
		k.UpdatedAt = now
		if err := validateKey(k); err != nil {
			return err
		}
		meta, err := encodeMetadata(k.Metadata)
		if err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `UPDATE keys SET label = $2,
			per_request_cap = $3, daily_cap = $4, monthly_cap = $5, total_cap = $6,
			allowed_endpoints = $7, allowed_customers = $8, allowed_accounts = $9, allowed_currencies = $10,
			allow_unpriced = $11, metadata = $12, expires_at = $13, updated_at = $14,
			allow_secret_reads = $15, guards = $16, mint = $17, approval = $18, count_caps = $19, scope = $20
			WHERE id = $1 RETURNING xmin::text`,
			id, k.Label, k.PerRequest, k.Daily, k.Monthly, k.Total,
			k.AllowedEndpoints, k.AllowedCustomers, k.AllowedAccounts, k.AllowedCurrencies,
			k.AllowUnpriced, meta, tsPtr(k.ExpiresAt), ts(k.UpdatedAt),
			k.AllowSecretReads, encodeGuards(k.Guards), k.Mint, encodeApproval(k.Approval), encodeCountCaps(k.CountCaps), encodeScope(k)).Scan(&k.Version)
		if err != nil || e == nil {
			return err
		}
		return addAdminEvent(ctx, tx, e)
	})
	if err != nil {
		return nil, s.wrap("update key "+id, err)
	}
	return normalizeKeyTimes(k), nil
}

// RevokeKey marks the key revoked at now; revoking twice keeps the first
// time. Returns ENOTFOUND if the key does not exist.
func (s *Store) RevokeKey(ctx context.Context, id string, now time.Time) (*keybrake.Key, error) {
	return s.revokeKey(ctx, id, now, nil)
}

// revokeKey is RevokeKey appending e, when not nil, in the same
// transaction.
func (s *Store) revokeKey(ctx context.Context, id string, now time.Time, e *keybrake.AdminEvent) (*keybrake.Key, error) {
	// The key's descendants are revoked in the same statement (delegate.go).
	const revoke = `WITH RECURSIVE d(id) AS (
			SELECT id FROM keys WHERE parent_id = $1
			UNION SELECT c.id FROM keys c JOIN d ON c.parent_id = d.id),
		children AS (UPDATE keys SET revoked_at = $2, updated_at = $2 WHERE id IN (SELECT id FROM d) AND revoked_at IS NULL)
		UPDATE keys
		SET revoked_at = COALESCE(revoked_at, $2),
		    updated_at = CASE WHEN revoked_at IS NULL THEN $2 ELSE updated_at END
		WHERE id = $1 RETURNING ` + keyColumns
	var k *keybrake.Key
	err := s.inTx(ctx, func(tx pgx.Tx) (err error) {
		if k, err = scanKey(tx.QueryRow(ctx, revoke, id, ts(now))); err != nil || e == nil {
			return notFound(err, "No such key: %s.", id)
		}
		return addAdminEvent(ctx, tx, e)
	})
	if err != nil {
		return nil, s.wrap("revoke key "+id, err)
	}
	return k, nil
}

// lockKey reads the key and takes its row lock until tx ends: the one lock
// that serialises everything touching the key's caps and spend.
func lockKey(ctx context.Context, tx pgx.Tx, id string) (*keybrake.Key, error) {
	k, err := scanKey(tx.QueryRow(ctx, `SELECT `+keyColumns+` FROM keys WHERE id = $1 FOR UPDATE`, id))
	if err != nil {
		return nil, notFound(err, "No such key: %s.", id)
	}
	return k, nil
}

func validateKey(k *keybrake.Key) error {
	if k.ID == "" {
		return keybrake.ErrorParam("id", "A key needs an ID.")
	}
	if k.SecretHash == "" {
		return keybrake.ErrorParam("secret_hash", "A key needs a secret hash.")
	}
	if _, err := k.Location(); err != nil {
		return err
	}
	for _, c := range []struct {
		param string
		cap   *keybrake.Micros
	}{
		{"per_request_usd_cap", k.PerRequest},
		{"daily_usd_cap", k.Daily},
		{"monthly_usd_cap", k.Monthly},
		{"total_usd_cap", k.Total},
	} {
		if c.cap != nil && *c.cap < 0 {
			return keybrake.ErrorParam(c.param, "A cap cannot be negative.")
		}
	}
	return nil
}

// scanKey reads one row of keyColumns.
func scanKey(row pgx.Row) (*keybrake.Key, error) {
	var k keybrake.Key
	var meta, guards, approval, countCaps, scope []byte
	err := row.Scan(&k.ID, &k.Vendor, &k.Label, &k.SecretHash, &k.SecretPrefix,
		&k.PerRequest, &k.Daily, &k.Monthly, &k.Total,
		&k.AllowedEndpoints, &k.AllowedCustomers, &k.AllowedAccounts, &k.AllowedCurrencies,
		&k.Timezone, &k.AllowUnpriced, &meta, &k.ExpiresAt, &k.RevokedAt, &k.CreatedAt, &k.UpdatedAt,
		&k.AllowSecretReads, &guards, &k.SuspendedAt, &k.SuspendedReason, &k.PreviousSecretHash, &k.PreviousSecretExpiresAt,
		&k.ParentID, &k.Mint, &approval, &countCaps, &scope, &k.Version)
	if err != nil {
		return nil, err
	}
	if scope != nil {
		var sc keybrake.Scope
		if err := json.Unmarshal(scope, &sc); err != nil {
			return nil, fmt.Errorf("key %s: scope: %w", k.ID, err)
		}
		k.SetScope(&sc)
	}
	if countCaps != nil {
		if err := json.Unmarshal(countCaps, &k.CountCaps); err != nil {
			return nil, fmt.Errorf("key %s: count caps: %w", k.ID, err)
		}
	}
	if approval != nil {
		if err := json.Unmarshal(approval, &k.Approval); err != nil {
			return nil, fmt.Errorf("key %s: approval: %w", k.ID, err)
		}
	}
	if guards != nil {
		if err := json.Unmarshal(guards, &k.Guards); err != nil {
			return nil, fmt.Errorf("key %s: guards: %w", k.ID, err)
		}
	}
	if meta != nil {
		if err := json.Unmarshal(meta, &k.Metadata); err != nil {
			return nil, fmt.Errorf("key %s: metadata: %w", k.ID, err)
		}
	}
	return normalizeKeyTimes(&k), nil
}

// normalizeKeyTimes returns k with its times as the store keeps them.
func normalizeKeyTimes(k *keybrake.Key) *keybrake.Key {
	k.CreatedAt, k.UpdatedAt = ts(k.CreatedAt), ts(k.UpdatedAt)
	k.ExpiresAt, k.RevokedAt = tsPtr(k.ExpiresAt), tsPtr(k.RevokedAt)
	k.SuspendedAt, k.PreviousSecretExpiresAt = tsPtr(k.SuspendedAt), tsPtr(k.PreviousSecretExpiresAt)
	return k
}

// encodeMetadata returns m as jsonb, or nil (SQL NULL) for a nil map so that
// nil and empty metadata stay distinct.
func encodeMetadata(m map[string]string) ([]byte, error) {
	if m == nil {
		return nil, nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	return b, nil
}

// notFound turns pgx.ErrNoRows into ENOTFOUND with a message; other errors
// pass through.
func notFound(err error, format string, args ...any) error {
	if err == pgx.ErrNoRows {
		return keybrake.Errorf(keybrake.ENOTFOUND, format, args...)
	}
	return err
}
