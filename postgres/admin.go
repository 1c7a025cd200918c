package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
)

var _ keybrake.AdminStore = (*Store)(nil)

const adminTokenColumns = `name, role, token_hash, prefix, created_by, created_at, revoked_at`

// CreateAdminToken stores t. Returns ECONFLICT if the name or hash is
// taken, EINVALID for an empty name or hash or an unknown role.
func (s *Store) CreateAdminToken(ctx context.Context, t *keybrake.AdminToken, e *keybrake.AdminEvent) error {
	switch {
	case t.Name == "":
		return keybrake.ErrorParam("name", "An admin token needs a name.")
	case t.TokenHash == "":
		return keybrake.ErrorParam("token_hash", "An admin token needs a hash.")
	case t.Role != keybrake.RoleAdmin && t.Role != keybrake.RoleViewer:
		return keybrake.ErrorParam("role", "Unknown role %q.", t.Role)
	}
	t.Source = "store"
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO admin_tokens (`+adminTokenColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			t.Name, t.Role, t.TokenHash, t.Prefix, t.CreatedBy, t.CreatedAt, t.RevokedAt); err != nil || e == nil {
			return err
		}
		return addAdminEvent(ctx, tx, e)
	})
	if err != nil && pgCode(err) == "23505" {
		return keybrake.ErrorParam("name", "An admin token named %q exists or existed; names are not reused.", t.Name)
	}
	return s.wrap("create admin token "+t.Name, err)
}

// FindAdminTokenByHash returns the token hashing to hash. Returns
// ENOTFOUND if there is none.
func (s *Store) FindAdminTokenByHash(ctx context.Context, hash string) (*keybrake.AdminToken, error) {
	t, err := scanAdminToken(s.pool.QueryRow(ctx, `SELECT `+adminTokenColumns+` FROM admin_tokens WHERE token_hash = $1`, hash))
	if err != nil {
		return nil, s.wrap("find admin token", err)
	}
	return t, nil
}

// FindAdminTokens returns every stored token, oldest first.
func (s *Store) FindAdminTokens(ctx context.Context) ([]*keybrake.AdminToken, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+adminTokenColumns+` FROM admin_tokens ORDER BY created_at, name`)
	if err != nil {
		return nil, s.wrap("find admin tokens", err)
	}
	defer rows.Close()
	var out []*keybrake.AdminToken
	for rows.Next() {
		t, err := scanAdminToken(rows)
		if err != nil {
			return nil, s.wrap("find admin tokens", err)
		}
		out = append(out, t)
	}
	return out, s.wrap("find admin tokens", rows.Err())
}

// RevokeAdminToken marks the token revoked at now, keeping an earlier
// revocation. Returns ENOTFOUND for an unknown name.
func (s *Store) RevokeAdminToken(ctx context.Context, name string, now time.Time, e *keybrake.AdminEvent) (*keybrake.AdminToken, error) {
	var t *keybrake.AdminToken
	err := s.inTx(ctx, func(tx pgx.Tx) (err error) {
		t, err = scanAdminToken(tx.QueryRow(ctx, `UPDATE admin_tokens SET revoked_at = COALESCE(revoked_at, $2)
			WHERE name = $1 RETURNING `+adminTokenColumns, name, now))
		if err != nil || e == nil {
			return err
		}
		return addAdminEvent(ctx, tx, e)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, keybrake.Errorf(keybrake.ENOTFOUND, "No admin token named %q.", name)
	}
	if err != nil {
		return nil, s.wrap("revoke admin token "+name, err)
	}
	return t, nil
}

func scanAdminToken(row pgx.Row) (*keybrake.AdminToken, error) {
	t := &keybrake.AdminToken{Source: "store"}
	if err := row.Scan(&t.Name, &t.Role, &t.TokenHash, &t.Prefix, &t.CreatedBy, &t.CreatedAt, &t.RevokedAt); err != nil {
		return nil, err
	}
	t.CreatedAt = t.CreatedAt.UTC()
	if t.RevokedAt != nil {
		r := t.RevokedAt.UTC()
		t.RevokedAt = &r
	}
	return t, nil
}

// AddAdminEvent appends e, setting its ID.
func (s *Store) AddAdminEvent(ctx context.Context, e *keybrake.AdminEvent) error {
	return s.wrap("add admin event", addAdminEvent(ctx, s.pool, e))
}

// querier is a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// addAdminEvent appends e through q, setting its ID.
func addAdminEvent(ctx context.Context, q querier, e *keybrake.AdminEvent) error {
	return q.QueryRow(ctx, `INSERT INTO admin_events (time, actor, action, target, detail, client) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`,
		e.Time, e.Actor, e.Action, e.Target, e.Detail, e.Client).Scan(&e.ID)
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
	rows, err := s.pool.Query(ctx, `SELECT id, time, actor, action, target, detail, client FROM admin_events
		WHERE id < $1 ORDER BY id DESC LIMIT $2`, before, limit+1)
	if err != nil {
		return nil, false, s.wrap("find admin events", err)
	}
	defer rows.Close()
	var out []*keybrake.AdminEvent
	for rows.Next() {
		e := &keybrake.AdminEvent{}
		if err := rows.Scan(&e.ID, &e.Time, &e.Actor, &e.Action, &e.Target, &e.Detail, &e.Client); err != nil {
			return nil, false, s.wrap("find admin events", err)
		}
		e.Time = e.Time.UTC()
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, false, s.wrap("find admin events", err)
	}
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	return out, more, nil
}
