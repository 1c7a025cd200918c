package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/keybrake/keybrake"
)

// keyColumns lists the keys table's columns in the order scanKey reads them.
const keyColumns = `id, vendor, label, secret_hash, secret_prefix,
	cap_per_request, cap_daily, cap_monthly, cap_total,
	allowed_endpoints, allowed_customers, allowed_accounts, allowed_currencies,
	timezone, allow_unpriced, metadata, expires_at, revoked_at, created_at, updated_at,
	allow_secret_reads, guards, suspended_at, suspended_reason, prev_secret_hash, prev_secret_until,
	parent_id, mint, approval, count_caps, scope`

// keySelect is keyColumns and the row's version (0033), which no INSERT
// names: a trigger bumps it on every UPDATE of the row. scanKey reads it.
const keySelect = keyColumns + `, version`

// Key lookups prepared at Open: every proxied request authenticates by hash.
const (
	qKeyByID   = `SELECT ` + keySelect + ` FROM keys WHERE id = ?`
	qKeyByHash = `SELECT ` + keySelect + ` FROM keys WHERE secret_hash = ?1 OR prev_secret_hash = ?1`
)

// CreateKey stores a new key. A zero CreatedAt is set from the store's
// clock, a zero UpdatedAt to CreatedAt. Returns ECONFLICT if the ID or the
// secret hash is taken, EINVALID for a missing ID or hash or an unknown
// timezone.
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
		k.CreatedAt = s.now()
	}
	if k.UpdatedAt.IsZero() {
		k.UpdatedAt = k.CreatedAt
	}
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()

	args, err := keyArgs(k)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO keys (`+keyColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, args...); err != nil {
		if isUnique(err) {
			return keybrake.Errorf(keybrake.ECONFLICT, "A key with this ID or secret already exists.")
		}
		return wrap(err, "create key %s", k.ID)
	}
	if e != nil {
		if err := addAdminEventIn(ctx, tx, e); err != nil {
			return err
		}
	}
	return wrap(tx.Commit(), "create key %s", k.ID)
}

// validateKey checks what the store relies on: an ID, a secret hash and a
// zone Reserve can compute buckets in.
func validateKey(k *keybrake.Key) error {
	if k.ID == "" {
		return keybrake.ErrorParam("id", "A key needs an ID.")
	}
	if k.SecretHash == "" {
		return keybrake.ErrorParam("secret_hash", "A key needs a secret hash.")
	}
	if _, err := location(k.Timezone); err != nil {
		return err
	}
	return nil
}

// FindKeyByID returns the key. Returns ENOTFOUND if it does not exist.
func (s *Store) FindKeyByID(ctx context.Context, id string) (*keybrake.Key, error) {
	k, err := scanKey(s.queryRow(ctx, qKeyByID, id))
	if err != nil {
		return nil, wrapKeyErr(err, "find key %s", id)
	}
	return k, nil
}

// FindKeyBySecretHash returns the key whose vault key hashes to hash.
// Returns ENOTFOUND if there is none.
func (s *Store) FindKeyBySecretHash(ctx context.Context, hash string) (*keybrake.Key, error) {
	k, err := scanKey(s.queryRow(ctx, qKeyByHash, hash))
	if err != nil {
		return nil, wrapKeyErr(err, "find key by hash")
	}
	return k, nil
}

// FindKeys returns a page of keys, oldest first, and whether more follow.
// Returns EINVALID if StartingAfter names no key.
func (s *Store) FindKeys(ctx context.Context, f keybrake.KeyFilter) ([]*keybrake.Key, bool, error) {
	limit := f.Limit
	if limit < 0 {
		return nil, false, keybrake.ErrorParam("limit", "limit must not be negative")
	} else if limit == 0 {
		limit = 10
	}
	var after struct {
		created int64
		id      string
	}
	after.created = -1 << 63
	if f.StartingAfter != "" {
		err := s.reader.QueryRowContext(ctx, `SELECT created_at, id FROM keys WHERE id = ?`, f.StartingAfter).Scan(&after.created, &after.id)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, false, keybrake.ErrorParam("starting_after", "No key %q to start after.", f.StartingAfter)
		} else if err != nil {
			return nil, false, wrap(err, "find keys")
		}
	}
	rows, err := s.reader.QueryContext(ctx, `SELECT `+keySelect+` FROM keys
		WHERE (created_at, id) > (?, ?) ORDER BY created_at, id LIMIT ?`, after.created, after.id, limit+1)
	if err != nil {
		return nil, false, wrap(err, "find keys")
	}
	defer rows.Close()
	var keys []*keybrake.Key
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, false, wrap(err, "find keys")
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, false, wrap(err, "find keys")
	}
	if len(keys) > limit {
		return keys[:limit], true, nil
	}
	return keys, false, nil
}

// UpdateKey applies upd and returns the updated key. Returns ENOTFOUND if
// the key does not exist.
func (s *Store) UpdateKey(ctx context.Context, id string, upd keybrake.KeyUpdate, now time.Time) (*keybrake.Key, error) {
	return s.updateKeyAudited(ctx, id, upd, now, nil)
}

// updateKeyAudited is UpdateKey appending e, when not nil, in the same
// transaction.
func (s *Store) updateKeyAudited(ctx context.Context, id string, upd keybrake.KeyUpdate, now time.Time, e *keybrake.AdminEvent) (*keybrake.Key, error) {
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()

	k, err := scanKey(s.txQueryRow(ctx, tx, qKeyByID, id))
	if err != nil {
		return nil, wrapKeyErr(err, "update key %s", id)
	}
	k.Apply(upd)
	k.UpdatedAt = now
	normalizeKey(k)
	if err := updateKey(ctx, tx, k); err != nil {
		return nil, err
	}
	if e != nil {
		if err := addAdminEventIn(ctx, tx, e); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, wrap(err, "update key %s", id)
	}
	s.notifyKey(id)
	return k, nil
}

// RevokeKey marks the key revoked at now; revoking twice keeps the first
// time. Returns ENOTFOUND if the key does not exist.
func (s *Store) RevokeKey(ctx context.Context, id string, now time.Time) (*keybrake.Key, error) {
	return s.revokeKey(ctx, id, now, nil)
}

// revokeKey is RevokeKey appending e, when not nil, in the same
// transaction.
func (s *Store) revokeKey(ctx context.Context, id string, now time.Time, e *keybrake.AdminEvent) (*keybrake.Key, error) {
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()

	k, err := scanKey(s.txQueryRow(ctx, tx, qKeyByID, id))
	if err != nil {
		return nil, wrapKeyErr(err, "revoke key %s", id)
	}
	if k.RevokedAt != nil && e == nil {
		return k, nil
	}
	var children []string
	if k.RevokedAt == nil {
		at := dbTime(now)
		k.RevokedAt, k.UpdatedAt = &at, at
		if err := updateKey(ctx, tx, k); err != nil {
			return nil, err
		}
		if children, err = revokeDescendants(ctx, tx, id, at); err != nil { // delegate.go
			return nil, err
		}
	}
	if e != nil {
		if err := addAdminEventIn(ctx, tx, e); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, wrap(err, "revoke key %s", id)
	}
	s.notifyKey(id)
	for _, c := range children {
		s.notifyKey(c)
	}
	return k, nil
}

// normalizeKey rounds k's times to what the database keeps: microseconds,
// in UTC, so a returned key equals the stored one.
func normalizeKey(k *keybrake.Key) {
	k.CreatedAt, k.UpdatedAt = dbTime(k.CreatedAt), dbTime(k.UpdatedAt)
	for _, p := range []**time.Time{&k.ExpiresAt, &k.RevokedAt, &k.SuspendedAt, &k.PreviousSecretExpiresAt} {
		if *p != nil {
			t := dbTime(**p)
			*p = &t
		}
	}
}

// dbTime is t as it reads back from the database.
func dbTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return fromMicros(t.UnixMicro())
}

// updateKey writes every mutable column of k and sets k.Version to the
// version the update gave the row (0033's trigger; RETURNING would not
// see it).
func updateKey(ctx context.Context, tx *sql.Tx, k *keybrake.Key) error {
	args, err := keyArgs(k)
	if err != nil {
		return err
	}
	// keyArgs starts with id, vendor, label, secret_hash, secret_prefix.
	if _, err := tx.ExecContext(ctx, `UPDATE keys SET label = ?3,
		cap_per_request = ?6, cap_daily = ?7, cap_monthly = ?8, cap_total = ?9,
		allowed_endpoints = ?10, allowed_customers = ?11, allowed_accounts = ?12, allowed_currencies = ?13,
		allow_unpriced = ?15, metadata = ?16, expires_at = ?17, revoked_at = ?18, updated_at = ?20,
		allow_secret_reads = ?21, guards = ?22, suspended_at = ?23, suspended_reason = ?24,
		secret_hash = ?4, secret_prefix = ?5, prev_secret_hash = ?25, prev_secret_until = ?26,
		mint = ?28, approval = ?29, count_caps = ?30, scope = ?31
		WHERE id = ?1`, args...); err != nil {
		return wrap(err, "update key %s", k.ID)
	}
	var v int64
	if err := tx.QueryRowContext(ctx, `SELECT version FROM keys WHERE id = ?`, k.ID).Scan(&v); err != nil {
		return wrap(err, "update key %s: read its version", k.ID)
	}
	k.Version = strconv.FormatInt(v, 10)
	return nil
}

// keyArgs returns k's column values in keyColumns order.
func keyArgs(k *keybrake.Key) ([]any, error) {
	lists := make([]string, 0, 5)
	for _, l := range [][]string{k.AllowedEndpoints, k.AllowedCustomers, k.AllowedAccounts, k.AllowedCurrencies} {
		b, err := json.Marshal(l)
		if err != nil {
			return nil, fmt.Errorf("sqlite: encode key %s: %w", k.ID, err)
		}
		lists = append(lists, string(b))
	}
	meta, err := json.Marshal(k.Metadata)
	if err != nil {
		return nil, fmt.Errorf("sqlite: encode key %s: %w", k.ID, err)
	}
	return []any{k.ID, k.Vendor, k.Label, k.SecretHash, k.SecretPrefix,
		nullMicros(k.PerRequest), nullMicros(k.Daily), nullMicros(k.Monthly), nullMicros(k.Total),
		lists[0], lists[1], lists[2], lists[3],
		k.Timezone, k.AllowUnpriced, string(meta),
		nullTime(k.ExpiresAt), nullTime(k.RevokedAt), k.CreatedAt.UnixMicro(), k.UpdatedAt.UnixMicro(),
		k.AllowSecretReads, encodeGuards(k.Guards), nullTime(k.SuspendedAt), k.SuspendedReason, nullString(k.PreviousSecretHash), nullTime(k.PreviousSecretExpiresAt),
		k.ParentID, k.Mint, encodeApproval(k.Approval), encodeCountCaps(k.CountCaps), encodeScope(k),
	}, nil
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

// scanKey reads one row of keySelect.
func scanKey(row scanner) (*keybrake.Key, error) {
	var (
		k                    keybrake.Key
		caps                 [4]sql.NullInt64
		lists                [4]string
		meta                 string
		expires, revoked     sql.NullInt64
		suspended, prevUntil sql.NullInt64
		prevHash             sql.NullString
		created, updated     int64
		guards               string
		approval             string
		countCaps            string
		scope                string
		version              int64
	)
	capPtrs := []**keybrake.Micros{&k.PerRequest, &k.Daily, &k.Monthly, &k.Total}
	listPtrs := []*[]string{&k.AllowedEndpoints, &k.AllowedCustomers, &k.AllowedAccounts, &k.AllowedCurrencies}
	if err := row.Scan(&k.ID, &k.Vendor, &k.Label, &k.SecretHash, &k.SecretPrefix,
		&caps[0], &caps[1], &caps[2], &caps[3],
		&lists[0], &lists[1], &lists[2], &lists[3],
		&k.Timezone, &k.AllowUnpriced, &meta, &expires, &revoked, &created, &updated,
		&k.AllowSecretReads, &guards, &suspended, &k.SuspendedReason, &prevHash, &prevUntil,
		&k.ParentID, &k.Mint, &approval, &countCaps, &scope, &version); err != nil {
		return nil, err
	}
	k.Version = strconv.FormatInt(version, 10)
	if err := decodeScope(scope, &k); err != nil {
		return nil, fmt.Errorf("decode key %s scope: %w", k.ID, err)
	}
	if err := decodeCountCaps(countCaps, &k.CountCaps); err != nil {
		return nil, fmt.Errorf("decode key %s count caps: %w", k.ID, err)
	}
	if err := decodeApproval(approval, &k.Approval); err != nil {
		return nil, fmt.Errorf("decode key %s approval: %w", k.ID, err)
	}
	g, err := decodeGuards(guards)
	if err != nil {
		return nil, fmt.Errorf("decode key %s guards: %w", k.ID, err)
	}
	k.Guards, k.SuspendedAt = g, timePtr(suspended)
	k.PreviousSecretHash, k.PreviousSecretExpiresAt = prevHash.String, timePtr(prevUntil)
	for i, c := range caps {
		if c.Valid {
			m := keybrake.Micros(c.Int64)
			*capPtrs[i] = &m
		}
	}
	for i, l := range lists {
		if err := json.Unmarshal([]byte(l), listPtrs[i]); err != nil {
			return nil, fmt.Errorf("decode key %s lists: %w", k.ID, err)
		}
	}
	if err := json.Unmarshal([]byte(meta), &k.Metadata); err != nil {
		return nil, fmt.Errorf("decode key %s metadata: %w", k.ID, err)
	}
	k.ExpiresAt, k.RevokedAt = timePtr(expires), timePtr(revoked)
	k.CreatedAt, k.UpdatedAt = fromMicros(created), fromMicros(updated)
	return &k, nil
}

// wrapKeyErr maps "no row" to ENOTFOUND.
func wrapKeyErr(err error, format string, args ...any) error {
	if errors.Is(err, sql.ErrNoRows) {
		return keybrake.Errorf(keybrake.ENOTFOUND, "No such key.")
	}
	return wrap(err, format, args...)
}

// locations caches loaded zones: time.LoadLocation reads the zone database
// on every call, too slow for every Reserve.
var locations sync.Map // string -> *time.Location

// location returns the zone named tz (UTC for ""), or EINVALID.
func location(tz string) (*time.Location, error) {
	if tz == "" || tz == "UTC" {
		return time.UTC, nil
	}
	if loc, ok := locations.Load(tz); ok {
		return loc.(*time.Location), nil
	}
	k := keybrake.Key{Timezone: tz}
	loc, err := k.Location()
	if err != nil {
		return nil, err
	}
	locations.Store(tz, loc)
	return loc, nil
}

func nullMicros(m *keybrake.Micros) any {
	if m == nil {
		return nil
	}
	return int64(*m)
}

func nullTime(t *time.Time) any {
	if t == nil || t.IsZero() {
		return nil
	}
	return t.UnixMicro()
}

func timePtr(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMicros(v.Int64)
	return &t
}

// fromMicros is the inverse of time.Time.UnixMicro, in UTC.
func fromMicros(us int64) time.Time {
	return time.UnixMicro(us).UTC()
}

func nullString(v string) any {
	if v == "" {
		return nil
	}
	return v
}
