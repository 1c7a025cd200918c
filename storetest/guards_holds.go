package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// testGuardHeld checks that acting on a held object (LockObject, the
// first step of a confirm or capture) reads the key in its own
// transaction: a suspended or revoked key cannot move held money, whatever
// a replica's key cache says.
func testGuardHeld(t *testing.T, open opener) {
	ctx := context.Background()
	later := T0.Add(time.Minute)
	lock := func(s keybrake.Store, owner string, now time.Time) error {
		_, err := s.LockObject(ctx, keybrake.LockArgs{KeyID: "key_a", ObjectID: "pi_1", Owner: owner, Now: now, Until: now.Add(time.Minute)})
		return err
	}

	t.Run("SuspendedKeyCannotLock", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		MustHold(t, s, "key_a", "idem_1", "pi_1", USD(5), T0, T0.Add(time.Hour))
		if _, err := s.SuspendKey(ctx, "key_a", "breaker refusal_burst: test", T0); err != nil {
			t.Fatal(err)
		}
		wantCode(t, lock(s, "req_1", later), keybrake.EFORBIDDEN)
		if _, err := s.ResumeKey(ctx, "key_a", later); err != nil {
			t.Fatal(err)
		}
		if err := lock(s, "req_2", later); err != nil {
			t.Fatalf("LockObject after resume: %v", err)
		}
	})
	t.Run("RevokedKeyCannotLock", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		MustHold(t, s, "key_a", "idem_1", "pi_1", USD(5), T0, T0.Add(time.Hour))
		if _, err := s.RevokeKey(ctx, "key_a", T0); err != nil {
			t.Fatal(err)
		}
		wantCode(t, lock(s, "req_1", later), keybrake.EUNAUTHORIZED)
	})
	t.Run("UnknownKey", func(t *testing.T) {
		s := open(t)
		_, err := s.LockObject(ctx, keybrake.LockArgs{KeyID: "key_nope", ObjectID: "pi_1", Owner: "req_1", Now: T0, Until: later})
		wantCode(t, err, keybrake.ENOTFOUND)
	})
}
