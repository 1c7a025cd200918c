package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// testRearm checks Rearm: a released reservation reserved again in place,
// under every cap, in the windows of the retry.
func testRearm(t *testing.T, open opener) {
	ctx := context.Background()
	release := func(t *testing.T, s keybrake.Store, id string) {
		t.Helper()
		MustSettle(t, s, keybrake.SettleArgs{ID: id, State: keybrake.StateReleased, UpstreamStatus: 429, Now: T0})
	}
	t.Run("OK", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: Ptr(USD(10))})
		r := MustReserve(t, s, "key_a", "idem_1", USD(4), T0)
		release(t, s, r.ID)
		in := NewReservation("key_a", "idem_1", USD(6))
		in.Fingerprint = "fp-retry"
		res, err := s.Rearm(ctx, keybrake.ReserveArgs{Reservation: in, Now: T0.Add(time.Second)})
		if err != nil || res.OverCap != nil || res.Reservation == nil {
			t.Fatalf("Rearm = %+v, %v", res, err)
		}
		got := res.Reservation
		if got.ID != r.ID || got.State != keybrake.StateReserved || got.Micros != USD(6) || got.Fingerprint != "fp-retry" || got.UpstreamStatus != 0 {
			t.Fatalf("rearmed = %+v", got)
		}
		wantSpend(t, MustSpend(t, s, "key_a", T0, time.UTC), keybrake.Spend{Day: USD(6), Month: USD(6), Total: USD(6)})
		// It counts like any reservation: the cap sees it, settling works.
		MustOverCap(t, s, "key_a", "idem_2", USD(5), T0)
		MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateSettled, SettledMicros: USD(6), Amount: 600, Currency: "usd", UpstreamStatus: 200, Now: T0})
		wantSpend(t, MustSpend(t, s, "key_a", T0, time.UTC), keybrake.Spend{Day: USD(6), Month: USD(6), Total: USD(6)})
	})
	t.Run("OKCountsInTheRetrysDay", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Daily: Ptr(USD(10))})
		r := MustReserve(t, s, "key_a", "idem_1", USD(4), T0)
		release(t, s, r.ID)
		next := T0.Add(12 * time.Hour) // the next UTC day
		if _, err := s.Rearm(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_a", "idem_1", USD(4)), Now: next}); err != nil {
			t.Fatal(err)
		}
		if sp := MustSpend(t, s, "key_a", T0, time.UTC); sp.Day != 0 {
			t.Fatalf("the first day still counts %s", sp.Day)
		}
		if sp := MustSpend(t, s, "key_a", next, time.UTC); sp.Day != USD(4) || sp.Total != USD(4) {
			t.Fatalf("the retry's day counts %+v", sp)
		}
	})
	t.Run("ErrOverCap", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: Ptr(USD(10))})
		r := MustReserve(t, s, "key_a", "idem_1", USD(4), T0)
		release(t, s, r.ID)
		MustReserve(t, s, "key_a", "idem_2", USD(8), T0)
		res, err := s.Rearm(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_a", "idem_1", USD(4)), Now: T0})
		if err != nil || res.OverCap == nil || res.OverCap.Window != keybrake.WindowTotal {
			t.Fatalf("Rearm = %+v, %v; want over the total cap", res, err)
		}
		rs, err := s.FindReservationByID(ctx, r.ID)
		if err != nil || rs.State != keybrake.StateReleased {
			t.Fatalf("after a refused rearm: %+v, %v", rs, err)
		}
		wantSpend(t, MustSpend(t, s, "key_a", T0, time.UTC), keybrake.Spend{Day: USD(8), Month: USD(8), Total: USD(8)})
	})
	t.Run("ErrNotReleased", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{})
		MustReserve(t, s, "key_a", "idem_1", USD(4), T0)
		_, err := s.Rearm(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_a", "idem_1", USD(4)), Now: T0})
		wantCode(t, err, keybrake.ECONFLICT)
		wantSpend(t, MustSpend(t, s, "key_a", T0, time.UTC), keybrake.Spend{Day: USD(4), Month: USD(4), Total: USD(4)})
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{})
		_, err := s.Rearm(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_a", "idem_x", USD(4)), Now: T0})
		wantCode(t, err, keybrake.ENOTFOUND)
	})
	t.Run("ErrRevoked", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{})
		r := MustReserve(t, s, "key_a", "idem_1", USD(4), T0)
		release(t, s, r.ID)
		if _, err := s.RevokeKey(ctx, "key_a", T0); err != nil {
			t.Fatal(err)
		}
		_, err := s.Rearm(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_a", "idem_1", USD(4)), Now: T0.Add(time.Second)})
		wantCode(t, err, keybrake.EUNAUTHORIZED)
	})
}
