package sqlite

import (
	"context"
	"time"

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
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()

	k, err := scanKey(s.txQueryRow(ctx, tx, qKeyByID, id))
	if err != nil {
		return nil, wrapKeyErr(err, "%s key %s", action, id)
	}
	if err := k.ChangeLifecycle(action, args, dbTime(now)); err != nil {
		return nil, err
	}
	normalizeKey(k)
	if err := updateKey(ctx, tx, k); err != nil {
		if isUnique(err) {
			return nil, keybrake.Errorf(keybrake.ECONFLICT, "A key with this secret already exists.")
		}
		return nil, err
	}
	if e != nil {
		if err := addAdminEventIn(ctx, tx, e); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, wrap(err, "%s key %s", action, id)
	}
	s.notifyKey(id)
	return k, nil
}
