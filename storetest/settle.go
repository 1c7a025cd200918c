package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

func testSettle(t *testing.T, open opener) {
	ctx := context.Background()
	utc := time.UTC
	spend := func(m, uncertain keybrake.Micros) keybrake.Spend {
		return keybrake.Spend{Day: m, Month: m, Total: m, Uncertain: uncertain}
	}
	later := T0.Add(2 * time.Second)

	t.Run("SettledSmaller", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: Ptr(USD(10))})
		r := MustReserve(t, s, "key_a", "idem_1", USD(10), T0)
		MustOverCap(t, s, "key_a", "idem_2", USD(4), T0)
		got := MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateSettled, SettledMicros: USD(6), Amount: 600, Currency: "usd", ObjectID: "ch_1", UpstreamStatus: 200, Now: later})
		want := *r
		want.State = keybrake.StateSettled
		want.SettledMicros = USD(6)
		want.Amount = 600
		want.Currency = "usd"
		want.ObjectID = "ch_1"
		want.UpstreamStatus = 200
		want.UpdatedAt = later
		wantReservation(t, got, &want)
		wantReservation(t, mustFindReservation(t, s, r.ID), &want)
		wantSpend(t, MustSpend(t, s, "key_a", T0, utc), spend(USD(6), 0))
		MustReserve(t, s, "key_a", "idem_2", USD(4), later)
	})
	t.Run("SettledOtherCurrency", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		r := MustReserve(t, s, "key_a", "idem_1", USD(10), T0)
		got := MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateSettled, SettledMicros: USD(9), Amount: 1300, Currency: "jpy", Now: later})
		if got.Amount != 1300 || got.Currency != "jpy" || got.Micros != USD(10) || got.SettledMicros != USD(9) {
			t.Fatalf("settled = %+v", got)
		}
	})
	t.Run("SettledLarger", func(t *testing.T) {
		// The charge happened: it counts in full even past the cap.
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: Ptr(USD(10))})
		r := MustReserve(t, s, "key_a", "idem_1", USD(5), T0)
		MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateSettled, SettledMicros: USD(12), Amount: 1200, Currency: "usd", Now: later})
		wantSpend(t, MustSpend(t, s, "key_a", T0, utc), spend(USD(12), 0))
		oc := MustOverCap(t, s, "key_a", "idem_2", 1, later)
		if oc.Spent != USD(12) {
			t.Fatalf("OverCap.Spent = %s, want 12.00", oc.Spent)
		}
	})
	t.Run("SettledExact", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		r := MustReserve(t, s, "key_a", "idem_1", USD(5), T0)
		MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateSettled, SettledMicros: USD(5), Now: later})
		wantSpend(t, MustSpend(t, s, "key_a", T0, utc), spend(USD(5), 0))
	})
	t.Run("Released", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Daily: Ptr(USD(10))})
		MustReserve(t, s, "key_a", "idem_0", USD(2), T0)
		r := MustReserve(t, s, "key_a", "idem_1", USD(8), T0)
		got := MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateReleased, UpstreamStatus: 402, Now: later})
		if got.State != keybrake.StateReleased || got.UpstreamStatus != 402 || got.SettledMicros != 0 {
			t.Fatalf("released = %+v", got)
		}
		wantSpend(t, MustSpend(t, s, "key_a", T0, utc), spend(USD(2), 0))
		MustReserve(t, s, "key_a", "idem_2", USD(8), later)
	})
	t.Run("UncertainStaysCounted", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: Ptr(USD(10))})
		MustReserve(t, s, "key_a", "idem_0", USD(1), T0)
		r := MustReserve(t, s, "key_a", "idem_1", USD(9), T0)
		got := MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateUncertain, UpstreamStatus: 502, Now: later})
		if got.State != keybrake.StateUncertain || got.UpstreamStatus != 502 {
			t.Fatalf("uncertain = %+v", got)
		}
		wantSpend(t, MustSpend(t, s, "key_a", T0, utc), spend(USD(10), USD(9)))
		MustOverCap(t, s, "key_a", "idem_2", 1, later)
	})
	t.Run("UncertainTwice", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		r := MustReserve(t, s, "key_a", "idem_1", USD(9), T0)
		MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateUncertain, Now: later})
		MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateUncertain, Now: later})
		wantSpend(t, MustSpend(t, s, "key_a", T0, utc), spend(USD(9), USD(9)))
	})
	t.Run("UncertainThenSettled", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: Ptr(USD(10))})
		r := MustReserve(t, s, "key_a", "idem_1", USD(9), T0)
		MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateUncertain, Now: later})
		got := MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateSettled, SettledMicros: USD(7), Amount: 700, Currency: "usd", ObjectID: "ch_9", UpstreamStatus: 200, Now: later.Add(time.Hour)})
		if got.State != keybrake.StateSettled || got.ObjectID != "ch_9" || got.SettledMicros != USD(7) {
			t.Fatalf("settled = %+v", got)
		}
		wantTime(t, "UpdatedAt", got.UpdatedAt, later.Add(time.Hour))
		wantSpend(t, MustSpend(t, s, "key_a", T0, utc), spend(USD(7), 0))
	})
	t.Run("UncertainThenReleased", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		MustReserve(t, s, "key_a", "idem_0", USD(1), T0)
		r := MustReserve(t, s, "key_a", "idem_1", USD(9), T0)
		MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateUncertain, Now: later})
		MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateReleased, Now: later})
		wantSpend(t, MustSpend(t, s, "key_a", T0, utc), spend(USD(1), 0))
	})
	t.Run("OwnBucketsOnLaterDay", func(t *testing.T) {
		// Settling tomorrow adjusts the day the amount was reserved in.
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		r := MustReserve(t, s, "key_a", "idem_1", USD(9), T0)
		tomorrow := T0.Add(24 * time.Hour)
		MustReserve(t, s, "key_a", "idem_2", USD(1), tomorrow)
		MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateSettled, SettledMicros: USD(4), Now: tomorrow})
		wantSpend(t, MustSpend(t, s, "key_a", T0, utc), keybrake.Spend{Day: USD(4), Month: USD(5), Total: USD(5)})
		wantSpend(t, MustSpend(t, s, "key_a", tomorrow, utc), keybrake.Spend{Day: USD(1), Month: USD(5), Total: USD(5)})
	})

	t.Run("ErrConflict", func(t *testing.T) {
		finals := []struct {
			name string
			args keybrake.SettleArgs
		}{
			{"Settled", keybrake.SettleArgs{State: keybrake.StateSettled, SettledMicros: USD(3)}},
			{"Released", keybrake.SettleArgs{State: keybrake.StateReleased}},
		}
		nexts := []string{keybrake.StateSettled, keybrake.StateReleased, keybrake.StateUncertain}
		for _, f := range finals {
			for _, next := range nexts {
				t.Run(f.name+"Then"+next, func(t *testing.T) {
					s := open(t)
					MustCreateKey(t, s, NewKey("key_a"))
					r := MustReserve(t, s, "key_a", "idem_1", USD(5), T0)
					a := f.args
					a.ID, a.Now = r.ID, later
					first := MustSettle(t, s, a)
					before := MustSpend(t, s, "key_a", T0, utc)
					_, err := s.Settle(ctx, keybrake.SettleArgs{ID: r.ID, State: next, SettledMicros: USD(1), Now: later.Add(time.Hour)})
					wantCode(t, err, keybrake.ECONFLICT)
					wantReservation(t, mustFindReservation(t, s, r.ID), first)
					wantSpend(t, MustSpend(t, s, "key_a", T0, utc), before)
				})
			}
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		s := open(t)
		_, err := s.Settle(ctx, keybrake.SettleArgs{ID: "res_missing", State: keybrake.StateReleased, Now: later})
		wantCode(t, err, keybrake.ENOTFOUND)
	})
	t.Run("ErrInvalidState", func(t *testing.T) {
		for _, state := range []string{keybrake.StateReserved, "", "bogus"} {
			s := open(t)
			MustCreateKey(t, s, NewKey("key_a"))
			r := MustReserve(t, s, "key_a", "idem_1", USD(5), T0)
			_, err := s.Settle(ctx, keybrake.SettleArgs{ID: r.ID, State: state, Now: later})
			wantCode(t, err, keybrake.EINVALID)
			wantSpend(t, MustSpend(t, s, "key_a", T0, utc), spend(USD(5), 0))
		}
	})
	t.Run("ErrInvalidNegative", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		r := MustReserve(t, s, "key_a", "idem_1", USD(5), T0)
		_, err := s.Settle(ctx, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateSettled, SettledMicros: -1, Now: later})
		wantCode(t, err, keybrake.EINVALID)
		wantSpend(t, MustSpend(t, s, "key_a", T0, utc), spend(USD(5), 0))
	})
}
