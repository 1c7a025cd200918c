package http

import (
	"context"
	"net/http"

	"github.com/keybrake/keybrake"
)

// changeKey applies a change to the key. With a store that keeps
// the admin audit log, c.Event is written in the change's transaction
// (keybrake.AdminStore.ChangeKey): a suspension by the drift watch or an
// operator is never left without the entry saying who made it and why.
// A store without that log makes the change alone.
func (s *Server) changeKey(ctx context.Context, id string, c keybrake.KeyChange) (*keybrake.Key, error) {
	if as, ok := s.Store.(keybrake.AdminStore); ok {
		return as.ChangeKey(ctx, id, c)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	switch c.Action {
	case keybrake.ActionCreate:
		return c.Create, s.Store.CreateKey(ctx, c.Create)
	case keybrake.ActionSuspend:
		return s.Store.SuspendKey(ctx, id, c.Reason, c.Now)
	case keybrake.ActionResume:
		return s.Store.ResumeKey(ctx, id, c.Now)
	case keybrake.ActionRevoke:
		return s.Store.RevokeKey(ctx, id, c.Now)
	case keybrake.ActionUpdate:
		return s.Store.UpdateKey(ctx, id, *c.Update, c.Now)
	}
	ls, ok := s.Store.(keybrake.KeyLifecycleService)
	if !ok {
		return nil, keybrake.Errorf(keybrake.EINVALID, "This store cannot rotate keys.")
	}
	args := *c.Rotate
	args.Now = c.Now
	return ls.RotateKey(ctx, id, args)
}

// changeKeyAudited is changeKey for the calling admin: the change and its
// admin audit event ("key." + action on the key, with detail) commit
// together, and the action is logged.
func (s *Server) changeKeyAudited(r *http.Request, id, detail string, c keybrake.KeyChange) (*keybrake.Key, error) {
	c.Event = s.newAdminEvent(r, adminName(r), "key."+c.Action, id, detail, "")
	k, err := s.changeKey(r.Context(), id, c)
	if err == nil {
		s.logAdminAction(r, c.Event.Action, k.ID)
	}
	return k, err
}
