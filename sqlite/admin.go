package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"time"

	"github.com/keybrake/keybrake"
)

var _ keybrake.AdminStore = (*Store)(nil)

const adminTokenColumns = `name, role, token_hash, prefix, created_by, created_at, revoked_at`

// CreateAdminToken stores t. Returns ECONFLICT if the name or hash is
// taken, EINVALID for an empty name or hash or an unknown role.
func (s *Store) CreateAdminToken(ctx context.Context, t *keybrake.AdminToken, e *keybrake.AdminEvent) error {
	if err := validateAdminToken(t); err != nil {
		return err
	}
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	t.Source = "store"
	if _, err := tx.ExecContext(ctx, `INSERT INTO admin_tokens (`+adminTokenColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		t.Name, t.Role, t.TokenHash, t.Prefix, t.CreatedBy, t.CreatedAt.UnixMicro(), nullTime(t.RevokedAt)); err != nil {
		if isUnique(err) {
			return keybrake.ErrorParam("name", "An admin token named %q exists or existed; names are not reused.", t.Name)
		}
		return wrap(err, "create admin token %s", t.Name)
	}
	if e != nil {
		if err := addAdminEventIn(ctx, tx, e); err != nil {
			return err
		}
	}
	return wrap(tx.Commit(), "create admin token %s", t.Name)
}

func validateAdminToken(t *keybrake.AdminToken) error {
	switch {
	case t.Name == "":
		return keybrake.ErrorParam("name", "An admin token needs a name.")
	case t.TokenHash == "":
		return keybrake.ErrorParam("token_hash", "An admin token needs a hash.")
	case t.Role != keybrake.RoleAdmin && t.Role != keybrake.RoleViewer:
		return keybrake.ErrorParam("role", "Unknown role %q.", t.Role)
	}
	return nil
}

// FindAdminTokenByHash returns the token hashing to hash. Returns
// ENOTFOUND if there is none.
func (s *Store) FindAdminTokenByHash(ctx context.Context, hash string) (*keybrake.AdminToken, error) {
	t, err := scanAdminToken(s.reader.QueryRowContext(ctx, `SELECT `+adminTokenColumns+` FROM admin_tokens WHERE token_hash = ?`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, keybrake.Errorf(keybrake.ENOTFOUND, "No such admin token.")
	}
	return t, wrap(err, "find admin token")
}

// FindAdminTokens returns every stored token, oldest first.
func (s *Store) FindAdminTokens(ctx context.Context) ([]*keybrake.AdminToken, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+adminTokenColumns+` FROM admin_tokens ORDER BY created_at, name`)
	if err != nil {
		return nil, wrap(err, "find admin tokens")
	}
	defer rows.Close()
	var out []*keybrake.AdminToken
	for rows.Next() {
		t, err := scanAdminToken(rows)
		if err != nil {
			return nil, wrap(err, "find admin tokens")
		}
		out = append(out, t)
	}
	return out, wrap(rows.Err(), "find admin tokens")
}

// RevokeAdminToken marks the token revoked at now, keeping an earlier
// revocation. Returns ENOTFOUND for an unknown name.
func (s *Store) RevokeAdminToken(ctx context.Context, name string, now time.Time, e *keybrake.AdminEvent) (*keybrake.AdminToken, error) {
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE admin_tokens SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL`, now.UnixMicro(), name); err != nil {
		return nil, wrap(err, "revoke admin token %s", name)
	}
	t, err := scanAdminToken(tx.QueryRowContext(ctx, `SELECT `+adminTokenColumns+` FROM admin_tokens WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, keybrake.Errorf(keybrake.ENOTFOUND, "No admin token named %q.", name)
	} else if err != nil {
		return nil, wrap(err, "revoke admin token %s", name)
	}
	if e != nil {
		if err := addAdminEventIn(ctx, tx, e); err != nil {
			return nil, err
		}
	}
	return t, wrap(tx.Commit(), "revoke admin token %s", name)
}

func scanAdminToken(row scanner) (*keybrake.AdminToken, error) {
	t := &keybrake.AdminToken{Source: "store"}
	var created int64
	var revoked sql.NullInt64
	if err := row.Scan(&t.Name, &t.Role, &t.TokenHash, &t.Prefix, &t.CreatedBy, &created, &revoked); err != nil {
		return nil, err
	}
	t.CreatedAt, t.RevokedAt = fromMicros(created), timePtr(revoked)
	return t, nil
}

// AddAdminEvent appends e, setting its ID.
func (s *Store) AddAdminEvent(ctx context.Context, e *keybrake.AdminEvent) error {
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := addAdminEventIn(ctx, tx, e); err != nil {
		return err
	}
	return wrap(tx.Commit(), "add admin event")
}

// addAdminEventIn appends e inside tx, setting its ID.
func addAdminEventIn(ctx context.Context, tx *sql.Tx, e *keybrake.AdminEvent) error {
	res, err := tx.ExecContext(ctx, `INSERT INTO admin_events (time, actor, action, target, detail, client) VALUES (?, ?, ?, ?, ?, ?)`,
		e.Time.UnixMicro(), e.Actor, e.Action, e.Target, e.Detail, e.Client)
	if err != nil {
		return wrap(err, "add admin event")
	}
	e.ID, err = res.LastInsertId()
	return wrap(err, "add admin event")
}

// FindAdminEvents returns a page of admin events, newest first.
func (s *Store) FindAdminEvents(ctx context.Context, f keybrake.AdminEventFilter) ([]*keybrake.AdminEvent, bool, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 10
	}
	before := f.StartingAfter
	if before <= 0 {
		before = 1<<63 - 1
	}
	rows, err := s.reader.QueryContext(ctx, `SELECT id, time, actor, action, target, detail, client FROM admin_events
		WHERE id < ? ORDER BY id DESC LIMIT ?`, before, limit+1)
	if err != nil {
		return nil, false, wrap(err, "find admin events")
	}
	defer rows.Close()
	var out []*keybrake.AdminEvent
	for rows.Next() {
		e := &keybrake.AdminEvent{}
		var t int64
		if err := rows.Scan(&e.ID, &t, &e.Actor, &e.Action, &e.Target, &e.Detail, &e.Client); err != nil {
			return nil, false, wrap(err, "find admin events")
		}
		e.Time = fromMicros(t)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, false, wrap(err, "find admin events")
	}
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	return out, more, nil
}
