package postgres

import (
	"context"

	"github.com/keybrake/keybrake"
)

// ChangeKey applies c to the key and appends c.Event in the same
// transaction (see keybrake.AdminStore).
func (s *Store) ChangeKey(ctx context.Context, id string, c keybrake.KeyChange) (*keybrake.Key, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	switch c.Action {
	case keybrake.ActionCreate:
		if err := s.createKey(ctx, id, c.Create, c.Event); err != nil {
			return nil, err
		}
		return c.Create, nil
	case keybrake.ActionSuspend:
		return s.suspendKey(ctx, id, c.Reason, c.Now, c.Event)
	case keybrake.ActionResume:
		return s.resumeKey(ctx, id, c.Now, c.Event)
	case keybrake.ActionRevoke:
		return s.revokeKey(ctx, id, c.Now, c.Event)
	case keybrake.ActionUpdate:
		return s.updateKeyAudited(ctx, id, *c.Update, c.Now, c.Event)
	default: // keybrake.ActionRotate
		return s.changeLifecycle(ctx, id, "rotate", c.Rotate, c.Now, c.Event)
	}
}
