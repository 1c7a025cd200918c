package storetest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// testGuardRequests checks velocity limits that count every request
// (VelocityLimit.Requests): reads count, reservations are neither counted
// nor refused by them, and the count is exact under 200 concurrent
// requests.
func testGuardRequests(t *testing.T, open opener) {
	ctx := context.Background()
	t.Run("GuardsChangedBetweenReservations", func(t *testing.T) { testGuardsChanged(t, open) })
	perKey := func(limit int) *keybrake.Guards {
		return &keybrake.Guards{Velocity: []keybrake.VelocityLimit{{Name: "rpm", Per: keybrake.PerKey, Limit: limit, WindowSeconds: 60, Requests: true}}}
	}
	count := func(t *testing.T, s keybrake.Store, op, customer string, now time.Time) *keybrake.GuardRefusal {
		t.Helper()
		g, err := s.CountRequest(ctx, keybrake.RequestArgs{KeyID: "key_a", Operation: op, Customer: customer, Now: now})
		if err != nil {
			t.Fatalf("CountRequest: %v", err)
		}
		return g
	}

	t.Run("ReadsCount", func(t *testing.T) {
		s := open(t)
		MustCreateGuardedKey(t, s, "key_a", keybrake.Caps{}, perKey(3))
		for i := range 3 {
			if g := count(t, s, "customers.retrieve", "", T0.Add(time.Duration(i)*time.Second)); g != nil {
				t.Fatalf("request %d refused: %+v", i, g)
			}
		}
		g := count(t, s, "charges.list", "", T0.Add(10*time.Second))
		if g == nil || g.Guard != keybrake.GuardVelocity || g.Rule != "rpm" || g.Limit != 3 || g.Count != 3 {
			t.Fatalf("fourth request: %+v, want a velocity refusal", g)
		}
		// The first request leaves the 60 s window 60 s after its second.
		wantTime(t, "RetryAt", g.RetryAt, T0.Truncate(time.Second).Add(60*time.Second))
		// A refused request does not count: at T0+60 s one is free.
		if g := count(t, s, "customers.retrieve", "", T0.Add(60*time.Second)); g != nil {
			t.Fatalf("after the first left the window: %+v", g)
		}
		if g := count(t, s, "customers.retrieve", "", T0.Add(60*time.Second)); g == nil {
			t.Fatalf("a second one at T0+60 s passed")
		}
		// Reservations are neither refused nor counted by such a limit.
		for i := range 5 {
			if res := reserveGuarded(t, s, NewCharge("key_a", "idem_"+string(rune('a'+i)), "cus_1", USD(int64(i+1))), T0.Add(61*time.Second)); res.Guard != nil || res.Reservation == nil {
				t.Fatalf("reservation %d: %+v", i, res)
			}
		}
	})

	t.Run("PerCustomerAndOperations", func(t *testing.T) {
		s := open(t)
		MustCreateGuardedKey(t, s, "key_a", keybrake.Caps{}, &keybrake.Guards{Velocity: []keybrake.VelocityLimit{
			{Name: "reads_per_customer", Per: keybrake.PerCustomer, Operations: []string{"customers.retrieve"}, Limit: 1, WindowSeconds: 3600, Requests: true, WindowKind: keybrake.WindowFixed},
		}})
		if g := count(t, s, "customers.retrieve", "cus_1", T0); g != nil {
			t.Fatalf("first: %+v", g)
		}
		if g := count(t, s, "customers.retrieve", "cus_1", T0); g == nil {
			t.Fatalf("second for cus_1 passed")
		}
		if g := count(t, s, "customers.retrieve", "cus_2", T0); g != nil {
			t.Fatalf("cus_2: %+v", g)
		}
		if g := count(t, s, "charges.list", "cus_1", T0); g != nil {
			t.Fatalf("another operation: %+v", g)
		}
		if g := count(t, s, "customers.retrieve", "", T0); g != nil {
			t.Fatalf("no customer: %+v", g)
		}
	})

	t.Run("NoRequestLimits", func(t *testing.T) {
		s := open(t)
		MustCreateGuardedKey(t, s, "key_a", keybrake.Caps{}, &keybrake.Guards{Velocity: []keybrake.VelocityLimit{{Name: "charges", Per: keybrake.PerKey, Limit: 1, WindowSeconds: 60}}})
		for range 3 {
			if g := count(t, s, "charges.create", "", T0); g != nil {
				t.Fatalf("a reservation limit refused a request: %+v", g)
			}
		}
		_, err := s.CountRequest(ctx, keybrake.RequestArgs{KeyID: "key_nope", Operation: "charges.list", Now: T0})
		wantCode(t, err, keybrake.ENOTFOUND)
	})

	t.Run("Held", func(t *testing.T) {
		// A request on a held object (a capture of an authorization the
		// key holds) makes no reservation: it counts in the limits that
		// count reservations and name it, shared with reservations of the
		// same operation, exactly under concurrency.
		s := open(t)
		MustCreateGuardedKey(t, s, "key_a", keybrake.Caps{}, &keybrake.Guards{Velocity: []keybrake.VelocityLimit{
			{Name: "captures", Per: keybrake.PerKey, Operations: []string{"payment_intents.capture"}, Limit: 50, WindowSeconds: 3600},
		}})
		held := func(op string, i int) (*keybrake.GuardRefusal, error) {
			return s.CountRequest(ctx, keybrake.RequestArgs{KeyID: "key_a", Operation: op, Now: T0.Add(time.Duration(i%30) * time.Second), Held: true})
		}
		// An operation no limit names counts nowhere, nor one whose hold
		// a limit naming it already counted.
		for i := range 3 {
			if g, err := held("payment_intents.confirm", i); g != nil || err != nil {
				t.Fatalf("a confirm no limit names: %+v, %v", g, err)
			}
			g, err := s.CountRequest(ctx, keybrake.RequestArgs{KeyID: "key_a", Operation: "payment_intents.capture", Now: T0, Held: true, HoldOperation: "payment_intents.capture"})
			if g != nil || err != nil {
				t.Fatalf("a capture of a hold a capture made: %+v, %v", g, err)
			}
		}
		var passed, refused atomic.Int64
		run200(t, func(i int) error {
			if i%4 == 0 { // a capture of an object the key did not hold: a reservation
				r := NewReservation("key_a", "idem_"+string(rune('a'+i/26))+string(rune('a'+i%26)), USD(1))
				r.Operation = "payment_intents.capture"
				res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: r, Now: T0.Add(time.Duration(i%30) * time.Second)})
				if err == nil && res.Guard == nil {
					passed.Add(1)
				} else if res.Guard != nil && res.Guard.Rule == "captures" {
					refused.Add(1)
				}
				return err
			}
			g, err := held("payment_intents.capture", i)
			if g == nil && err == nil {
				passed.Add(1)
			} else if g != nil {
				refused.Add(1)
			}
			return err
		})
		if passed.Load() != 50 || refused.Load() != 150 {
			t.Fatalf("captures passed %d, refused %d; want exactly 50 and 150", passed.Load(), refused.Load())
		}
	})

	t.Run("ExactUnder200Concurrent", func(t *testing.T) {
		s := open(t)
		MustCreateGuardedKey(t, s, "key_a", keybrake.Caps{}, perKey(50))
		var passed, refused atomic.Int64
		run200(t, func(i int) error {
			g, err := s.CountRequest(ctx, keybrake.RequestArgs{KeyID: "key_a", Operation: "customers.retrieve", Now: T0.Add(time.Duration(i%30) * time.Second)})
			if g == nil && err == nil {
				passed.Add(1)
			} else if g != nil {
				refused.Add(1)
			}
			return err
		})
		if passed.Load() != 50 || refused.Load() != 150 {
			t.Fatalf("passed %d, refused %d; want exactly 50 and 150", passed.Load(), refused.Load())
		}
	})
}

// testGuardsChanged changes a key's guards between its reservations: a
// store that reads the guards' windows along with the key, on a guess of
// its guards, must decide each reservation on the guards it reads.
func testGuardsChanged(t *testing.T, open opener) {
	ctx := context.Background()
	s := open(t)
	one := &keybrake.Guards{Velocity: []keybrake.VelocityLimit{{Name: "one", Per: keybrake.PerKey, Limit: 1, WindowSeconds: 60}}}
	MustCreateGuardedKey(t, s, "key_a", keybrake.Caps{}, one)
	update := func(g *keybrake.Guards) {
		t.Helper()
		if _, err := s.UpdateKey(ctx, "key_a", keybrake.KeyUpdate{Guards: g}, T0); err != nil {
			t.Fatal(err)
		}
	}
	want := func(i int, refused bool) {
		t.Helper()
		res := reserveGuarded(t, s, NewCharge("key_a", "idem_"+string(rune('a'+i)), "cus_1", USD(int64(i+1))), T0.Add(time.Duration(i)*time.Second))
		if (res.Guard != nil) != refused {
			t.Fatalf("reservation %d: %+v, want refused %v", i, res, refused)
		}
	}
	want(0, false)
	want(1, true)
	update(&keybrake.Guards{}) // no guards
	want(2, false)
	update(&keybrake.Guards{Velocity: []keybrake.VelocityLimit{{Name: "two", Per: keybrake.PerKey, Limit: 2, WindowSeconds: 60}}})
	// The same scope: only reservation 0 counted (2 was made without
	// guards), so one more fits.
	want(3, false)
	want(4, true)
}
