package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
)

// keyUsableTx returns, inside tx, the error of Key.Usable for the key at
// now: an operation on a held object (confirm, capture) moves money, so a
// key suspended by its breaker on another replica, or revoked, must not
// act on one even while this replica's key cache still holds it as it
// was. Returns ENOTFOUND for an unknown key.
func keyUsableTx(ctx context.Context, tx pgx.Tx, keyID string, now time.Time) error {
	var k keybrake.Key
	err := tx.QueryRow(ctx, `SELECT secret_prefix, expires_at, revoked_at, suspended_at, suspended_reason FROM keys WHERE id = $1`, keyID).
		Scan(&k.SecretPrefix, &k.ExpiresAt, &k.RevokedAt, &k.SuspendedAt, &k.SuspendedReason)
	if err != nil {
		return notFound(err, "No such key: %s.", keyID)
	}
	k.ID = keyID
	return k.Usable(now)
}
