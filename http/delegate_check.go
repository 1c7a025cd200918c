package http

import (
	"context"

	"github.com/keybrake/keybrake"
)

// checkAncestors refuses a request of a child key that is wider than its
// parent, or than any ancestor, as they are now: minting checks the child
// against its parent (keybrake.CheckChild), but an admin may narrow the
// parent afterwards (take operations away, limit currencies or customers,
// add an approval policy, lower a cap), and the child must not keep what
// the parent lost. It is checked as an admin update of the child is, with
// the deadline of the child's minting. A parent that cannot be read
// refuses too. Returns EFORBIDDEN naming the child, the ancestor and the
// field.
func (s *Server) checkAncestors(ctx context.Context, k *keybrake.Key) error {
	for child := k; child.ParentID != ""; {
		parent, err := s.Store.FindKeyByID(ctx, child.ParentID)
		if err != nil {
			return storeError(err)
		}
		if err := keybrake.CheckChild(child, parent, child.CreatedAt); err != nil {
			return keybrake.Errorf(keybrake.EFORBIDDEN, "Vault key %s is wider than %s, whose policy was narrowed after %s was minted (%s: %s). Nothing was sent; an admin can narrow %s to match, or revoke it.",
				k.ID, parent.ID, child.ID, keybrake.ErrorParamOf(err), keybrake.ErrorMessage(err), child.ID)
		}
		child = parent
	}
	return nil
}
