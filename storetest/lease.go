package storetest

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

func ids(rs []*keybrake.Reservation) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

func testFindReservations(t *testing.T, open opener) {
	ctx := context.Background()
	find := func(t *testing.T, s keybrake.Store, f keybrake.ReservationFilter) []string {
		t.Helper()
		rs, err := s.FindReservations(ctx, f)
		if err != nil {
			t.Fatalf("FindReservations(%+v): %v", f, err)
		}
		return ids(rs)
	}
	t.Run("OK", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		MustCreateKey(t, s, NewKey("key_b"))
		r1 := MustReserve(t, s, "key_a", "idem_1", USD(1), T0)
		r2 := MustReserve(t, s, "key_a", "idem_2", USD(1), T0.Add(time.Second))
		r3 := MustReserve(t, s, "key_a", "idem_3", USD(1), T0.Add(2*time.Second))
		b1 := MustReserve(t, s, "key_b", "idem_1", USD(1), T0.Add(3*time.Second))
		MustSettle(t, s, keybrake.SettleArgs{ID: r2.ID, State: keybrake.StateUncertain, Now: T0})

		if got, want := find(t, s, keybrake.ReservationFilter{KeyID: "key_a"}), []string{r1.ID, r2.ID, r3.ID}; !reflect.DeepEqual(got, want) {
			t.Fatalf("key_a = %v, want %v", got, want)
		}
		if got, want := find(t, s, keybrake.ReservationFilter{KeyID: "key_a", Limit: 2}), []string{r1.ID, r2.ID}; !reflect.DeepEqual(got, want) {
			t.Fatalf("key_a limit 2 = %v, want %v", got, want)
		}
		if got, want := find(t, s, keybrake.ReservationFilter{KeyID: "key_a", State: keybrake.StateReserved}), []string{r1.ID, r3.ID}; !reflect.DeepEqual(got, want) {
			t.Fatalf("key_a reserved = %v, want %v", got, want)
		}
		if got, want := find(t, s, keybrake.ReservationFilter{CreatedFrom: T0.Add(2 * time.Second)}), []string{r3.ID, b1.ID}; !reflect.DeepEqual(got, want) {
			t.Fatalf("created from T0+2s = %v, want %v", got, want)
		}
		if got, want := find(t, s, keybrake.ReservationFilter{State: keybrake.StateReserved}), []string{r1.ID, r3.ID, b1.ID}; !reflect.DeepEqual(got, want) {
			t.Fatalf("all reserved = %v, want %v", got, want)
		}
		if got, want := find(t, s, keybrake.ReservationFilter{State: keybrake.StateUncertain}), []string{r2.ID}; !reflect.DeepEqual(got, want) {
			t.Fatalf("uncertain = %v, want %v", got, want)
		}
		if got := find(t, s, keybrake.ReservationFilter{KeyID: "key_missing"}); len(got) != 0 {
			t.Fatalf("missing key = %v, want none", got)
		}
	})
	t.Run("FindReservationByID", func(t *testing.T) {
		t.Run("ErrNotFound", func(t *testing.T) {
			s := open(t)
			_, err := s.FindReservationByID(ctx, "res_missing")
			wantCode(t, err, keybrake.ENOTFOUND)
		})
	})
}

func testLease(t *testing.T, open opener) {
	ctx := context.Background()
	// Four reservations of key_a at T0: uncertain, reserved long ago
	// (stale), reserved just now (in flight), settled and released.
	setup := func(t *testing.T) (s keybrake.Store, uncertain, stale string) {
		t.Helper()
		s = open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		st := MustReserve(t, s, "key_a", "idem_stale", USD(1), T0.Add(-time.Hour))
		u := MustReserve(t, s, "key_a", "idem_uncertain", USD(1), T0.Add(-time.Minute))
		MustSettle(t, s, keybrake.SettleArgs{ID: u.ID, State: keybrake.StateUncertain, UpstreamStatus: 504, Now: T0.Add(-time.Minute)})
		MustReserve(t, s, "key_a", "idem_fresh", USD(1), T0)
		done := MustReserve(t, s, "key_a", "idem_settled", USD(1), T0.Add(-2*time.Hour))
		MustSettle(t, s, keybrake.SettleArgs{ID: done.ID, State: keybrake.StateSettled, SettledMicros: USD(1), Now: T0})
		gone := MustReserve(t, s, "key_a", "idem_released", USD(1), T0.Add(-2*time.Hour))
		MustSettle(t, s, keybrake.SettleArgs{ID: gone.ID, State: keybrake.StateReleased, Now: T0})
		return s, u.ID, st.ID
	}
	now := T0.Add(time.Second)
	staleBefore := T0.Add(-10 * time.Minute)
	lease := func(t *testing.T, s keybrake.Store, owner string, now, until time.Time, limit int) []*keybrake.Reservation {
		t.Helper()
		rs, err := s.LeaseUncertain(ctx, owner, now, staleBefore, until, limit)
		if err != nil {
			t.Fatalf("LeaseUncertain(%s): %v", owner, err)
		}
		return rs
	}
	sorted := func(a []string) []string {
		if len(a) == 2 && a[0] > a[1] {
			a[0], a[1] = a[1], a[0]
		}
		return a
	}

	t.Run("OK", func(t *testing.T) {
		s, u, st := setup(t)
		until := now.Add(time.Minute)
		rs := lease(t, s, "resolver-a", now, until, 10)
		if got, want := sorted(ids(rs)), sorted([]string{u, st}); !reflect.DeepEqual(got, want) {
			t.Fatalf("leased = %v, want %v", got, want)
		}
		for _, r := range rs {
			if r.Attempts != 1 || r.LeaseOwner != "resolver-a" {
				t.Fatalf("leased %s: attempts=%d owner=%q", r.ID, r.Attempts, r.LeaseOwner)
			}
			wantTime(t, "LeaseUntil", r.LeaseUntil, until)
			stored := mustFindReservation(t, s, r.ID)
			if stored.Attempts != 1 || stored.LeaseOwner != "resolver-a" {
				t.Fatalf("stored %s: attempts=%d owner=%q", r.ID, stored.Attempts, stored.LeaseOwner)
			}
			wantTime(t, "stored LeaseUntil", stored.LeaseUntil, until)
			if r.Request.Path != "/v1/charges" || r.IdempotencyKey == "" {
				t.Fatalf("leased %s lacks its upstream request: %+v", r.ID, r.Request)
			}
		}
	})
	t.Run("LiveLeaseExcludes", func(t *testing.T) {
		s, _, _ := setup(t)
		lease(t, s, "resolver-a", now, now.Add(time.Minute), 10)
		if rs := lease(t, s, "resolver-b", now.Add(59*time.Second), now.Add(2*time.Minute), 10); len(rs) != 0 {
			t.Fatalf("resolver-b leased %v under a live lease", ids(rs))
		}
	})
	t.Run("ExpiredLeaseTaken", func(t *testing.T) {
		s, u, st := setup(t)
		lease(t, s, "resolver-a", now, now.Add(time.Minute), 10)
		rs := lease(t, s, "resolver-b", now.Add(time.Minute), now.Add(2*time.Minute), 10)
		if got, want := sorted(ids(rs)), sorted([]string{u, st}); !reflect.DeepEqual(got, want) {
			t.Fatalf("leased = %v, want %v", got, want)
		}
		for _, r := range rs {
			if r.Attempts != 2 || r.LeaseOwner != "resolver-b" {
				t.Fatalf("leased %s: attempts=%d owner=%q", r.ID, r.Attempts, r.LeaseOwner)
			}
		}
	})
	t.Run("Limit", func(t *testing.T) {
		s, _, _ := setup(t)
		first := lease(t, s, "resolver-a", now, now.Add(time.Minute), 1)
		if len(first) != 1 {
			t.Fatalf("leased %d, want 1", len(first))
		}
		second := lease(t, s, "resolver-b", now, now.Add(time.Minute), 10)
		if len(second) != 1 || second[0].ID == first[0].ID {
			t.Fatalf("second lease = %v after %v", ids(second), ids(first))
		}
		if rs := lease(t, s, "resolver-c", now, now.Add(time.Minute), 10); len(rs) != 0 {
			t.Fatalf("third lease = %v, want none", ids(rs))
		}
	})
	t.Run("ResolvedNotReturned", func(t *testing.T) {
		s, u, st := setup(t)
		lease(t, s, "resolver-a", now, now.Add(time.Minute), 10)
		MustSettle(t, s, keybrake.SettleArgs{ID: u, State: keybrake.StateSettled, SettledMicros: USD(1), Now: now})
		MustSettle(t, s, keybrake.SettleArgs{ID: st, State: keybrake.StateReleased, Now: now})
		if rs := lease(t, s, "resolver-a", now.Add(time.Hour), now.Add(2*time.Hour), 10); len(rs) != 0 {
			t.Fatalf("leased resolved %v", ids(rs))
		}
	})
	t.Run("Empty", func(t *testing.T) {
		s := open(t)
		if rs := lease(t, s, "resolver-a", now, now.Add(time.Minute), 10); len(rs) != 0 {
			t.Fatalf("leased %v from an empty store", ids(rs))
		}
	})
}
