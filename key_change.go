package keybrake

import "time"

// Key lifecycle actions, in KeyChange.Action; the admin audit log records
// each as "key." + action.
const (
	ActionCreate  = "create"
	ActionSuspend = "suspend"
	ActionResume  = "resume"
	ActionRevoke  = "revoke"
	ActionRotate  = "rotate"
	ActionUpdate  = "update"
)

// KeyChange is one change of a key made by an operator or a watch, with
// the admin audit event that records it. AdminStore.ChangeKey applies both
// in one transaction, so no crash, failover or failed write can leave a
// key created, suspended, resumed, revoked, rotated or its policy updated
// without the entry saying who did it and why.
type KeyChange struct {
	Action string      // ActionCreate, ActionSuspend, ActionResume, ActionRevoke, ActionRotate or ActionUpdate
	Create *Key        // for ActionCreate: the new key, as KeyService.CreateKey takes it
	Reason string      // for ActionSuspend: Key.SuspendedReason
	Rotate *RotateArgs // for ActionRotate: the new secret and grace (its Now is ignored: Now counts)
	Update *KeyUpdate  // for ActionUpdate: the policy fields to change
	Now    time.Time
	// Event is appended to the admin audit log in the change's
	// transaction (its ID set); nil appends none.
	Event *AdminEvent
}

// Validate returns EINVALID for an unknown action, a creation without its
// Key, a rotation without RotateArgs or an update without KeyUpdate.
func (c *KeyChange) Validate() error {
	switch c.Action {
	case ActionCreate:
		if c.Create == nil {
			return Errorf(EINVALID, "A creation needs the key to create.")
		}
		return nil
	case ActionSuspend, ActionResume, ActionRevoke:
		return nil
	case ActionRotate:
		if c.Rotate == nil {
			return ErrorParam("secret_hash", "A rotation needs the new secret's hash.")
		}
		return nil
	case ActionUpdate:
		if c.Update == nil {
			return Errorf(EINVALID, "An update needs the fields to change.")
		}
		return nil
	}
	return Errorf(EINVALID, "Unknown key action %q: create, suspend, resume, revoke, rotate or update.", c.Action)
}
