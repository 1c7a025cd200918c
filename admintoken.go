package keybrake

import (
	"context"
	"time"
)

// Admin roles. An admin changes keys and tokens; a viewer only reads.
const (
	RoleAdmin  = "admin"
	RoleViewer = "viewer"
)

// AdminTokenPrefix starts every admin token keybrake generates.
const AdminTokenPrefix = "kbadm_"

// AdminToken is a named admin identity. The token itself is never stored;
// only TokenHash (hex SHA-256 of it) is.
type AdminToken struct {
	Name      string     `json:"name"`
	Role      string     `json:"role"`
	TokenHash string     `json:"-"`
	Prefix    string     `json:"token_prefix"` // first characters, to recognise it
	Source    string     `json:"source"`       // "store", "file" or "env"
	CreatedBy string     `json:"created_by,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at"`
}

// AdminEvent is one line of the admin audit log: who (Actor, the admin
// token's name) did what (Action) to which object (Target), or a failed
// admin authentication (Actor empty).
type AdminEvent struct {
	ID     int64     `json:"id"`
	Time   time.Time `json:"time"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"` // key.create, key.update, key.revoke, key.rotate, key.suspend, key.resume, token.create, token.revoke, auth.failed, auth.rate_limited
	Target string    `json:"target"`
	Detail string    `json:"detail"`
	Client string    `json:"client"` // the client address
}

// AdminEventFilter selects a page of admin events, newest first.
type AdminEventFilter struct {
	Limit         int   // 0 means 10
	StartingAfter int64 // the ID of the last event of the previous page
}

// AdminStore keeps admin tokens and the admin audit log. Both stores
// implement it.
type AdminStore interface {
	// CreateAdminToken stores t and appends e (when not nil, its ID set)
	// in the same transaction. Returns ECONFLICT if the name or hash is
	// taken (by a revoked token too: names are never reused), EINVALID for
	// an empty name or hash or an unknown role; then e is not written.
	CreateAdminToken(ctx context.Context, t *AdminToken, e *AdminEvent) error
	// FindAdminTokenByHash returns the token hashing to hash, revoked or
	// not. Returns ENOTFOUND if there is none.
	FindAdminTokenByHash(ctx context.Context, hash string) (*AdminToken, error)
	// FindAdminTokens returns every stored token, oldest first.
	FindAdminTokens(ctx context.Context) ([]*AdminToken, error)
	// RevokeAdminToken marks the named token revoked at now and appends e
	// (when not nil) in the same transaction; revoking twice keeps the
	// first time. Returns ENOTFOUND for an unknown name.
	RevokeAdminToken(ctx context.Context, name string, now time.Time, e *AdminEvent) (*AdminToken, error)
	// AddAdminEvent appends e, setting its ID.
	AddAdminEvent(ctx context.Context, e *AdminEvent) error
	// ChangeKey applies c to the key and appends c.Event in the same
	// transaction: the change is never visible without its event, and an
	// event that cannot be written leaves the key as it was. Each action
	// behaves as CreateKey (c.Create, whose ID must be id), SuspendKey,
	// ResumeKey, RevokeKey, RotateKey or UpdateKey, with their errors
	// (ENOTFOUND, ECONFLICT…), and appends the event even when the key was
	// already in the asked state; EINVALID for another action.
	ChangeKey(ctx context.Context, id string, c KeyChange) (*Key, error)
	// FindAdminEvents returns a page of admin events and whether more follow.
	FindAdminEvents(ctx context.Context, f AdminEventFilter) ([]*AdminEvent, bool, error)
}
