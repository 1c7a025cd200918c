package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// day is one day, for retention ages.
const day = 24 * time.Hour

// mustSettleAt settles r to state at now, in full.
func mustSettleAt(tb testing.TB, s keybrake.Store, r *keybrake.Reservation, state string, now time.Time) *keybrake.Reservation {
	tb.Helper()
	return MustSettle(tb, s, keybrake.SettleArgs{ID: r.ID, State: state, SettledMicros: r.Micros, Now: now})
}

// wantGone fails unless exactly the reservations gone are no longer found
// and the others are.
func wantGone(tb testing.TB, s keybrake.Store, gone map[string]bool, all ...*keybrake.Reservation) {
	tb.Helper()
	for _, r := range all {
		_, err := s.FindReservationByID(context.Background(), r.ID)
		switch {
		case gone[r.ID] && keybrake.ErrorCode(err) != keybrake.ENOTFOUND:
			tb.Errorf("reservation %s (%s) was kept: %v", r.IdempotencyKey, r.State, err)
		case !gone[r.ID] && err != nil:
			tb.Errorf("reservation %s (%s) was deleted: %v", r.IdempotencyKey, r.State, err)
		}
	}
}

// mustPruneAll calls prune until a batch deletes nothing and returns the
// sizes of the batches.
func mustPruneAll(tb testing.TB, name string, prune func() (int64, error)) []int64 {
	tb.Helper()
	var out []int64
	for range 100 {
		n, err := prune()
		if err != nil {
			tb.Fatalf("%s: %v", name, err)
		}
		out = append(out, n)
		if n == 0 {
			return out
		}
	}
	tb.Fatalf("%s never finished: %v", name, out)
	return nil
}

func testRetention(t *testing.T, open opener) {
	ctx := context.Background()
	utc := time.UTC
	now := T0.Add(100 * day)
	args := keybrake.PruneArgs{Before: now.Add(-90 * day), Now: now}

	t.Run("NeverDeletesCounted", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: Ptr(USD(1000))})
		reserved := MustReserve(t, s, "key_a", "reserved", USD(1), T0)
		uncertain := mustSettleAt(t, s, MustReserve(t, s, "key_a", "uncertain", USD(2), T0), keybrake.StateUncertain, T0)
		held := MustHold(t, s, "key_a", "held", "pi_held", USD(3), T0, T0.Add(time.Hour))
		settled := mustSettleAt(t, s, MustReserve(t, s, "key_a", "settled", USD(4), T0), keybrake.StateSettled, T0)
		released := mustSettleAt(t, s, MustReserve(t, s, "key_a", "released", USD(5), T0), keybrake.StateReleased, T0)
		linked := MustHold(t, s, "key_a", "linked", "pi_linked", USD(6), T0, T0.Add(time.Hour))
		linked = mustSettleAt(t, s, linked, keybrake.StateSettled, T0)
		recent := mustSettleAt(t, s, MustReserve(t, s, "key_a", "recent", USD(7), now.Add(-20*day)), keybrake.StateSettled, now.Add(-20*day))
		before := MustSpend(t, s, "key_a", now, utc)

		n, err := s.PruneReservations(ctx, args)
		if err != nil || n != 2 {
			t.Fatalf("PruneReservations = %d, %v; want 2 (the settled and the released)", n, err)
		}
		wantGone(t, s, map[string]bool{settled.ID: true, released.ID: true}, reserved, uncertain, held, settled, released, linked, recent)
		wantSpend(t, MustSpend(t, s, "key_a", now, utc), before)
		if before.Total != USD(1+2+3+4+6+7) {
			t.Fatalf("total = %d, want what the kept and the deleted settled reservations count", before.Total)
		}
		// The replay of a deleted reservation's Idempotency-Key is, past
		// Stripe's window, a new request: counted anew.
		MustReserve(t, s, "key_a", "settled", USD(4), now)
	})
	t.Run("IdempotencyWindow", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		inside := mustSettleAt(t, s, MustReserve(t, s, "key_a", "inside", USD(1), now.Add(-23*time.Hour)), keybrake.StateSettled, now.Add(-23*time.Hour))
		changed := mustSettleAt(t, s, MustReserve(t, s, "key_a", "changed", USD(1), now.Add(-30*time.Hour)), keybrake.StateSettled, now.Add(-time.Hour))
		outside := mustSettleAt(t, s, MustReserve(t, s, "key_a", "outside", USD(1), now.Add(-25*time.Hour)), keybrake.StateReleased, now.Add(-25*time.Hour))
		n, err := s.PruneReservations(ctx, keybrake.PruneArgs{Before: now, Now: now})
		if err != nil || n != 1 {
			t.Fatalf("PruneReservations(before now) = %d, %v; want 1", n, err)
		}
		wantGone(t, s, map[string]bool{outside.ID: true}, inside, changed, outside)
	})
	t.Run("Batches", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		var all []*keybrake.Reservation
		gone := map[string]bool{}
		for i := range 7 {
			r := mustSettleAt(t, s, MustReserve(t, s, "key_a", fmt.Sprintf("idem_%d", i), USD(1), T0), keybrake.StateSettled, T0)
			all, gone[r.ID] = append(all, r), true
		}
		got := mustPruneAll(t, "PruneReservations", func() (int64, error) {
			return s.PruneReservations(ctx, keybrake.PruneArgs{Before: args.Before, Now: now, Limit: 3})
		})
		if fmt.Sprint(got) != "[3 3 1 0]" {
			t.Fatalf("batches = %v, want [3 3 1 0]", got)
		}
		wantGone(t, s, gone, all...)
		if n, err := s.PruneReservations(ctx, args); err != nil || n != 0 {
			t.Fatalf("pruning again = %d, %v; want 0 (idempotent)", n, err)
		}
	})
	t.Run("Holds", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		done := MustHold(t, s, "key_a", "done", "pi_done", USD(1), T0, T0.Add(time.Hour))
		done = mustSettleAt(t, s, done, keybrake.StateSettled, T0)
		live := MustHold(t, s, "key_a", "live", "pi_live", USD(1), T0, now.Add(time.Hour))
		if _, err := s.LockObject(ctx, keybrake.LockArgs{KeyID: "key_a", ObjectID: "pi_locked", Owner: "req_1", Now: now, Until: now.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
		if got := mustPruneAll(t, "PruneHolds", func() (int64, error) { return s.PruneHolds(ctx, args) }); got[0] != 1 {
			t.Fatalf("PruneHolds = %v, want only the hold of the settled reservation", got)
		}
		// Its reservation is no longer linked, so it goes too; the live
		// hold's stays, and so do the holds and locks still in use.
		if n, err := s.PruneReservations(ctx, args); err != nil || n != 1 {
			t.Fatalf("PruneReservations = %d, %v; want 1", n, err)
		}
		wantGone(t, s, map[string]bool{done.ID: true}, done, live)
		if r, err := s.LockObject(ctx, keybrake.LockArgs{KeyID: "key_a", ObjectID: "pi_live", Owner: "req_2", Now: now, Until: now.Add(time.Minute)}); err != nil || r == nil || r.ID != live.ID {
			t.Fatalf("LockObject(pi_live) = %+v, %v; want the live hold", r, err)
		}
		_, err := s.LockObject(ctx, keybrake.LockArgs{KeyID: "key_a", ObjectID: "pi_locked", Owner: "req_3", Now: now, Until: now.Add(time.Minute)})
		wantCode(t, err, keybrake.ECONFLICT)
	})
	t.Run("CompactCounters", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Daily: Ptr(USD(100)), Total: Ptr(USD(1000))})
		old := T0.Add(-40 * day)
		mustSettleAt(t, s, MustReserve(t, s, "key_a", "old", USD(4), old), keybrake.StateSettled, old)
		open := mustSettleAt(t, s, MustReserve(t, s, "key_a", "open", USD(2), T0), keybrake.StateUncertain, T0)
		MustReserve(t, s, "key_a", "today", USD(1), now)
		dayCut, _ := keybrake.CounterCutoffs(now.Add(-5*day), now)
		got := mustPruneAll(t, "CompactCounters", func() (int64, error) {
			return s.CompactCounters(ctx, keybrake.CompactArgs{DayBefore: dayCut, MonthBefore: "2026-11", Limit: 1})
		})
		// The old day and the old month (October) go; T0's day and month stay
		// (an uncertain reservation counts there), and so do today's.
		if fmt.Sprint(got) != "[1 1 0]" {
			t.Fatalf("CompactCounters batches = %v, want [1 1 0]", got)
		}
		wantSpend(t, MustSpend(t, s, "key_a", old, utc), keybrake.Spend{Total: USD(7), Uncertain: USD(2)})
		wantSpend(t, MustSpend(t, s, "key_a", T0, utc), keybrake.Spend{Day: USD(2), Month: USD(2), Total: USD(7), Uncertain: USD(2)})
		wantSpend(t, MustSpend(t, s, "key_a", now, utc), keybrake.Spend{Day: USD(1), Month: USD(1), Total: USD(7), Uncertain: USD(2)})
		// Settling the open reservation later moves its own buckets only.
		MustSettle(t, s, keybrake.SettleArgs{ID: open.ID, State: keybrake.StateReleased, Now: now})
		wantSpend(t, MustSpend(t, s, "key_a", T0, utc), keybrake.Spend{Total: USD(5)})
		got = mustPruneAll(t, "CompactCounters", func() (int64, error) {
			return s.CompactCounters(ctx, keybrake.CompactArgs{DayBefore: dayCut, MonthBefore: "2026-11"})
		})
		if got[0] != 1 {
			t.Fatalf("CompactCounters after the release = %v, want T0's day", got)
		}
		wantSpend(t, MustSpend(t, s, "key_a", now, utc), keybrake.Spend{Day: USD(1), Month: USD(1), Total: USD(5)})
	})
	t.Run("Alerts", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		MustCreateEndpoint(t, s, "we_1", "")
		enqueue := func(k string) *keybrake.Alert {
			a := &keybrake.Alert{AlertKey: k, Kind: keybrake.AlertTest, KeyID: "key_a", CreatedAt: T0}
			if _, err := s.EnqueueAlert(ctx, a); err != nil {
				t.Fatal(err)
			}
			return a
		}
		a := enqueue("test:1")
		if n, err := s.PruneAlerts(ctx, args); err != nil || n != 0 {
			t.Fatalf("PruneAlerts(unclaimed) = %d, %v; want 0", n, err)
		}
		if _, err := s.ClaimAlerts(ctx, 10); err != nil {
			t.Fatal(err)
		}
		if n, err := s.PruneAlerts(ctx, args); err != nil || n != 0 {
			t.Fatalf("PruneAlerts(delivery pending) = %d, %v; want 0", n, err)
		}
		ds, err := s.LeaseAlertDeliveries(ctx, "r1", T0, T0.Add(time.Minute), 10)
		if err != nil || len(ds) != 1 {
			t.Fatalf("lease = %d, %v", len(ds), err)
		}
		if _, err := s.RecordAlertAttempt(ctx, keybrake.AttemptArgs{DeliveryID: ds[0].ID, Owner: "r1", At: T0, Status: 200, State: keybrake.DeliveryDelivered}); err != nil {
			t.Fatal(err)
		}
		if got := mustPruneAll(t, "PruneAlerts", func() (int64, error) { return s.PruneAlerts(ctx, args) }); got[0] != 1 {
			t.Fatalf("PruneAlerts = %v, want the delivered alert", got)
		}
		if left, err := s.FindAlertDeliveries(ctx, keybrake.DeliveryFilter{AlertID: a.ID}); err != nil || len(left) != 0 {
			t.Fatalf("deliveries left = %d, %v", len(left), err)
		}
		if left, err := s.FindAlertAttempts(ctx, ds[0].ID); err != nil || len(left) != 0 {
			t.Fatalf("attempts left = %d, %v", len(left), err)
		}
	})
	t.Run("GuardCounters", func(t *testing.T) {
		// Velocity counters expire with their window: pruned after it,
		// and a limit's decisions are the same before and after.
		s := open(t)
		MustCreateGuardedKey(t, s, "key_a", keybrake.Caps{}, &keybrake.Guards{Velocity: []keybrake.VelocityLimit{
			{Name: "two_a_minute", Per: keybrake.PerKey, Limit: 2, WindowSeconds: 60},
		}})
		for i := range 2 {
			if res := reserveGuarded(t, s, NewCharge("key_a", fmt.Sprintf("g%d", i), "cus_1", USD(int64(i+1))), T0); res.Guard != nil {
				t.Fatalf("charge %d refused: %+v", i, res.Guard)
			}
		}
		inside := keybrake.PruneArgs{Before: T0, Now: T0.Add(30 * time.Second)}
		if n, err := s.PruneGuardCounters(ctx, inside); err != nil || n != 0 {
			t.Fatalf("PruneGuardCounters inside the window = %d, %v; want 0", n, err)
		}
		if res := reserveGuarded(t, s, NewCharge("key_a", "g2", "cus_1", USD(3)), T0.Add(30*time.Second)); res.Guard == nil {
			t.Fatal("a third charge in the minute passed after a prune inside the window")
		}
		later := keybrake.PruneArgs{Before: T0, Now: T0.Add(time.Hour)}
		if n, err := s.PruneGuardCounters(ctx, later); err != nil || n == 0 {
			t.Fatalf("PruneGuardCounters past the window = %d, %v; want some", n, err)
		}
		if n, err := s.PruneGuardCounters(ctx, later); err != nil || n != 0 {
			t.Fatalf("second PruneGuardCounters = %d, %v; want 0", n, err)
		}
		if res := reserveGuarded(t, s, NewCharge("key_a", "g3", "cus_1", USD(4)), T0.Add(time.Hour)); res.Guard != nil {
			t.Fatalf("a charge an hour later refused: %+v", res.Guard)
		}
	})
	t.Run("Pruner", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		MustCreateKey(t, s, NewKey("key_b"))
		for i := range 12 {
			at := T0.Add(time.Duration(i) * day)
			MustAddEvent(t, s, NewEvent("key_a", at, i+1))
			MustAddEvent(t, s, NewEvent("key_b", at, i+1))
			mustSettleAt(t, s, MustReserve(t, s, "key_a", fmt.Sprintf("idem_%d", i), USD(1), at), keybrake.StateSettled, at)
		}
		clock := T0.Add(12 * day)
		p := &keybrake.Pruner{Store: s, Retention: 5 * day, Batch: 4, Pause: time.Microsecond, Now: func() time.Time { return clock }}
		rep, err := p.Once(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Days 0…6 are older than 5 days: 7 events per key, 7 reservations.
		if rep.Events != 14 || rep.Reservations != 7 {
			t.Fatalf("report = %+v, want 14 events and 7 reservations", rep)
		}
		if rep.Batches < 6 {
			t.Fatalf("report = %+v: %d batches, want small ones", rep, rep.Batches)
		}
		wantOK(t, MustVerify(t, s), 10)
		if again, err := p.Once(ctx); err != nil || again.Total() != 0 {
			t.Fatalf("second pass = %+v, %v; want nothing", again, err)
		}
		if mustCountReservations(t, s, "key_a") != 5 {
			t.Fatalf("reservations left = %d, want 5", mustCountReservations(t, s, "key_a"))
		}
		p.Retention = keybrake.IdempotencyWindow
		if _, err := p.Once(ctx); keybrake.ErrorCode(err) != keybrake.EINVALID {
			t.Fatalf("a retention inside the idempotency window = %v, want EINVALID", err)
		}
	})
}
