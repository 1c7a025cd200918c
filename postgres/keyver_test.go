package postgres_test

import (
	"context"
	"testing"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/postgres"
	"github.com/keybrake/keybrake/storetest"
)

// TestReserveManyKeyVersion: in one keybrake_reserve_many batch, the
// elements decided on an old version of their key are 'stale' and reserve
// and count nothing, while the others of the same key (on its current
// version, or on none) and of other keys are reserved as usual.
func TestReserveManyKeyVersion(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t, MustDatabase(t, MustServerDSN(t)))
	storetest.MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Daily: storetest.Ptr(storetest.USD(100))})
	storetest.MustCreateCappedKey(t, s, "key_b", "UTC", keybrake.Caps{Daily: storetest.Ptr(storetest.USD(100))})
	oldA, err := s.FindKeyByID(ctx, "key_a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.FindKeyByID(ctx, "key_b")
	if err != nil {
		t.Fatal(err)
	}
	label := "narrowed"
	curA, err := s.UpdateKey(ctx, "key_a", keybrake.KeyUpdate{Label: &label}, storetest.T0)
	if err != nil {
		t.Fatal(err)
	}
	if curA.Version == "" || curA.Version == oldA.Version {
		t.Fatalf("key_a's version %q before the update, %q after", oldA.Version, curA.Version)
	}
	rs := []*keybrake.Reservation{
		storetest.NewReservation("key_a", "a_old", storetest.USD(7)),
		storetest.NewReservation("key_b", "b_cur", storetest.USD(2)),
		storetest.NewReservation("key_a", "a_cur", storetest.USD(3)),
		storetest.NewReservation("key_a", "a_none", storetest.USD(1)),
		storetest.NewReservation("key_a", "a_old2", storetest.USD(50)),
	}
	versions := []string{oldA.Version, b.Version, curA.Version, "", oldA.Version}
	got, err := postgres.ReserveManyForTest(ctx, s, rs, versions, storetest.T0)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"stale", "ok", "ok", "ok", "stale"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("statuses %v, want %v", got, want)
		}
	}
	spend := storetest.MustSpend(t, s, "key_a", storetest.T0, storetest.MustLocation(t, "UTC"))
	if spend.Day != storetest.USD(4) || spend.Total != storetest.USD(4) {
		t.Fatalf("key_a spent %+v; want $4 (the stale $57 counted nothing)", spend)
	}
	rsv, err := s.FindReservations(ctx, keybrake.ReservationFilter{KeyID: "key_a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rsv) != 2 {
		t.Fatalf("key_a has %d reservations; want 2 (a_cur, a_none)", len(rsv))
	}
	for _, r := range rsv {
		if r.IdempotencyKey == "a_old" || r.IdempotencyKey == "a_old2" {
			t.Fatalf("a stale element was recorded: %+v", r)
		}
	}
}
