package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/postgres"
	"github.com/keybrake/keybrake/storetest"
)

// TestGuardClockSkew runs two replicas on one database, one with a clock
// injected 70 s ahead of the other's and the database's. Without a bound
// its sliding window misses what the other counted; with MaxClockSkew it
// refuses to reserve (fail closed) and the window stays exact.
func TestGuardClockSkew(t *testing.T) {
	ctx := context.Background()
	guards := &keybrake.Guards{Velocity: []keybrake.VelocityLimit{{Name: "five_a_minute", Per: keybrake.PerKey, Limit: 5, WindowSeconds: 60}}}
	const skew = 70 * time.Second
	reserve := func(s *postgres.Store, i int, now time.Time) (keybrake.ReserveResult, error) {
		r := storetest.NewCharge("key_a", fmt.Sprintf("idem_%d", i), fmt.Sprintf("cus_%d", i), storetest.USD(1))
		return s.Reserve(ctx, keybrake.ReserveArgs{Reservation: r, Now: now})
	}
	open2 := func(t *testing.T, bound time.Duration) (a, b *postgres.Store) {
		dsn := MustDatabase(t, MustServerDSN(t))
		a, b = MustOpen(t, dsn), MustOpen(t, dsn)
		a.MaxClockSkew, b.MaxClockSkew = bound, bound
		storetest.MustCreateGuardedKey(t, a, "key_a", keybrake.Caps{}, guards)
		return a, b
	}

	t.Run("UnboundedSkewBreaksTheWindow", func(t *testing.T) {
		a, b := open2(t, 0)
		passed := 0
		for i := range 10 {
			s, now := a, time.Now()
			if i >= 5 {
				s, now = b, now.Add(skew)
			}
			res, err := reserve(s, i, now)
			if err != nil {
				t.Fatal(err)
			}
			if res.Reservation != nil {
				passed++
			}
		}
		// The hazard the bound exists for: 10 in one real minute.
		if passed != 10 {
			t.Fatalf("%d passed; this test documents that an unbounded skew lets 10 through a limit of 5", passed)
		}
	})

	t.Run("BoundRefusesTheSkewedReplica", func(t *testing.T) {
		a, b := open2(t, 2*time.Second)
		_, err := reserve(b, 0, time.Now().Add(skew))
		if keybrake.ErrorCode(err) != keybrake.EUNAVAILABLE {
			t.Fatalf("skewed replica reserved: %v, want EUNAVAILABLE", err)
		}
		_, err = b.CountRequest(ctx, keybrake.RequestArgs{KeyID: "key_a", Operation: "customers.retrieve", Now: time.Now().Add(skew)})
		if keybrake.ErrorCode(err) != keybrake.EUNAVAILABLE {
			t.Fatalf("skewed replica counted a request: %v, want EUNAVAILABLE", err)
		}
		passed := 0
		for i := range 10 {
			s, now := a, time.Now()
			if i%2 == 1 {
				s, now = b, now.Add(500*time.Millisecond) // skewed, within the bound
			}
			res, err := reserve(s, i, now)
			if err != nil {
				t.Fatalf("reservation %d: %v", i, err)
			}
			if res.Reservation != nil {
				passed++
			} else if res.Guard == nil || res.Guard.Guard != keybrake.GuardVelocity {
				t.Fatalf("reservation %d: %+v", i, res)
			}
		}
		if passed != 5 {
			t.Fatalf("%d passed across the replicas, want exactly 5", passed)
		}
	})
}

// A replica whose clock is a day ahead is refused by Reserve (MaxClockSkew)
// but RaiseHold took its time as it came: a raise "on a later day" moved
// the whole hold out of today's counters into tomorrow's, so today's daily
// cap was free again. A $9.00 hold raised by a cent at a time to $10.00
// through that replica, then $10.00 reserved today through an honest one:
// $20.00 movable today under a $10.00 daily cap. A raise is now refused,
// like a reservation, while the replica's clock is off the database's.
func TestAttackReplicas_RaiseOnSkewedClock(t *testing.T) {
	ctx := context.Background()
	dsn := MustDatabase(t, MustServerDSN(t))
	a, b := MustOpen(t, dsn), MustOpen(t, dsn)
	a.MaxClockSkew, b.MaxClockSkew = postgres.DefaultMaxClockSkew, postgres.DefaultMaxClockSkew
	k := storetest.NewKey("key_a")
	k.Caps.Daily = storetest.Ptr(storetest.USD(10))
	storetest.MustCreateKey(t, a, k)
	now := time.Now()
	hold, err := a.Reserve(ctx, keybrake.ReserveArgs{Reservation: storetest.NewCharge("key_a", "idem_hold", "cus_1", storetest.USD(9)), Now: now})
	if err != nil || hold.Reservation == nil {
		t.Fatalf("reserve the $9.00 hold: %+v %v", hold, err)
	}
	if _, err := b.Reserve(ctx, keybrake.ReserveArgs{Reservation: storetest.NewCharge("key_a", "idem_b", "cus_1", storetest.USD(1)), Now: now.Add(24 * time.Hour)}); keybrake.ErrorCode(err) != keybrake.EUNAVAILABLE {
		t.Fatalf("reserve on the replica a day ahead: %v; want EUNAVAILABLE", err)
	}
	_, raiseErr := b.RaiseHold(ctx, keybrake.RaiseArgs{ID: hold.Reservation.ID, Amount: 1000, Currency: "usd", Micros: storetest.USD(10), Now: now.Add(24 * time.Hour)})
	again, err := a.Reserve(ctx, keybrake.ReserveArgs{Reservation: storetest.NewCharge("key_a", "idem_again", "cus_1", storetest.USD(10)), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if again.OverCap == nil {
		t.Fatalf("after a raise on a replica a day ahead (err %v), $10.00 more was reserved today next to the $9.00 hold: $20.00 movable today under a $10.00 daily cap", raiseErr)
	}
	if keybrake.ErrorCode(raiseErr) != keybrake.EUNAVAILABLE {
		t.Fatalf("raise on the replica a day ahead: %v; want EUNAVAILABLE", raiseErr)
	}
}
