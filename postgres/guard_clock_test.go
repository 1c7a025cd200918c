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
