package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/keybrake/keybrake"
)

// MustCreateGuardedKey stores a key with caps and guards or fails the test.
func MustCreateGuardedKey(tb testing.TB, s keybrake.Store, id string, caps keybrake.Caps, g *keybrake.Guards) *keybrake.Key {
	tb.Helper()
	k := NewKey(id)
	k.Caps, k.Guards = caps, g
	return MustCreateKey(tb, s, k)
}

// NewCharge returns a reservation of a charge of m for customer, with the
// duplicate guard's match on the amount.
func NewCharge(keyID, idem, customer string, m keybrake.Micros) *keybrake.Reservation {
	r := NewReservation(keyID, idem, m)
	r.Customer = customer
	r.DupKey = keybrake.GuardKey(customer, r.Currency, r.Amount, "", nil)
	r.Fingerprint = fmt.Sprintf("fp-%s-%d", customer, m)
	return r
}

func reserveGuarded(tb testing.TB, s keybrake.Store, r *keybrake.Reservation, now time.Time) keybrake.ReserveResult {
	tb.Helper()
	res, err := s.Reserve(context.Background(), keybrake.ReserveArgs{Reservation: r, Now: now})
	if err != nil {
		tb.Fatalf("Reserve %s: %v", r.IdempotencyKey, err)
	}
	return res
}

func testGuards(t *testing.T, open opener) {
	ctx := context.Background()
	dup := &keybrake.Guards{Duplicate: &keybrake.DuplicateGuard{WindowSeconds: 3600, AllowOverride: true}}

	t.Run("KeyRoundTrip", func(t *testing.T) {
		s := open(t)
		g := &keybrake.Guards{
			Duplicate: &keybrake.DuplicateGuard{WindowSeconds: 600, MatchMetadata: "billing_period"},
			Velocity:  []keybrake.VelocityLimit{{Name: "per_customer_day", Per: keybrake.PerCustomer, Operations: []string{"charges.create"}, Limit: 3, WindowSeconds: 86400}},
			Rules:     []keybrake.FieldRule{{Name: "small", Expr: "amount <= 5000"}},
			Breaker:   &keybrake.Breaker{RefusalBurst: 5, RefusalWindowSeconds: 60},
		}
		MustCreateGuardedKey(t, s, "key_a", keybrake.Caps{}, g)
		if got := mustFindKey(t, s, "key_a"); got.Guards == nil || got.Guards.Velocity[0].Limit != 3 || got.Guards.Duplicate.MatchMetadata != "billing_period" || got.Guards.Rules[0].Expr != "amount <= 5000" {
			t.Fatalf("guards read back as %+v", got.Guards)
		}
		k, err := s.UpdateKey(ctx, "key_a", keybrake.KeyUpdate{Guards: &keybrake.Guards{}}, T0)
		if err != nil || k.Guards != nil {
			t.Fatalf("UpdateKey removing guards: %v, %+v", err, k)
		}
		if got := mustFindKey(t, s, "key_a"); got.Guards != nil {
			t.Fatalf("guards after removal: %+v", got.Guards)
		}
	})

	t.Run("Duplicate", func(t *testing.T) {
		s := open(t)
		MustCreateGuardedKey(t, s, "key_a", keybrake.Caps{}, dup)
		first := reserveGuarded(t, s, NewCharge("key_a", "i1", "cus_1", USD(10)), T0)
		if first.Guard != nil || first.Reservation == nil {
			t.Fatalf("first charge: %+v", first)
		}
		if res := reserveGuarded(t, s, NewCharge("key_a", "i1", "cus_1", USD(10)), T0.Add(time.Second)); !res.Replay {
			t.Fatalf("same Idempotency-Key: want a replay, got %+v", res)
		}
		res := reserveGuarded(t, s, NewCharge("key_a", "i2", "cus_1", USD(10)), T0.Add(time.Minute))
		if g := res.Guard; g == nil || g.Guard != keybrake.GuardDuplicate || g.EarlierID != first.Reservation.ID || !g.EarlierAt.Equal(T0) {
			t.Fatalf("duplicate: want a refusal naming %s, got %+v", first.Reservation.ID, res.Guard)
		}
		// Another amount, another customer: not duplicates.
		if res := reserveGuarded(t, s, NewCharge("key_a", "i3", "cus_1", USD(11)), T0.Add(time.Minute)); res.Guard != nil {
			t.Fatalf("other amount refused: %+v", res.Guard)
		}
		if res := reserveGuarded(t, s, NewCharge("key_a", "i4", "cus_2", USD(10)), T0.Add(time.Minute)); res.Guard != nil {
			t.Fatalf("other customer refused: %+v", res.Guard)
		}
		// The override, allowed by the key.
		r := NewCharge("key_a", "i5", "cus_1", USD(10))
		r.Override = true
		if res := reserveGuarded(t, s, r, T0.Add(time.Minute)); res.Guard != nil {
			t.Fatalf("override refused: %+v", res.Guard)
		}
		// After the window, and after a release, it passes again.
		if res := reserveGuarded(t, s, NewCharge("key_a", "i6", "cus_2", USD(10)), T0.Add(2*time.Hour)); res.Guard != nil {
			t.Fatalf("after the window: %+v", res.Guard)
		}
		late := reserveGuarded(t, s, NewCharge("key_a", "i7", "cus_3", USD(10)), T0)
		MustSettle(t, s, keybrake.SettleArgs{ID: late.Reservation.ID, State: keybrake.StateReleased, UpstreamStatus: 402, Now: T0})
		if res := reserveGuarded(t, s, NewCharge("key_a", "i8", "cus_3", USD(10)), T0.Add(time.Second)); res.Guard != nil {
			t.Fatalf("after a decline: %+v", res.Guard)
		}
	})

	t.Run("DuplicateOverrideNotAllowed", func(t *testing.T) {
		s := open(t)
		MustCreateGuardedKey(t, s, "key_a", keybrake.Caps{}, &keybrake.Guards{Duplicate: &keybrake.DuplicateGuard{WindowSeconds: 60}})
		reserveGuarded(t, s, NewCharge("key_a", "i1", "cus_1", USD(10)), T0)
		r := NewCharge("key_a", "i2", "cus_1", USD(10))
		r.Override = true
		if res := reserveGuarded(t, s, r, T0); res.Guard == nil {
			t.Fatalf("override on a key that does not allow it passed")
		}
	})

	t.Run("Velocity", func(t *testing.T) {
		s := open(t)
		MustCreateGuardedKey(t, s, "key_a", keybrake.Caps{}, &keybrake.Guards{Velocity: []keybrake.VelocityLimit{
			{Name: "three_a_day", Per: keybrake.PerCustomer, Operations: []string{"charges.create"}, Limit: 3, WindowSeconds: 86400},
			{Name: "five_a_minute", Per: keybrake.PerKey, Limit: 5, WindowSeconds: 60},
		}})
		for i := range 3 {
			if res := reserveGuarded(t, s, NewCharge("key_a", fmt.Sprintf("a%d", i), "cus_1", USD(int64(i+1))), T0.Add(time.Duration(i)*time.Second)); res.Guard != nil {
				t.Fatalf("charge %d refused: %+v", i, res.Guard)
			}
		}
		res := reserveGuarded(t, s, NewCharge("key_a", "a3", "cus_1", USD(9)), T0.Add(10*time.Second))
		// A day is counted in buckets of 24 minutes: the first charge's
		// bucket leaves the window up to 24 minutes after a day.
		if g := res.Guard; g == nil || g.Rule != "three_a_day" || g.Count != 3 ||
			g.RetryAt.Before(T0.Add(24*time.Hour)) || g.RetryAt.After(T0.Add(24*time.Hour+24*time.Minute)) {
			t.Fatalf("fourth charge of the day: %+v", res.Guard)
		}
		// Refunds are not charges: the per-customer limit does not count them.
		r := NewCharge("key_a", "r1", "cus_1", USD(1))
		r.Operation = "refunds.create"
		if res := reserveGuarded(t, s, r, T0.Add(11*time.Second)); res.Guard != nil {
			t.Fatalf("refund refused: %+v", res.Guard)
		}
		// The key's five a minute: 4 so far, one more passes, then none.
		if res := reserveGuarded(t, s, NewCharge("key_a", "b1", "cus_2", USD(1)), T0.Add(12*time.Second)); res.Guard != nil {
			t.Fatalf("fifth in the minute refused: %+v", res.Guard)
		}
		res = reserveGuarded(t, s, NewCharge("key_a", "b2", "cus_3", USD(1)), T0.Add(13*time.Second))
		// A minute is counted by the second.
		if g := res.Guard; g == nil || g.Rule != "five_a_minute" || !g.RetryAt.Equal(T0.Truncate(time.Second).Add(time.Minute)) {
			t.Fatalf("sixth in the minute: %+v", res.Guard)
		}
		if res := reserveGuarded(t, s, NewCharge("key_a", "b3", "cus_3", USD(1)), T0.Add(time.Minute)); res.Guard != nil {
			t.Fatalf("at Retry-After: %+v", res.Guard)
		}
	})

	// Counters: a release takes the reservation out of them, a decline
	// does not, a re-armed retry counts anew and is decided anew.
	t.Run("VelocityCounters", func(t *testing.T) {
		s := open(t)
		MustCreateGuardedKey(t, s, "key_a", keybrake.Caps{}, &keybrake.Guards{Velocity: []keybrake.VelocityLimit{
			{Name: "two_a_minute", Per: keybrake.PerKey, Limit: 2, WindowSeconds: 60},
		}})
		a := reserveGuarded(t, s, NewCharge("key_a", "a", "cus_1", USD(1)), T0)
		b := reserveGuarded(t, s, NewCharge("key_a", "b", "cus_2", USD(1)), T0)
		if res := reserveGuarded(t, s, NewCharge("key_a", "c", "cus_3", USD(1)), T0); res.Guard == nil {
			t.Fatalf("third in the minute passed")
		}
		MustSettle(t, s, keybrake.SettleArgs{ID: a.Reservation.ID, State: keybrake.StateReleased, UpstreamStatus: 400, Now: T0})
		MustSettle(t, s, keybrake.SettleArgs{ID: b.Reservation.ID, State: keybrake.StateReleased, UpstreamStatus: 402, Now: T0})
		if res := reserveGuarded(t, s, NewCharge("key_a", "c", "cus_3", USD(1)), T0); res.Guard != nil {
			t.Fatalf("after a release: %+v", res.Guard)
		}
		if res := reserveGuarded(t, s, NewCharge("key_a", "d", "cus_4", USD(1)), T0); res.Guard == nil {
			t.Fatalf("a decline counts, yet a third passed")
		}
		// Re-arming a (released) is a new attempt: refused while full…
		res, err := s.Rearm(ctx, keybrake.ReserveArgs{Reservation: NewCharge("key_a", "a", "cus_1", USD(1)), Now: T0.Add(time.Second)})
		if err != nil || res.Guard == nil || res.Guard.Rule != "two_a_minute" {
			t.Fatalf("rearm while the limit is full: %v %+v", err, res)
		}
		// …and once the window moved on, it passes and counts.
		later := T0.Add(2 * time.Minute)
		if res, err := s.Rearm(ctx, keybrake.ReserveArgs{Reservation: NewCharge("key_a", "a", "cus_1", USD(1)), Now: later}); err != nil || res.Guard != nil || res.Reservation == nil {
			t.Fatalf("rearm later: %v %+v", err, res)
		}
		reserveGuarded(t, s, NewCharge("key_a", "e", "cus_5", USD(1)), later)
		if res := reserveGuarded(t, s, NewCharge("key_a", "f", "cus_6", USD(1)), later); res.Guard == nil {
			t.Fatalf("the re-armed retry did not count")
		}
	})

	// A fixed window counts from its start (Unix epoch multiples) and
	// frees up at its end; a sliding one at the bucket boundary.
	t.Run("VelocityFixedAndBoundaries", func(t *testing.T) {
		s := open(t)
		MustCreateGuardedKey(t, s, "key_a", keybrake.Caps{}, &keybrake.Guards{Velocity: []keybrake.VelocityLimit{
			{Name: "hourly", Per: keybrake.PerKey, Limit: 2, WindowSeconds: 3600, WindowKind: keybrake.WindowFixed},
		}})
		hour := T0.Truncate(time.Hour)
		end := hour.Add(time.Hour)
		reserveGuarded(t, s, NewCharge("key_a", "a", "cus_1", USD(1)), end.Add(-2*time.Second))
		reserveGuarded(t, s, NewCharge("key_a", "b", "cus_2", USD(1)), end.Add(-time.Second))
		res := reserveGuarded(t, s, NewCharge("key_a", "c", "cus_3", USD(1)), end.Add(-time.Microsecond))
		if g := res.Guard; g == nil || !g.RetryAt.Equal(end) {
			t.Fatalf("third in the hour: %+v; want Retry-At %s", res.Guard, end)
		}
		if res := reserveGuarded(t, s, NewCharge("key_a", "c", "cus_3", USD(1)), end); res.Guard != nil {
			t.Fatalf("at the next hour: %+v", res.Guard)
		}

		s = open(t)
		MustCreateGuardedKey(t, s, "key_b", keybrake.Caps{}, &keybrake.Guards{Velocity: []keybrake.VelocityLimit{
			{Name: "ten_seconds", Per: keybrake.PerKey, Limit: 1, WindowSeconds: 10},
		}})
		at := T0.Truncate(time.Second)
		reserveGuarded(t, s, NewCharge("key_b", "a", "cus_1", USD(1)), at.Add(999*time.Millisecond))
		if res := reserveGuarded(t, s, NewCharge("key_b", "b", "cus_2", USD(1)), at.Add(10*time.Second-time.Microsecond)); res.Guard == nil || !res.Guard.RetryAt.Equal(at.Add(10*time.Second)) {
			t.Fatalf("within ten seconds (by the second): %+v", res.Guard)
		}
		if res := reserveGuarded(t, s, NewCharge("key_b", "b", "cus_2", USD(1)), at.Add(10*time.Second)); res.Guard != nil {
			t.Fatalf("ten seconds later: %+v", res.Guard)
		}
	})

	// The repeat rule counts the key's reservations of the same request in
	// its window, whenever they were made: those made before the rule was
	// set, or before it was removed and set again, count too; a re-armed
	// reservation counts with its new request and time, a pruned one no
	// longer counts.
	t.Run("BreakerRepeatCountsWhatCameBefore", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		repeat := &keybrake.Guards{Breaker: &keybrake.Breaker{RepeatBody: 3, RepeatWindowSeconds: 60}}
		setGuards := func(g *keybrake.Guards) {
			t.Helper()
			if _, err := s.UpdateKey(ctx, "key_a", keybrake.KeyUpdate{Guards: g}, T0); err != nil {
				t.Fatalf("UpdateKey: %v", err)
			}
		}
		for i := range 2 { // made before any guard
			if res := reserveGuarded(t, s, NewCharge("key_a", fmt.Sprintf("before%d", i), "cus_1", USD(1)), T0); res.Guard != nil {
				t.Fatalf("unguarded reservation %d refused: %+v", i, res.Guard)
			}
		}
		setGuards(repeat)
		if res := reserveGuarded(t, s, NewCharge("key_a", "other", "cus_2", USD(1)), T0); res.Guard != nil {
			t.Fatalf("another request refused: %+v", res.Guard)
		}
		// Removed and set again: still counted, once.
		setGuards(&keybrake.Guards{})
		setGuards(&keybrake.Guards{Breaker: &keybrake.Breaker{RepeatBody: 4, RepeatWindowSeconds: 60}})
		setGuards(repeat)
		res := reserveGuarded(t, s, NewCharge("key_a", "third", "cus_1", USD(1)), T0.Add(time.Second))
		if g := res.Guard; g == nil || g.Rule != keybrake.BreakerRepeat {
			t.Fatalf("third repeat, two made before the rule: %+v", res.Guard)
		}
		if _, err := s.ResumeKey(ctx, "key_a", T0); err != nil {
			t.Fatal(err)
		}
		// Out of the window, they no longer count.
		later := T0.Add(2 * time.Minute)
		if res := reserveGuarded(t, s, NewCharge("key_a", "later", "cus_1", USD(1)), later); res.Guard != nil {
			t.Fatalf("a repeat after the window refused: %+v", res.Guard)
		}
		// A released reservation re-armed with another request counts
		// with that request, at its new time, and no longer with its old.
		rel := reserveGuarded(t, s, NewCharge("key_a", "rearmed", "cus_3", USD(1)), later).Reservation
		MustSettle(t, s, keybrake.SettleArgs{ID: rel.ID, State: keybrake.StateReleased, Now: later})
		if res, err := s.Rearm(ctx, keybrake.ReserveArgs{Reservation: NewCharge("key_a", "rearmed", "cus_1", USD(1)), Now: later.Add(10 * time.Second)}); err != nil || res.Guard != nil {
			t.Fatalf("Rearm = %+v, %v", res, err)
		}
		if res := reserveGuarded(t, s, NewCharge("key_a", "after-rearm", "cus_1", USD(1)), later.Add(20*time.Second)); res.Guard == nil || res.Guard.Rule != keybrake.BreakerRepeat {
			t.Fatalf("third repeat counting a re-armed reservation: %+v", res.Guard)
		}
		if _, err := s.ResumeKey(ctx, "key_a", T0); err != nil {
			t.Fatal(err)
		}
		for _, idem := range []string{"cus3-a", "cus3-b"} {
			if res := reserveGuarded(t, s, NewCharge("key_a", idem, "cus_3", USD(1)), later.Add(20*time.Second)); res.Guard != nil {
				t.Fatalf("%s: the re-armed reservation still counted with its old request: %+v", idem, res.Guard)
			}
		}

		// A pruned reservation no longer counts.
		MustCreateGuardedKey(t, s, "key_b", keybrake.Caps{}, &keybrake.Guards{Breaker: &keybrake.Breaker{RepeatBody: 2, RepeatWindowSeconds: 400 * 86400}})
		old := reserveGuarded(t, s, NewCharge("key_b", "p1", "cus_1", USD(1)), T0).Reservation
		MustSettle(t, s, keybrake.SettleArgs{ID: old.ID, State: keybrake.StateSettled, SettledMicros: USD(1), Now: T0})
		pruneAt := T0.Add(72 * time.Hour)
		if n, err := s.PruneReservations(ctx, keybrake.PruneArgs{Before: pruneAt, Now: pruneAt}); err != nil || n == 0 {
			t.Fatalf("PruneReservations = %d, %v", n, err)
		}
		if res := reserveGuarded(t, s, NewCharge("key_b", "p2", "cus_1", USD(1)), pruneAt); res.Guard != nil {
			t.Fatalf("a pruned reservation still counted: %+v", res.Guard)
		}

		// Made while the rule was removed, and settled: counted once the
		// rule is set again, with those made under it before.
		MustCreateGuardedKey(t, s, "key_c", keybrake.Caps{}, repeat)
		reserveGuarded(t, s, NewCharge("key_c", "c1", "cus_1", USD(1)), T0)
		if _, err := s.UpdateKey(ctx, "key_c", keybrake.KeyUpdate{Guards: &keybrake.Guards{}}, T0); err != nil {
			t.Fatal(err)
		}
		off := reserveGuarded(t, s, NewCharge("key_c", "c2", "cus_1", USD(1)), T0).Reservation
		MustSettle(t, s, keybrake.SettleArgs{ID: off.ID, State: keybrake.StateSettled, SettledMicros: USD(1), Now: T0})
		if _, err := s.UpdateKey(ctx, "key_c", keybrake.KeyUpdate{Guards: repeat}, T0); err != nil {
			t.Fatal(err)
		}
		if res := reserveGuarded(t, s, NewCharge("key_c", "c3", "cus_1", USD(1)), T0.Add(time.Second)); res.Guard == nil || res.Guard.Rule != keybrake.BreakerRepeat {
			t.Fatalf("third repeat, one made while the rule was removed: %+v", res.Guard)
		}
	})

	// Concurrent repeats (PostgreSQL decides them in batches,
	// keybrake_reserve_many, each row's repeat_rule set by the trigger as
	// it is inserted; SQLite one by one in a group commit): the rule lets
	// exactly repeat_body-1 through, whatever the interleaving, also for a
	// key whose rule was added after some of its reservations were made.
	t.Run("BreakerRepeatConcurrent", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		reserveGuarded(t, s, NewCharge("key_a", "before", "cus_1", USD(1)), T0)
		if _, err := s.UpdateKey(ctx, "key_a", keybrake.KeyUpdate{Guards: &keybrake.Guards{Breaker: &keybrake.Breaker{RepeatBody: 4, RepeatWindowSeconds: 60}}}, T0); err != nil {
			t.Fatal(err)
		}
		const n = 16
		var (
			wg       sync.WaitGroup
			reserved atomic.Int64
			refused  atomic.Int64
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewCharge("key_a", fmt.Sprintf("c%d", i), "cus_1", USD(1)), Now: T0.Add(time.Second)})
				switch {
				case err == nil && res.Reservation != nil:
					reserved.Add(1)
				case err == nil && res.Guard != nil && res.Guard.Rule == keybrake.BreakerRepeat:
					refused.Add(1)
				case err != nil && keybrake.ErrorCode(err) == keybrake.EFORBIDDEN, err != nil && keybrake.ErrorCode(err) == keybrake.EUNAUTHORIZED:
					refused.Add(1) // the breaker suspended the key
				default:
					t.Errorf("Reserve c%d = %+v, %v", i, res, err)
				}
			}()
		}
		wg.Wait()
		if got := reserved.Load(); got != 2 {
			t.Fatalf("%d concurrent repeats reserved (one made before the rule); want 2 under repeat_body 4", got)
		}
	})

	t.Run("BreakerRepeat", func(t *testing.T) {
		s := open(t)
		MustCreateGuardedKey(t, s, "key_a", keybrake.Caps{}, &keybrake.Guards{Breaker: &keybrake.Breaker{RepeatBody: 3, RepeatWindowSeconds: 60}})
		for i := range 2 {
			r := NewCharge("key_a", fmt.Sprintf("i%d", i), "cus_1", USD(1))
			if res := reserveGuarded(t, s, r, T0); res.Guard != nil {
				t.Fatalf("repeat %d refused: %+v", i, res.Guard)
			}
		}
		res := reserveGuarded(t, s, NewCharge("key_a", "i2", "cus_1", USD(1)), T0)
		if g := res.Guard; g == nil || g.Rule != keybrake.BreakerRepeat || !g.Suspended {
			t.Fatalf("third repeat: %+v", res.Guard)
		}
		k := mustFindKey(t, s, "key_a")
		if k.SuspendedAt == nil || k.Usable(T0) == nil || keybrake.ErrorCode(k.Usable(T0)) != keybrake.EFORBIDDEN {
			t.Fatalf("key not suspended: %+v", k)
		}
		checkBreakerEvent(t, s, "key_a", keybrake.BreakerRepeat)
		if _, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewCharge("key_a", "other", "cus_9", USD(1)), Now: T0}); keybrake.ErrorCode(err) != keybrake.EFORBIDDEN {
			t.Fatalf("Reserve on a suspended key: %v", err)
		}
		if k, err := s.ResumeKey(ctx, "key_a", T0); err != nil || k.SuspendedAt != nil {
			t.Fatalf("ResumeKey: %v %+v", err, k)
		}
		if _, err := s.ResumeKey(ctx, "key_nope", T0); keybrake.ErrorCode(err) != keybrake.ENOTFOUND {
			t.Fatalf("ResumeKey unknown: %v", err)
		}
		if res := reserveGuarded(t, s, NewCharge("key_a", "other", "cus_9", USD(1)), T0); res.Guard != nil {
			t.Fatalf("after resume: %+v", res.Guard)
		}
	})

	t.Run("BreakerSpendRate", func(t *testing.T) {
		s := open(t)
		MustCreateGuardedKey(t, s, "key_a", keybrake.Caps{}, &keybrake.Guards{Breaker: &keybrake.Breaker{SpendMultiple: 10, SpendWindowSeconds: 3600, BaselineSeconds: 11 * 3600}})
		// No baseline: never trips.
		reserveGuarded(t, s, NewCharge("key_a", "i0", "cus_1", USD(100)), T0)
		// Baseline: $100 over 10 hours is $10 an hour; $100 in the next hour is 10x, not over.
		now := T0.Add(5 * time.Hour)
		if res := reserveGuarded(t, s, NewCharge("key_a", "i1", "cus_1", USD(99)), now); res.Guard != nil {
			t.Fatalf("at 9.9x: %+v", res.Guard)
		}
		if res := reserveGuarded(t, s, NewCharge("key_a", "i2", "cus_1", USD(1)), now); res.Guard != nil {
			t.Fatalf("at exactly 10x: %+v", res.Guard)
		}
		res := reserveGuarded(t, s, NewCharge("key_a", "i3", "cus_2", keybrake.Micros(1)), now)
		if g := res.Guard; g == nil || g.Rule != keybrake.BreakerSpendRate || !g.Suspended {
			t.Fatalf("over 10x: %+v", res.Guard)
		}
		checkBreakerEvent(t, s, "key_a", keybrake.BreakerSpendRate)
	})

	t.Run("BreakerSpendRateOnRaise", func(t *testing.T) {
		// Raising a hold is decided by the spend-rate rule like a
		// reservation of the difference: a burst of raises trips it.
		s := open(t)
		MustCreateGuardedKey(t, s, "key_a", keybrake.Caps{}, &keybrake.Guards{Breaker: &keybrake.Breaker{SpendMultiple: 10, SpendWindowSeconds: 3600, BaselineSeconds: 11 * 3600}})
		reserveGuarded(t, s, NewCharge("key_a", "i0", "cus_1", USD(100)), T0)
		now := T0.Add(5 * time.Hour)
		h := MustHold(t, s, "key_a", "i1", "pi_1", USD(1), now, now.Add(time.Hour))
		res, err := s.RaiseHold(ctx, keybrake.RaiseArgs{ID: h.ID, Amount: 10000, Currency: "usd", Micros: USD(100), Now: now})
		if err != nil || res.Guard != nil || res.OverCap != nil {
			t.Fatalf("raise to exactly 10x: %+v, %v", res, err)
		}
		res, err = s.RaiseHold(ctx, keybrake.RaiseArgs{ID: h.ID, Amount: 10001, Currency: "usd", Micros: USD(100) + 1, Now: now})
		if err != nil || res.Guard == nil || res.Guard.Rule != keybrake.BreakerSpendRate || !res.Guard.Suspended {
			t.Fatalf("raise over 10x: %+v, %v", res, err)
		}
		if k := mustFindKey(t, s, "key_a"); k.SuspendedAt == nil || !strings.Contains(k.SuspendedReason, keybrake.BreakerSpendRate) {
			t.Fatalf("key after the tripping raise: %+v", k)
		}
		if got := mustFindReservation(t, s, h.ID); got.Micros != USD(100) {
			t.Fatalf("a refused raise changed the hold: %+v", got)
		}
	})

	t.Run("BreakerRefusalBurst", func(t *testing.T) {
		s := open(t)
		MustCreateGuardedKey(t, s, "key_a", keybrake.Caps{}, &keybrake.Guards{Breaker: &keybrake.Breaker{RefusalBurst: 3, RefusalWindowSeconds: 10}})
		for i, at := range []time.Duration{0, 11 * time.Second, 12 * time.Second} {
			got, err := s.CountRefusal(ctx, keybrake.RefusalArgs{KeyID: "key_a", Reason: "over cap", Now: T0.Add(at)})
			if err != nil || got {
				t.Fatalf("refusal %d: suspended %v, %v", i, got, err)
			}
		}
		got, err := s.CountRefusal(ctx, keybrake.RefusalArgs{KeyID: "key_a", Reason: "over cap", Now: T0.Add(13 * time.Second)})
		if err != nil || !got {
			t.Fatalf("third refusal in 10s: suspended %v, %v", got, err)
		}
		if k := mustFindKey(t, s, "key_a"); k.SuspendedAt == nil || k.SuspendedReason == "" {
			t.Fatalf("key not suspended: %+v", k)
		}
		checkBreakerEvent(t, s, "key_a", keybrake.BreakerRefusals)
		if _, err := s.CountRefusal(ctx, keybrake.RefusalArgs{KeyID: "key_nope", Now: T0}); keybrake.ErrorCode(err) != keybrake.ENOTFOUND {
			t.Fatalf("unknown key: %v", err)
		}
	})

	// The suspension quotes the last refusal, whose text the client chose
	// in part (a refused customer): not UTF-8, it made PostgreSQL refuse
	// the suspension, so the breaker never tripped there.
	t.Run("BreakerRefusalBurstOddReason", func(t *testing.T) {
		s := open(t)
		MustCreateGuardedKey(t, s, "key_a", keybrake.Caps{}, &keybrake.Guards{Breaker: &keybrake.Breaker{RefusalBurst: 2, RefusalWindowSeconds: 10}})
		reason := "This vault key may not act on customer cus_\xff\x00. " + strings.Repeat("é", 150)
		for i, want := range []bool{false, true} {
			got, err := s.CountRefusal(ctx, keybrake.RefusalArgs{KeyID: "key_a", Reason: reason, Now: T0.Add(time.Duration(i) * time.Second)})
			if err != nil || got != want {
				t.Fatalf("refusal %d: suspended %v, %v; want %v", i, got, err, want)
			}
		}
		if k := mustFindKey(t, s, "key_a"); k.SuspendedAt == nil || !strings.Contains(k.SuspendedReason, "cus_\uFFFD\uFFFD.") || !utf8.ValidString(k.SuspendedReason) {
			t.Fatalf("key after the burst: %+v", k)
		}
	})

	t.Run("Suspend", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		k, err := s.SuspendKey(ctx, "key_a", "by hand", T0)
		if err != nil || k.SuspendedAt == nil || !k.SuspendedAt.Equal(T0) || k.SuspendedReason != "by hand" {
			t.Fatalf("SuspendKey: %v %+v", err, k)
		}
		if k, _ = s.SuspendKey(ctx, "key_a", "again", T0.Add(time.Hour)); !k.SuspendedAt.Equal(T0) || k.SuspendedReason != "by hand" {
			t.Fatalf("second SuspendKey changed it: %+v", k)
		}
		if _, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_a", "i", USD(1)), Now: T0}); keybrake.ErrorCode(err) != keybrake.EFORBIDDEN {
			t.Fatalf("Reserve on suspended key: %v", err)
		}
		if _, err := s.SuspendKey(ctx, "key_nope", "x", T0); keybrake.ErrorCode(err) != keybrake.ENOTFOUND {
			t.Fatalf("SuspendKey unknown: %v", err)
		}
	})

	// 200 concurrent charges, one key: the guards are exact.
	t.Run("Duplicate200", func(t *testing.T) {
		s := open(t)
		MustCreateGuardedKey(t, s, "key_a", keybrake.Caps{}, dup)
		var ok, refused atomic.Int64
		run200(t, func(i int) error {
			res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewCharge("key_a", fmt.Sprintf("i%d", i), fmt.Sprintf("cus_%d", i%10), USD(10)), Now: T0})
			if err == nil && res.Guard != nil {
				refused.Add(1)
			} else if err == nil {
				ok.Add(1)
			}
			return err
		})
		if ok.Load() != 10 || refused.Load() != 190 {
			t.Fatalf("passed %d, refused %d; want 10 and 190 (one per customer)", ok.Load(), refused.Load())
		}
	})
	t.Run("Velocity200", func(t *testing.T) {
		s := open(t)
		MustCreateGuardedKey(t, s, "key_a", keybrake.Caps{}, &keybrake.Guards{Velocity: []keybrake.VelocityLimit{
			{Name: "per_customer", Per: keybrake.PerCustomer, Limit: 3, WindowSeconds: 86400},
			{Name: "per_key", Per: keybrake.PerKey, Limit: 60, WindowSeconds: 60},
		}})
		var ok atomic.Int64
		perCustomer := make([]atomic.Int64, 40)
		run200(t, func(i int) error {
			res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewCharge("key_a", fmt.Sprintf("i%d", i), fmt.Sprintf("cus_%d", i%40), USD(int64(i+1))), Now: T0})
			if err == nil && res.Guard == nil {
				ok.Add(1)
				perCustomer[i%40].Add(1)
			}
			return err
		})
		if ok.Load() != 60 {
			t.Fatalf("passed %d; want 60 (the key's limit)", ok.Load())
		}
		for c := range perCustomer {
			if n := perCustomer[c].Load(); n > 3 {
				t.Fatalf("customer %d passed %d times; limit 3", c, n)
			}
		}
	})
	t.Run("Repeat200", func(t *testing.T) {
		s := open(t)
		MustCreateGuardedKey(t, s, "key_a", keybrake.Caps{}, &keybrake.Guards{Breaker: &keybrake.Breaker{RepeatBody: 5, RepeatWindowSeconds: 60}})
		var ok, suspended, forbidden atomic.Int64
		run200(t, func(i int) error {
			res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewCharge("key_a", fmt.Sprintf("i%d", i), "cus_1", USD(1)), Now: T0})
			switch {
			case keybrake.ErrorCode(err) == keybrake.EFORBIDDEN:
				forbidden.Add(1)
				return nil
			case err == nil && res.Guard != nil && res.Guard.Suspended:
				suspended.Add(1)
			case err == nil:
				ok.Add(1)
			}
			return err
		})
		if ok.Load() != 4 || suspended.Load() != 1 || forbidden.Load() != 195 {
			t.Fatalf("passed %d, tripped %d, refused as suspended %d; want 4, 1, 195", ok.Load(), suspended.Load(), forbidden.Load())
		}
	})
	// Guards only ever refuse more: with a cap, whatever passes with the
	// guards also passes the cap alone, and the cap holds.
	t.Run("NeverLooserThanCap", func(t *testing.T) {
		for seed := range uint64(5) {
			rng := rand.New(rand.NewPCG(seed, 14))
			s := open(t)
			capped := keybrake.Caps{Total: Ptr(USD(200))}
			MustCreateGuardedKey(t, s, "key_g", capped, &keybrake.Guards{
				Duplicate: &keybrake.DuplicateGuard{WindowSeconds: 600},
				Velocity:  []keybrake.VelocityLimit{{Name: "v", Per: keybrake.PerCustomer, Limit: 4, WindowSeconds: 300}},
			})
			MustCreateCappedKey(t, s, "key_c", "UTC", capped)
			now := T0
			for i := range 150 {
				now = now.Add(time.Duration(rng.IntN(20)) * time.Second)
				m := USD(int64(1 + rng.IntN(8)))
				cus := fmt.Sprintf("cus_%d", rng.IntN(6))
				idem := fmt.Sprintf("i%d", i)
				g := reserveGuarded(t, s, NewCharge("key_g", idem, cus, m), now)
				c := reserveGuarded(t, s, NewCharge("key_c", idem, cus, m), now)
				if g.Guard == nil && g.OverCap == nil && c.OverCap != nil {
					// key_g spent no more than key_c so far, so the cap
					// alone refusing means key_g's cap must refuse too.
					t.Fatalf("seed %d, request %d: the guarded key let through what the cap alone refused", seed, i)
				}
				if c.OverCap == nil && g.Reservation == nil {
					// key_g refused: drop key_c's to keep them comparable.
					MustSettle(t, s, keybrake.SettleArgs{ID: c.Reservation.ID, State: keybrake.StateReleased, UpstreamStatus: 400, Now: now})
				}
			}
			if sp := MustSpend(t, s, "key_g", now, time.UTC); sp.Total > USD(200) {
				t.Fatalf("seed %d: guarded key spent %s over its cap", seed, sp.Total)
			}
		}
	})

	t.Run("HeldObject", func(t *testing.T) { testGuardHeld(t, open) })
	t.Run("Requests", func(t *testing.T) { testGuardRequests(t, open) })
}

// run200 runs fn(i) for i in [0, 200) at once and fails on any error.
func run200(t *testing.T, fn func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	start := make(chan struct{})
	for i := range 200 {
		wg.Go(func() {
			<-start
			if err := fn(i); err != nil {
				errs <- err
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("%v", err)
	}
}

// checkBreakerEvent fails unless the admin audit log of s holds exactly one
// entry, the breaker's suspension of keyID by rule, written with it.
func checkBreakerEvent(t *testing.T, s keybrake.Store, keyID, rule string) {
	t.Helper()
	as, ok := s.(keybrake.AdminStore)
	if !ok {
		return
	}
	got := mustAdminEvents(t, as)
	if len(got) != 1 || got[0].Actor != "breaker" || got[0].Action != "key.suspend" || got[0].Target != keyID ||
		!strings.HasPrefix(got[0].Detail, "breaker "+rule+":") {
		t.Fatalf("admin events after the breaker tripped %s on %s: %+v", rule, keyID, got)
	}
	k := mustFindKey(t, s, keyID)
	if !got[0].Time.Equal(*k.SuspendedAt) || got[0].Detail != k.SuspendedReason {
		t.Fatalf("breaker's entry %+v, key suspended at %v for %q", got[0], k.SuspendedAt, k.SuspendedReason)
	}
}
