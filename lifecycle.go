package keybrake

import (
	"context"
	"time"
)

// Key statuses, as the admin API lists and filters them.
const (
	StatusActive    = "active"
	StatusSuspended = "suspended"
	StatusExpired   = "expired"
	StatusRevoked   = "revoked"
)

// Status returns the key's status at now: revoked, then expired, then
// suspended, else active.
func (k *Key) Status(now time.Time) string {
	switch {
	case k.ClosedAtExpiry():
		return StatusExpired
	case k.RevokedAt != nil: // final whatever now is (Usable)
		return StatusRevoked
	case k.ExpiresAt != nil && !now.Before(*k.ExpiresAt):
		return StatusExpired
	case k.SuspendedAt != nil:
		return StatusSuspended
	}
	return StatusActive
}

// AcceptsSecret returns nil if the vault key hashing to hash may
// authenticate as k at now: the current secret always (Usable decides the
// rest), the previous one only before PreviousSecretExpiresAt. Returns
// EUNAUTHORIZED for a previous secret past its grace period, or a hash that
// is neither.
func (k *Key) AcceptsSecret(hash string, now time.Time) error {
	if hash == k.SecretHash {
		return nil
	}
	if hash == k.PreviousSecretHash && k.PreviousSecretExpiresAt != nil && now.Before(*k.PreviousSecretExpiresAt) {
		return nil
	}
	at := ""
	if k.PreviousSecretExpiresAt != nil {
		at = " at " + k.PreviousSecretExpiresAt.UTC().Format(time.RFC3339)
	}
	return Errorf(EUNAUTHORIZED, "This vault key was rotated; the previous secret stopped working%s. Use the new vault key.", at)
}

// RotateArgs gives a key a new secret. The secret it replaces keeps
// working until GraceUntil (nil or not after Now: refused at once); a
// secret replaced earlier and still in its grace period stops at once.
type RotateArgs struct {
	SecretHash   string
	SecretPrefix string
	GraceUntil   *time.Time
	Now          time.Time
}

// KeyLifecycleService rotates keys; suspending and resuming are
// GuardService's (SuspendKey, ResumeKey), shared by operators and the
// circuit breaker. Every change is reported to KeyWatcher watchers like
// UpdateKey's.
type KeyLifecycleService interface {
	// RotateKey replaces the key's secret, keeping its ID, policy and
	// spend. Returns ENOTFOUND for an unknown key, ECONFLICT for a revoked
	// one or a hash already taken, EINVALID for an empty hash.
	RotateKey(ctx context.Context, id string, args RotateArgs) (*Key, error)
}

// ChangeLifecycle applies a lifecycle change to k as of now: rotate (args
// set), suspend or resume. Stores call it on the key they locked.
func (k *Key) ChangeLifecycle(action string, args *RotateArgs, now time.Time) error {
	if k.RevokedAt != nil {
		return Errorf(ECONFLICT, "Key %s was revoked at %s; revocation is final. Create a new key.", k.ID, k.RevokedAt.UTC().Format(time.RFC3339))
	}
	switch action {
	case "rotate":
		if args.SecretHash == "" {
			return ErrorParam("secret_hash", "A rotation needs the new secret's hash.")
		}
		k.PreviousSecretHash, k.PreviousSecretExpiresAt = "", nil
		if args.GraceUntil != nil && args.GraceUntil.After(now) {
			t := *args.GraceUntil
			k.PreviousSecretHash, k.PreviousSecretExpiresAt = k.SecretHash, &t
		}
		k.SecretHash, k.SecretPrefix = args.SecretHash, args.SecretPrefix
	case "suspend":
		if k.SuspendedAt == nil {
			t := now
			k.SuspendedAt = &t
		}
	case "resume":
		k.SuspendedAt = nil
	default:
		return Errorf(EINVALID, "Unknown lifecycle action %q.", action)
	}
	k.UpdatedAt = now
	return nil
}
