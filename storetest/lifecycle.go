package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

func testLifecycle(t *testing.T, open opener) {
	ctx := context.Background()
	mustLS := func(t *testing.T) (keybrake.Store, keybrake.KeyLifecycleService) {
		t.Helper()
		s := open(t)
		ls, ok := s.(keybrake.KeyLifecycleService)
		if !ok {
			t.Fatal("the store does not implement keybrake.KeyLifecycleService")
		}
		return s, ls
	}
	reserve := func(s keybrake.Store, keyID, idem string, now time.Time) (keybrake.ReserveResult, error) {
		return s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation(keyID, idem, USD(1)), Now: now})
	}
	t.Run("RotateKeepsIDAndSpend", func(t *testing.T) {
		s, ls := mustLS(t)
		k := MustCreateKey(t, s, NewKey("vk_rot"))
		if _, err := reserve(s, k.ID, "before", T0); err != nil {
			t.Fatal(err)
		}
		grace := T0.Add(time.Hour)
		r, err := ls.RotateKey(ctx, k.ID, keybrake.RotateArgs{SecretHash: hash("new"), SecretPrefix: "vault_key_new", GraceUntil: &grace, Now: T0})
		if err != nil {
			t.Fatal(err)
		}
		if r.ID != k.ID || r.SecretHash != hash("new") || r.PreviousSecretHash != k.SecretHash || !r.PreviousSecretExpiresAt.Equal(grace) {
			t.Fatalf("rotated = %+v", r)
		}
		for _, h := range []string{hash("new"), k.SecretHash} {
			got, err := s.FindKeyBySecretHash(ctx, h)
			if err != nil || got.ID != k.ID || got.AcceptsSecret(h, T0) != nil {
				t.Fatalf("FindKeyBySecretHash(%s) = %+v, %v", h[:8], got, err)
			}
			if h == k.SecretHash && got.AcceptsSecret(h, grace) == nil {
				t.Fatal("the previous secret is accepted at the end of its grace period")
			}
		}
		sp, err := s.Spend(ctx, k.ID, "2026-11-29", "2026-11")
		if err != nil || sp.Total != USD(1) {
			t.Fatalf("spend after rotation = %+v, %v", sp, err)
		}
		// A second rotation ends the first one's grace at once.
		r, err = ls.RotateKey(ctx, k.ID, keybrake.RotateArgs{SecretHash: hash("newer"), SecretPrefix: "vault_key_nwr", Now: T0})
		if err != nil || r.PreviousSecretHash != "" || r.PreviousSecretExpiresAt != nil {
			t.Fatalf("second rotation without grace = %+v, %v", r, err)
		}
		if _, err := s.FindKeyBySecretHash(ctx, k.SecretHash); keybrake.ErrorCode(err) != keybrake.ENOTFOUND {
			t.Fatalf("the first secret after a second rotation: %v, want ENOTFOUND", err)
		}
	})
	t.Run("SuspendRefusesReserve", func(t *testing.T) {
		s, _ := mustLS(t)
		k := MustCreateKey(t, s, NewKey("vk_susp"))
		if _, err := s.SuspendKey(ctx, k.ID, "by hand", T0); err != nil {
			t.Fatal(err)
		}
		if _, err := reserve(s, k.ID, "during", T0); keybrake.ErrorCode(err) != keybrake.EFORBIDDEN {
			t.Fatalf("Reserve on a suspended key: %v, want EFORBIDDEN", err)
		}
		got, _ := s.FindKeyByID(ctx, k.ID)
		if got.Status(T0) != keybrake.StatusSuspended || got.Usable(T0) == nil {
			t.Fatalf("suspended key = %+v", got)
		}
		if _, err := s.ResumeKey(ctx, k.ID, T0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if res, err := reserve(s, k.ID, "after", T0.Add(time.Minute)); err != nil || res.Reservation == nil {
			t.Fatalf("Reserve after resume: %+v, %v", res, err)
		}
	})
	t.Run("ErrRevokedIsFinal", func(t *testing.T) {
		s, ls := mustLS(t)
		k := MustCreateKey(t, s, NewKey("vk_rev"))
		if _, err := s.RevokeKey(ctx, k.ID, T0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ResumeKey(ctx, k.ID, T0); keybrake.ErrorCode(err) != keybrake.ECONFLICT {
			t.Fatalf("resume revoked: %v, want ECONFLICT", err)
		}
		if _, err := ls.RotateKey(ctx, k.ID, keybrake.RotateArgs{SecretHash: hash("x"), Now: T0}); keybrake.ErrorCode(err) != keybrake.ECONFLICT {
			t.Fatalf("rotate revoked: %v, want ECONFLICT", err)
		}
		if _, err := s.SuspendKey(ctx, "vk_none", "by hand", T0); keybrake.ErrorCode(err) != keybrake.ENOTFOUND {
			t.Fatalf("suspend unknown: %v, want ENOTFOUND", err)
		}
	})
}
