package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
)

var _ keybrake.KeyLifecycleService = (*Store)(nil)

// RotateKey gives the key a new secret (see keybrake.KeyLifecycleService).
func (s *Store) RotateKey(ctx context.Context, id string, args keybrake.RotateArgs) (*keybrake.Key, error) {
	return s.changeLifecycle(ctx, id, "rotate", &args, args.Now, nil)
}

// changeLifecycle applies the action to the key and appends e, when not
// nil, in the same transaction.
func (s *Store) changeLifecycle(ctx context.Context, id, action string, args *keybrake.RotateArgs, now time.Time, e *keybrake.AdminEvent) (*keybrake.Key, error) {
	var k *keybrake.Key
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		if k, err = lockKey(ctx, tx, id); err != nil {
			return err
		}
		if err := k.ChangeLifecycle(action, args, ts(now)); err != nil {
			return err
		}
		var prev *string
		if k.PreviousSecretHash != "" {
			prev = &k.PreviousSecretHash
		}
		err = tx.QueryRow(ctx, `UPDATE keys SET secret_hash = $2, secret_prefix = $3, prev_secret_hash = $4,
			prev_secret_until = $5, suspended_at = $6, updated_at = $7 WHERE id = $1 RETURNING xmin::text`,
			id, k.SecretHash, k.SecretPrefix, prev, tsPtr(k.PreviousSecretExpiresAt), tsPtr(k.SuspendedAt), ts(k.UpdatedAt)).Scan(&k.Version)
		if err != nil || e == nil {
			return err
		}
		return addAdminEvent(ctx, tx, e)
	})
	if err != nil {
		return nil, s.wrap(action+" key "+id, err)
	}
	return normalizeKeyTimes(k), nil
}
