package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/keybrake/keybrake"
)

// keyUsableIn returns, inside tx, the error of Key.Usable for the key at
// now: an operation on a held object (confirm, capture) moves money, so a
// key suspended by its breaker on another replica, or revoked, must not
// act on one even while a key cache still holds it as it was. Returns
// ENOTFOUND for an unknown key.
func keyUsableIn(ctx context.Context, tx *sql.Tx, keyID string, now time.Time) error {
	var (
		k                           keybrake.Key
		expires, revoked, suspended sql.NullInt64
	)
	err := tx.QueryRowContext(ctx, `SELECT secret_prefix, expires_at, revoked_at, suspended_at, suspended_reason FROM keys WHERE id = ?`, keyID).
		Scan(&k.SecretPrefix, &expires, &revoked, &suspended, &k.SuspendedReason)
	if err != nil {
		return wrapKeyErr(err, "key %s", keyID)
	}
	k.ID = keyID
	k.ExpiresAt, k.RevokedAt, k.SuspendedAt = timePtr(expires), timePtr(revoked), timePtr(suspended)
	return k.Usable(now)
}
