package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// MustHold reserves m on keyID and settles it to held on objectID, linked
// until holdUntil: the state of a payment intent created through keybrake
// and not yet confirmed.
func MustHold(tb testing.TB, s keybrake.Store, keyID, idem, objectID string, m keybrake.Micros, now, holdUntil time.Time) *keybrake.Reservation {
	tb.Helper()
	r := MustReserve(tb, s, keyID, idem, m, now)
	r = MustSettle(tb, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateHeld, SettledMicros: m, Amount: int64(m / 10000), Currency: "usd", ObjectID: objectID, UpstreamStatus: 200, Now: now})
	if err := s.LinkHold(context.Background(), keyID, objectID, r.ID, holdUntil); err != nil {
		tb.Fatalf("LinkHold: %v", err)
	}
	return r
}

func testHolds(t *testing.T, open opener) {
	ctx := context.Background()
	utc := time.UTC
	later := T0.Add(time.Minute)
	lockArgs := func(owner string, now time.Time) keybrake.LockArgs {
		return keybrake.LockArgs{KeyID: "key_a", ObjectID: "pi_1", Owner: owner, Now: now, Until: now.Add(time.Minute)}
	}

	t.Run("HeldCountsInFull", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: Ptr(USD(10))})
		MustHold(t, s, "key_a", "idem_1", "pi_1", USD(10), T0, T0.Add(time.Hour))
		wantSpend(t, MustSpend(t, s, "key_a", T0, utc), keybrake.Spend{Day: USD(10), Month: USD(10), Total: USD(10), Held: USD(10)})
		MustOverCap(t, s, "key_a", "idem_2", 1, later)
	})
	t.Run("HeldObjects", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: Ptr(USD(100))})
		MustCreateCappedKey(t, s, "key_b", "UTC", keybrake.Caps{Total: Ptr(USD(100))})
		MustHold(t, s, "key_a", "idem_1", "pi_held", USD(5), T0, T0.Add(time.Hour))
		r := MustHold(t, s, "key_a", "idem_2", "pi_released", USD(5), T0, T0.Add(time.Hour))
		MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateReleased, Now: later})
		MustHold(t, s, "key_b", "idem_3", "pi_other", USD(5), T0, T0.Add(time.Hour))
		if _, err := s.LockObject(ctx, keybrake.LockArgs{KeyID: "key_a", ObjectID: "pi_locked", Owner: "req_1", Now: T0, Until: later}); err != nil {
			t.Fatal(err)
		}
		got, err := s.HeldObjects(ctx, "key_a", []string{"pi_held", "pi_released", "pi_other", "pi_locked", "pi_unknown"})
		if err != nil || len(got) != 1 || !got["pi_held"] {
			t.Fatalf("HeldObjects = %v, %v; want only pi_held", got, err)
		}
		if got, err := s.HeldObjects(ctx, "key_a", nil); err != nil || len(got) != 0 {
			t.Fatalf("HeldObjects(none) = %v, %v", got, err)
		}
		if _, err := s.HeldObjects(ctx, "key_a", make([]string, keybrake.MaxHeldObjects+1)); keybrake.ErrorCode(err) != keybrake.EINVALID {
			t.Fatalf("HeldObjects(too many) = %v; want EINVALID", err)
		}
	})
	t.Run("HeldGrowsNeverShrinks", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: Ptr(USD(10))})
		r := MustHold(t, s, "key_a", "idem_1", "pi_1", USD(5), T0, T0.Add(time.Hour))
		got := MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateHeld, SettledMicros: USD(12), Amount: 1200, Currency: "usd", Now: later})
		if got.Micros != USD(12) || got.Amount != 1200 || got.State != keybrake.StateHeld {
			t.Fatalf("grown hold = %+v", got)
		}
		got = MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateHeld, SettledMicros: USD(3), Amount: 300, Currency: "usd", Now: later})
		if got.Micros != USD(12) || got.Amount != 1200 {
			t.Fatalf("a hold shrank: %+v", got)
		}
		wantSpend(t, MustSpend(t, s, "key_a", T0, utc), keybrake.Spend{Day: USD(12), Month: USD(12), Total: USD(12), Held: USD(12)})
	})
	t.Run("HeldThenSettledReleasesTheRest", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: Ptr(USD(25))})
		r := MustHold(t, s, "key_a", "idem_1", "ch_1", USD(15), T0, T0.Add(time.Hour))
		MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateSettled, SettledMicros: USD(10), Amount: 1000, Currency: "usd", Now: later})
		wantSpend(t, MustSpend(t, s, "key_a", T0, utc), keybrake.Spend{Day: USD(10), Month: USD(10), Total: USD(10)})
		MustReserve(t, s, "key_a", "idem_2", USD(15), later)
	})
	t.Run("HeldThenReleased", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		r := MustHold(t, s, "key_a", "idem_1", "pi_1", USD(15), T0, T0.Add(time.Hour))
		MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateReleased, Now: later})
		wantSpend(t, MustSpend(t, s, "key_a", T0, utc), keybrake.Spend{})
		_, err := s.Settle(ctx, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateHeld, SettledMicros: USD(1), Now: later})
		wantCode(t, err, keybrake.ECONFLICT)
	})
	t.Run("Lock", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		if r, err := s.LockObject(ctx, lockArgs("req_1", T0)); err != nil || r != nil {
			t.Fatalf("first lock = %v, %v; want nil, nil", r, err)
		}
		_, err := s.LockObject(ctx, lockArgs("req_2", T0.Add(time.Second)))
		wantCode(t, err, keybrake.ECONFLICT)
		if _, err := s.LockObject(ctx, lockArgs("req_1", T0.Add(time.Second))); err != nil {
			t.Fatalf("relock by its owner: %v", err)
		}
		if err := s.UnlockObject(ctx, "key_a", "pi_1", "req_2"); err != nil {
			t.Fatal(err)
		}
		_, err = s.LockObject(ctx, lockArgs("req_2", T0.Add(2*time.Second)))
		wantCode(t, err, keybrake.ECONFLICT) // another owner's unlock changed nothing
		if err := s.UnlockObject(ctx, "key_a", "pi_1", "req_1"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.LockObject(ctx, lockArgs("req_2", T0.Add(3*time.Second))); err != nil {
			t.Fatalf("lock after unlock: %v", err)
		}
		// An expired lock is free: its owner died.
		if _, err := s.LockObject(ctx, lockArgs("req_3", T0.Add(3*time.Second+time.Minute))); err != nil {
			t.Fatalf("lock after expiry: %v", err)
		}
		// The lock is the object's: another key's request waits too, and
		// takes it once it is free.
		MustCreateKey(t, s, NewKey("key_b"))
		at := T0.Add(3*time.Second + time.Minute + time.Second)
		_, err = s.LockObject(ctx, keybrake.LockArgs{KeyID: "key_b", ObjectID: "pi_1", Owner: "req_4", Now: at, Until: at.Add(time.Minute)})
		wantCode(t, err, keybrake.ECONFLICT)
		if err := s.UnlockObject(ctx, "key_a", "pi_1", "req_3"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.LockObject(ctx, keybrake.LockArgs{KeyID: "key_b", ObjectID: "pi_1", Owner: "req_4", Now: at, Until: at.Add(time.Minute)}); err != nil {
			t.Fatalf("other key after unlock: %v", err)
		}
		_, err = s.LockObject(ctx, keybrake.LockArgs{KeyID: "key_a", ObjectID: "pi_1", Owner: "req_5", Now: at, Until: at.Add(time.Minute)})
		wantCode(t, err, keybrake.ECONFLICT)
	})
	t.Run("LockReturnsTheHold", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		r := MustHold(t, s, "key_a", "idem_1", "pi_1", USD(5), T0, T0.Add(time.Hour))
		got, err := s.LockObject(ctx, lockArgs("req_1", later))
		if err != nil || got == nil || got.ID != r.ID || got.State != keybrake.StateHeld {
			t.Fatalf("LockObject = %+v, %v; want the hold %s", got, err, r.ID)
		}
	})
	t.Run("LinkKeepsALiveHold", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		r1 := MustHold(t, s, "key_a", "idem_1", "pi_1", USD(5), T0, T0.Add(time.Hour))
		r2 := MustReserve(t, s, "key_a", "idem_2", USD(5), T0)
		wantCode(t, s.LinkHold(ctx, "key_a", "pi_1", r2.ID, T0.Add(time.Hour)), keybrake.ECONFLICT)
		wantCode(t, s.LinkHold(ctx, "key_a", "pi_1", "rsv_nope", T0.Add(time.Hour)), keybrake.ENOTFOUND)
		MustSettle(t, s, keybrake.SettleArgs{ID: r1.ID, State: keybrake.StateReleased, Now: later})
		if err := s.LinkHold(ctx, "key_a", "pi_1", r2.ID, T0.Add(time.Hour)); err != nil {
			t.Fatalf("link over a final hold: %v", err)
		}
		got, err := s.LockObject(ctx, lockArgs("req_1", later))
		if err != nil || got == nil || got.ID != r2.ID {
			t.Fatalf("LockObject = %+v, %v; want %s", got, err, r2.ID)
		}
	})
	t.Run("Raise", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Daily: Ptr(USD(20)), Total: Ptr(USD(30))})
		r := MustHold(t, s, "key_a", "idem_1", "pi_1", USD(5), T0, T0.Add(time.Hour))
		res, err := s.RaiseHold(ctx, keybrake.RaiseArgs{ID: r.ID, Amount: 2000, Currency: "usd", Micros: USD(20), Now: later})
		if err != nil || res.OverCap != nil || res.Reservation.Micros != USD(20) || res.Reservation.Amount != 2000 {
			t.Fatalf("raise to 20 = %+v, %v", res, err)
		}
		wantSpend(t, MustSpend(t, s, "key_a", T0, utc), keybrake.Spend{Day: USD(20), Month: USD(20), Total: USD(20), Held: USD(20)})
		res, err = s.RaiseHold(ctx, keybrake.RaiseArgs{ID: r.ID, Amount: 2001, Currency: "usd", Micros: USD(20) + 1, Now: later})
		if err != nil || res.OverCap == nil || res.OverCap.Window != keybrake.WindowDaily || res.OverCap.Requested != 1 {
			t.Fatalf("raise over the daily cap = %+v, %v", res, err)
		}
		if got := mustFindReservation(t, s, r.ID); got.Micros != USD(20) || got.Amount != 2000 {
			t.Fatalf("refused raise changed the hold: %+v", got)
		}
		// Lower or equal: nothing changes.
		res, err = s.RaiseHold(ctx, keybrake.RaiseArgs{ID: r.ID, Amount: 100, Currency: "usd", Micros: USD(1), Now: later})
		if err != nil || res.Reservation.Micros != USD(20) {
			t.Fatalf("lower raise = %+v, %v", res, err)
		}
		// On the next day the whole hold would move there: $25 over $20.
		nextDay := T0.Add(24 * time.Hour)
		res, err = s.RaiseHold(ctx, keybrake.RaiseArgs{ID: r.ID, Amount: 2500, Currency: "usd", Micros: USD(25), Now: nextDay})
		// (reported as the hold's $20 moving in, spent, and the $5 raise requested)
		if err != nil || res.OverCap == nil || res.OverCap.Window != keybrake.WindowDaily || res.OverCap.Spent != USD(20) || res.OverCap.Requested != USD(5) {
			t.Fatalf("raise on the next day = %+v, %v; want refused by that day's cap for the whole hold", res, err)
		}
		if got := mustFindReservation(t, s, r.ID); got.Day != r.Day || got.Micros != USD(20) {
			t.Fatalf("refused raise moved the hold: %+v", got)
		}
		MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateSettled, SettledMicros: USD(20), Amount: 2000, Currency: "usd", Now: later})
		_, err = s.RaiseHold(ctx, keybrake.RaiseArgs{ID: r.ID, Amount: 2100, Currency: "usd", Micros: USD(21), Now: later})
		wantCode(t, err, keybrake.ECONFLICT)
		_, err = s.RaiseHold(ctx, keybrake.RaiseArgs{ID: "rsv_nope", Micros: USD(21), Now: later})
		wantCode(t, err, keybrake.ENOTFOUND)
	})
	// A hold raised on a later day moves there whole (keybrake.RaiseBuckets):
	// counting the raise in the hold's day let one day move its daily cap
	// several times over; counting only the difference in the raise's day
	// would still leave the hold's first amount in a day already past.
	t.Run("RaiseOnALaterDayMovesTheHold", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Daily: Ptr(USD(20)), Monthly: Ptr(USD(25)), Total: Ptr(USD(100))})
		monthEnd := time.Date(2026, 11, 30, 23, 30, 0, 0, time.UTC)
		next := monthEnd.Add(time.Hour) // 2026-12-01
		r := MustHold(t, s, "key_a", "idem_1", "pi_1", USD(5), monthEnd, monthEnd.Add(24*time.Hour))
		MustReserve(t, s, "key_a", "idem_2", USD(10), next)
		res, err := s.RaiseHold(ctx, keybrake.RaiseArgs{ID: r.ID, Amount: 1100, Currency: "usd", Micros: USD(11), Now: next})
		// $10 spent that day and the hold's $5 moving in, $6 more requested.
		if err != nil || res.OverCap == nil || res.OverCap.Window != keybrake.WindowDaily || res.OverCap.Spent != USD(15) || res.OverCap.Requested != USD(6) {
			t.Fatalf("raise to $11 on the next day = %+v, %v; want refused: $10 spent that day, $11 to hold", res, err)
		}
		res, err = s.RaiseHold(ctx, keybrake.RaiseArgs{ID: r.ID, Amount: 1000, Currency: "usd", Micros: USD(10), Now: next})
		if err != nil || res.OverCap != nil || res.Reservation.Micros != USD(10) || res.Reservation.Day != "2026-12-01" || res.Reservation.Month != "2026-12" {
			t.Fatalf("raise to $10 on the next day = %+v, %v", res, err)
		}
		wantSpend(t, MustSpend(t, s, "key_a", monthEnd, utc), keybrake.Spend{Day: 0, Month: 0, Total: USD(20), Held: USD(10)})
		wantSpend(t, MustSpend(t, s, "key_a", next, utc), keybrake.Spend{Day: USD(20), Month: USD(20), Total: USD(20), Held: USD(10)})
		// Its settlement and a later raise move the day it moved to.
		res, err = s.RaiseHold(ctx, keybrake.RaiseArgs{ID: r.ID, Amount: 1100, Currency: "usd", Micros: USD(11), Now: next})
		if err != nil || res.OverCap == nil || res.OverCap.Window != keybrake.WindowDaily || res.OverCap.Requested != USD(1) {
			t.Fatalf("raise by $1 the same day = %+v, %v", res, err)
		}
		MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateSettled, SettledMicros: USD(8), Amount: 800, Currency: "usd", Now: next})
		wantSpend(t, MustSpend(t, s, "key_a", next, utc), keybrake.Spend{Day: USD(18), Month: USD(18), Total: USD(18)})
		wantSpend(t, MustSpend(t, s, "key_a", monthEnd, utc), keybrake.Spend{Total: USD(18)})
	})
	t.Run("RaisePerRequest", func(t *testing.T) {
		// The per-request cap bounds the object's whole amount, one
		// payment however many raises made it; the windows the difference.
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{PerRequest: Ptr(USD(50)), Total: Ptr(USD(500))})
		r := MustHold(t, s, "key_a", "idem_1", "pi_1", USD(40), T0, T0.Add(time.Hour))
		res, err := s.RaiseHold(ctx, keybrake.RaiseArgs{ID: r.ID, Amount: 5000, Currency: "usd", Micros: USD(50), Now: later})
		if err != nil || res.OverCap != nil || res.Reservation.Micros != USD(50) {
			t.Fatalf("raise to the per-request cap = %+v, %v", res, err)
		}
		res, err = s.RaiseHold(ctx, keybrake.RaiseArgs{ID: r.ID, Amount: 8900, Currency: "usd", Micros: USD(89), Now: later})
		if err != nil || res.OverCap == nil || res.OverCap.Window != keybrake.WindowPerRequest || res.OverCap.Requested != USD(89) {
			t.Fatalf("raise by $39 to $89 under a $50 per-request cap = %+v, %v", res, err)
		}
		wantSpend(t, MustSpend(t, s, "key_a", T0, utc), keybrake.Spend{Day: USD(50), Month: USD(50), Total: USD(50), Held: USD(50)})
	})
	t.Run("RaiseOnRevokedKey", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		r := MustHold(t, s, "key_a", "idem_1", "pi_1", USD(5), T0, T0.Add(time.Hour))
		if _, err := s.RevokeKey(ctx, "key_a", T0); err != nil {
			t.Fatal(err)
		}
		_, err := s.RaiseHold(ctx, keybrake.RaiseArgs{ID: r.ID, Amount: 600, Currency: "usd", Micros: USD(6), Now: later})
		wantCode(t, err, keybrake.EUNAUTHORIZED)
	})
	t.Run("RaiseConcurrent", func(t *testing.T) {
		// 20 holds of $1 raised to $5 at once under a $50 cap: $20 are
		// held, each raise adds $4, so exactly 7 fit (20 + 7×4 = 48).
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: Ptr(USD(50))})
		var rs []*keybrake.Reservation
		for i := 0; i < 20; i++ {
			id := string(rune('a' + i))
			rs = append(rs, MustHold(t, s, "key_a", "idem_"+id, "pi_"+id, USD(1), T0, T0.Add(time.Hour)))
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		raised := 0
		for _, r := range rs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := s.RaiseHold(ctx, keybrake.RaiseArgs{ID: r.ID, Amount: 500, Currency: "usd", Micros: USD(5), Now: later})
				if err != nil {
					t.Errorf("raise: %v", err)
					return
				}
				if res.OverCap == nil {
					mu.Lock()
					raised++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if raised != 7 {
			t.Fatalf("%d raises passed, want exactly 7", raised)
		}
		wantSpend(t, MustSpend(t, s, "key_a", T0, utc), keybrake.Spend{Day: USD(48), Month: USD(48), Total: USD(48), Held: USD(48)})
	})
	t.Run("LeaseHolds", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		old := MustHold(t, s, "key_a", "idem_1", "pi_1", USD(5), T0, T0.Add(time.Hour))
		MustHold(t, s, "key_a", "idem_2", "pi_2", USD(5), T0, T0.Add(3*time.Hour))
		done := MustHold(t, s, "key_a", "idem_3", "pi_3", USD(5), T0, T0.Add(time.Hour))
		MustSettle(t, s, keybrake.SettleArgs{ID: done.ID, State: keybrake.StateSettled, SettledMicros: USD(5), Now: later})
		now := T0.Add(2 * time.Hour)
		got, err := s.LeaseHolds(ctx, "sweeper_1", now, T0, now.Add(time.Minute), 10)
		if err != nil || len(got) != 1 || got[0].ID != old.ID || got[0].ObjectID != "pi_1" {
			t.Fatalf("LeaseHolds = %v, %v; want only %s on pi_1", ids(got), err, old.ID)
		}
		// Leased: its object is locked, for sweepers and requests alike.
		if got, err := s.LeaseHolds(ctx, "sweeper_2", now, T0, now.Add(time.Minute), 10); err != nil || len(got) != 0 {
			t.Fatalf("second lease = %v, %v; want none", ids(got), err)
		}
		_, err = s.LockObject(ctx, lockArgs("req_1", now))
		wantCode(t, err, keybrake.ECONFLICT)
	})
	t.Run("RenewHoldLease", func(t *testing.T) {
		// A sweeper renews its lease before acting upstream; it fails once
		// a request took the object after the lease expired, even if the
		// request has let go since, and once the hold is no longer held.
		setup := func(t *testing.T) (keybrake.Store, *keybrake.Reservation, time.Time) {
			s := open(t)
			MustCreateKey(t, s, NewKey("key_a"))
			r := MustHold(t, s, "key_a", "idem_1", "pi_1", USD(5), T0, T0.Add(time.Hour))
			now := T0.Add(2 * time.Hour)
			if got, err := s.LeaseHolds(ctx, "sweeper_1", now, T0, now.Add(time.Minute), 10); err != nil || len(got) != 1 {
				t.Fatalf("LeaseHolds = %v, %v", ids(got), err)
			}
			return s, r, now
		}
		renew := func(s keybrake.Store, r *keybrake.Reservation, owner string, now time.Time) error {
			return s.RenewHoldLease(ctx, keybrake.RenewArgs{KeyID: "key_a", ObjectID: "pi_1", ReservationID: r.ID, Owner: owner, Now: now, Until: now.Add(time.Minute)})
		}
		t.Run("Expired", func(t *testing.T) {
			s, r, now := setup(t)
			later := now.Add(5 * time.Minute) // the lease ended; nobody took the object
			if err := renew(s, r, "sweeper_1", later); err != nil {
				t.Fatalf("renew: %v", err)
			}
			_, err := s.LockObject(ctx, lockArgs("req_1", later.Add(30*time.Second)))
			wantCode(t, err, keybrake.ECONFLICT)
			wantCode(t, renew(s, r, "sweeper_2", later), keybrake.ECONFLICT)
		})
		t.Run("TakenByARequest", func(t *testing.T) {
			s, r, now := setup(t)
			later := now.Add(5 * time.Minute)
			if _, err := s.LockObject(ctx, lockArgs("req_1", later)); err != nil {
				t.Fatalf("LockObject after the lease expired: %v", err)
			}
			wantCode(t, renew(s, r, "sweeper_1", later), keybrake.ECONFLICT)
			if err := s.UnlockObject(ctx, "key_a", "pi_1", "req_1"); err != nil {
				t.Fatal(err)
			}
			wantCode(t, renew(s, r, "sweeper_1", later), keybrake.ECONFLICT)
		})
		t.Run("NoLongerHeld", func(t *testing.T) {
			s, r, now := setup(t)
			MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateSettled, SettledMicros: USD(5), Now: now})
			wantCode(t, renew(s, r, "sweeper_1", now), keybrake.ECONFLICT)
		})
		t.Run("RevokedKey", func(t *testing.T) {
			s, r, now := setup(t)
			if _, err := s.RevokeKey(ctx, "key_a", now); err != nil {
				t.Fatal(err)
			}
			if err := renew(s, r, "sweeper_1", now.Add(time.Second)); err != nil {
				t.Fatalf("renew on a revoked key: %v", err)
			}
		})
		t.Run("UnknownReservation", func(t *testing.T) {
			s, _, now := setup(t)
			wantCode(t, renew(s, &keybrake.Reservation{ID: "res_missing"}, "sweeper_1", now), keybrake.ENOTFOUND)
		})
	})
	t.Run("LeaseOrphanedHold", func(t *testing.T) {
		// A lost create resolved as held after a later request became the
		// object's hold: the orphan is swept once it is old enough.
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		linked := MustHold(t, s, "key_a", "idem_1", "pi_1", USD(5), T0, T0.Add(48*time.Hour))
		orphan := MustReserve(t, s, "key_a", "idem_2", USD(5), T0)
		orphan = MustSettle(t, s, keybrake.SettleArgs{ID: orphan.ID, State: keybrake.StateHeld, SettledMicros: USD(5), Amount: 500, Currency: "usd", ObjectID: "pi_1", Now: T0})
		wantCode(t, s.LinkHold(ctx, "key_a", "pi_1", orphan.ID, T0.Add(time.Hour)), keybrake.ECONFLICT)
		now := T0.Add(2 * time.Hour)
		if got, err := s.LeaseHolds(ctx, "sweeper_1", now, T0, now.Add(time.Minute), 10); err != nil || len(got) != 0 {
			t.Fatalf("LeaseHolds before the orphan is old = %v, %v", ids(got), err)
		}
		got, err := s.LeaseHolds(ctx, "sweeper_1", now, T0.Add(time.Hour), now.Add(time.Minute), 10)
		if err != nil || len(got) != 1 || got[0].ID != orphan.ID || got[0].ObjectID != "pi_1" {
			t.Fatalf("LeaseHolds = %v, %v; want the orphan %s, not the linked %s", ids(got), err, orphan.ID, linked.ID)
		}
	})
}
