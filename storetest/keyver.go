package storetest

import (
	"context"
	"testing"

	"github.com/keybrake/keybrake"
)

// testKeyVersion: a reservation decided on an old version of its key
// (ReserveArgs.KeyVersion) reserves and counts nothing and says Stale, so
// the proxy decides again on the key as it is now; one decided on the
// current version, or on none, is reserved as usual. Every store keeps
// versions (SQLite since migration 0033): one with none could not refuse.
func testKeyVersion(t *testing.T, open opener) {
	ctx := context.Background()
	t.Run("StaleReservesNothing", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_v", "UTC", keybrake.Caps{Daily: Ptr(USD(100))})
		old, err := s.FindKeyByID(ctx, "key_v")
		if err != nil {
			t.Fatal(err)
		}
		again, err := s.FindKeyByID(ctx, "key_v")
		if err != nil {
			t.Fatal(err)
		}
		if again.Version != old.Version {
			t.Fatalf("Version changed with no update: %q, then %q", old.Version, again.Version)
		}
		label := "narrowed"
		upd, err := s.UpdateKey(ctx, "key_v", keybrake.KeyUpdate{Label: &label}, T0)
		if err != nil {
			t.Fatal(err)
		}
		cur, err := s.FindKeyByID(ctx, "key_v")
		if err != nil {
			t.Fatal(err)
		}
		if upd.Version != cur.Version {
			t.Fatalf("UpdateKey returned version %q, the store has %q", upd.Version, cur.Version)
		}
		if old.Version == "" {
			t.Fatal("the store keeps no key version: a key narrowed while a request is decided would still be charged")
		}
		if cur.Version == old.Version {
			t.Fatalf("Version %q unchanged by an update", cur.Version)
		}
		res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_v", "idem_1", USD(5)), Now: T0, KeyVersion: old.Version})
		if err != nil {
			t.Fatalf("Reserve on the old version: %v", err)
		}
		if !res.Stale || res.Reservation != nil || res.OverCap != nil {
			t.Fatalf("Reserve on the old version = %+v; want Stale and nothing else", res)
		}
		if n := mustCountReservations(t, s, "key_v"); n != 0 {
			t.Fatalf("a stale reservation recorded %d reservations", n)
		}
		wantSpend(t, MustSpend(t, s, "key_v", T0, MustLocation(t, "UTC")), keybrake.Spend{})

		// The same Idempotency-Key on the current version is a first use,
		// not a replay of the stale one.
		res, err = s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_v", "idem_1", USD(5)), Now: T0, KeyVersion: cur.Version})
		if err != nil || res.Stale || res.Replay || res.Reservation == nil {
			t.Fatalf("Reserve on the current version = %+v, %v; want reserved", res, err)
		}
		// A replay decided on the old version is stale too: the proxy
		// must not answer it from a key it may no longer accept.
		res, err = s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_v", "idem_1", USD(5)), Now: T0, KeyVersion: old.Version})
		if err != nil || !res.Stale {
			t.Fatalf("replay on the old version = %+v, %v; want Stale", res, err)
		}
		res, err = s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_v", "idem_2", USD(1)), Now: T0})
		if err != nil || res.Stale || res.Reservation == nil {
			t.Fatalf("Reserve with no version = %+v, %v; want reserved", res, err)
		}
		wantSpend(t, MustSpend(t, s, "key_v", T0, MustLocation(t, "UTC")), keybrake.Spend{Day: USD(6), Month: USD(6), Total: USD(6)})
	})
}
