package storetest

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// wantReservation fails the test unless got equals want, times as instants.
func wantReservation(tb testing.TB, got, want *keybrake.Reservation) {
	tb.Helper()
	wantTime(tb, "CreatedAt", got.CreatedAt, want.CreatedAt)
	wantTime(tb, "UpdatedAt", got.UpdatedAt, want.UpdatedAt)
	wantTime(tb, "LeaseUntil", got.LeaseUntil, want.LeaseUntil)
	g, w := *got, *want
	g.CreatedAt, g.UpdatedAt, g.LeaseUntil = time.Time{}, time.Time{}, time.Time{}
	w.CreatedAt, w.UpdatedAt, w.LeaseUntil = time.Time{}, time.Time{}, time.Time{}
	if !reflect.DeepEqual(g, w) {
		tb.Fatalf("reservation mismatch:\n got %+v\nwant %+v", g, w)
	}
}

// mustFindReservation reads a reservation back by ID.
func mustFindReservation(tb testing.TB, s keybrake.Store, id string) *keybrake.Reservation {
	tb.Helper()
	r, err := s.FindReservationByID(context.Background(), id)
	if err != nil {
		tb.Fatalf("FindReservationByID(%s): %v", id, err)
	}
	return r
}

// mustCountReservations returns how many reservations keyID has.
func mustCountReservations(tb testing.TB, s keybrake.Store, keyID string) int {
	tb.Helper()
	rs, err := s.FindReservations(context.Background(), keybrake.ReservationFilter{KeyID: keyID})
	if err != nil {
		tb.Fatalf("FindReservations(%s): %v", keyID, err)
	}
	return len(rs)
}

func testReserve(t *testing.T, open opener) {
	ctx := context.Background()
	utc := time.UTC

	t.Run("OK", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		in := NewReservation("key_a", "idem_1", USD(12)+345)
		in.Request.StripeAccount = "acct_9"
		in.Request.StripeVersion = "2024-06-20"
		in.Request.Body = "amount=1200&currency=usd&description=caf%C3%A9+%26+more"
		want := *in
		res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: in, Now: T0})
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		if res.Replay || res.OverCap != nil || res.Reservation == nil {
			t.Fatalf("Reserve = %+v, want a new reservation", res)
		}
		got := res.Reservation
		if got.ID == "" {
			t.Fatalf("Reserve left ID empty")
		}
		want.ID = got.ID
		want.State = keybrake.StateReserved
		want.Day, want.Month = "2026-11-29", "2026-11"
		want.CreatedAt, want.UpdatedAt = T0, T0
		wantReservation(t, got, &want)
		wantReservation(t, mustFindReservation(t, s, got.ID), &want)
		wantSpend(t, MustSpend(t, s, "key_a", T0, utc), keybrake.Spend{Day: USD(12) + 345, Month: USD(12) + 345, Total: USD(12) + 345})
	})
	t.Run("DistinctIDs", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		a := MustReserve(t, s, "key_a", "idem_1", USD(1), T0)
		b := MustReserve(t, s, "key_a", "idem_2", USD(1), T0)
		if a.ID == b.ID {
			t.Fatalf("two reservations share ID %s", a.ID)
		}
	})
	t.Run("GivenID", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		in := NewReservation("key_a", "idem_1", USD(1))
		in.ID = "res_given"
		res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: in, Now: T0})
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		if res.Reservation.ID != "res_given" {
			t.Fatalf("ID = %q, want res_given", res.Reservation.ID)
		}
		mustFindReservation(t, s, "res_given")
	})
	t.Run("ZeroAmount", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: Ptr(0)})
		MustReserve(t, s, "key_a", "idem_1", 0, T0)
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		s := open(t)
		_, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_missing", "idem_1", USD(1)), Now: T0})
		wantCode(t, err, keybrake.ENOTFOUND)
	})
	t.Run("ErrInvalidNegative", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		_, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_a", "idem_1", -1), Now: T0})
		wantCode(t, err, keybrake.EINVALID)
		wantSpend(t, MustSpend(t, s, "key_a", T0, utc), keybrake.Spend{})
	})
	t.Run("ErrInvalidNoIdempotencyKey", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		_, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_a", "", USD(1)), Now: T0})
		wantCode(t, err, keybrake.EINVALID)
	})
	t.Run("ErrUnauthorizedRevoked", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		MustReserve(t, s, "key_a", "idem_0", USD(1), T0)
		if _, err := s.RevokeKey(ctx, "key_a", T0.Add(time.Second)); err != nil {
			t.Fatalf("RevokeKey: %v", err)
		}
		_, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_a", "idem_1", USD(1)), Now: T0.Add(2 * time.Second)})
		wantCode(t, err, keybrake.EUNAUTHORIZED)
		wantSpend(t, MustSpend(t, s, "key_a", T0, utc), keybrake.Spend{Day: USD(1), Month: USD(1), Total: USD(1)})
		if n := mustCountReservations(t, s, "key_a"); n != 1 {
			t.Fatalf("reservations = %d, want 1", n)
		}
	})
	t.Run("ErrUnauthorizedExpired", func(t *testing.T) {
		s := open(t)
		k := NewKey("key_a")
		exp := T0.Add(time.Hour)
		k.ExpiresAt = &exp
		MustCreateKey(t, s, k)
		MustReserve(t, s, "key_a", "idem_0", USD(1), exp.Add(-time.Microsecond))
		_, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_a", "idem_1", USD(1)), Now: exp})
		wantCode(t, err, keybrake.EUNAUTHORIZED)
		wantSpend(t, MustSpend(t, s, "key_a", T0, utc), keybrake.Spend{Day: USD(1), Month: USD(1), Total: USD(1)})
	})
	t.Run("ErrUnauthorizedExpiredByUpdate", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		exp := T0
		if _, err := s.UpdateKey(ctx, "key_a", keybrake.KeyUpdate{SetExpiresAt: true, ExpiresAt: &exp}, T0); err != nil {
			t.Fatalf("UpdateKey: %v", err)
		}
		_, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_a", "idem_1", USD(1)), Now: T0.Add(time.Second)})
		wantCode(t, err, keybrake.EUNAUTHORIZED)
	})

	t.Run("Replay", func(t *testing.T) {
		t.Run("OK", func(t *testing.T) {
			s := open(t)
			MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: Ptr(USD(10))})
			first := MustReserve(t, s, "key_a", "idem_1", USD(4), T0)
			res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_a", "idem_1", USD(4)), Now: T0.Add(time.Second)})
			if err != nil {
				t.Fatalf("Reserve replay: %v", err)
			}
			if !res.Replay || res.OverCap != nil || res.Reservation == nil {
				t.Fatalf("replay result = %+v, want Replay", res)
			}
			wantReservation(t, res.Reservation, first)
			wantSpend(t, MustSpend(t, s, "key_a", T0, utc), keybrake.Spend{Day: USD(4), Month: USD(4), Total: USD(4)})
			if n := mustCountReservations(t, s, "key_a"); n != 1 {
				t.Fatalf("reservations = %d, want 1", n)
			}
		})
		t.Run("OverCapStillReplays", func(t *testing.T) {
			// The replay was counted when first reserved; refusing it now
			// would break a client retrying a request that went through.
			s := open(t)
			MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: Ptr(USD(10))})
			first := MustReserve(t, s, "key_a", "idem_1", USD(10), T0)
			res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_a", "idem_1", USD(10)), Now: T0})
			if err != nil {
				t.Fatalf("Reserve replay: %v", err)
			}
			if !res.Replay || res.OverCap != nil || res.Reservation.ID != first.ID {
				t.Fatalf("replay result = %+v, want Replay of %s", res, first.ID)
			}
			wantSpend(t, MustSpend(t, s, "key_a", T0, utc), keybrake.Spend{Day: USD(10), Month: USD(10), Total: USD(10)})
		})
		t.Run("DifferentFingerprint", func(t *testing.T) {
			// The store reports the existing reservation; telling a reuse
			// from a replay by Fingerprint is the caller's business.
			s := open(t)
			MustCreateKey(t, s, NewKey("key_a"))
			first := MustReserve(t, s, "key_a", "idem_1", USD(1), T0)
			in := NewReservation("key_a", "idem_1", USD(2))
			in.Fingerprint = "other"
			res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: in, Now: T0})
			if err != nil {
				t.Fatalf("Reserve: %v", err)
			}
			if !res.Replay || res.Reservation.Fingerprint != first.Fingerprint || res.Reservation.Micros != USD(1) {
				t.Fatalf("result = %+v, want replay of the first", res.Reservation)
			}
			wantSpend(t, MustSpend(t, s, "key_a", T0, utc), keybrake.Spend{Day: USD(1), Month: USD(1), Total: USD(1)})
		})
		t.Run("AfterSettle", func(t *testing.T) {
			s := open(t)
			MustCreateKey(t, s, NewKey("key_a"))
			first := MustReserve(t, s, "key_a", "idem_1", USD(3), T0)
			MustSettle(t, s, keybrake.SettleArgs{ID: first.ID, State: keybrake.StateSettled, SettledMicros: USD(2), Amount: 200, Currency: "usd", Now: T0})
			res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_a", "idem_1", USD(3)), Now: T0})
			if err != nil {
				t.Fatalf("Reserve: %v", err)
			}
			if !res.Replay || res.Reservation.ID != first.ID || res.Reservation.State != keybrake.StateSettled {
				t.Fatalf("result = %+v, want replay of the settled reservation", res.Reservation)
			}
			wantSpend(t, MustSpend(t, s, "key_a", T0, utc), keybrake.Spend{Day: USD(2), Month: USD(2), Total: USD(2)})
		})
		t.Run("AfterRelease", func(t *testing.T) {
			s := open(t)
			MustCreateKey(t, s, NewKey("key_a"))
			first := MustReserve(t, s, "key_a", "idem_1", USD(3), T0)
			MustSettle(t, s, keybrake.SettleArgs{ID: first.ID, State: keybrake.StateReleased, Now: T0})
			res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_a", "idem_1", USD(3)), Now: T0})
			if err != nil {
				t.Fatalf("Reserve: %v", err)
			}
			if !res.Replay || res.Reservation.ID != first.ID || res.Reservation.State != keybrake.StateReleased {
				t.Fatalf("result = %+v, want replay of the released reservation", res.Reservation)
			}
			wantSpend(t, MustSpend(t, s, "key_a", T0, utc), keybrake.Spend{})
		})
		t.Run("OverNarrowedPerRequestCap", func(t *testing.T) {
			// A replay answers even after its key's per-request cap was
			// lowered under it: PostgreSQL finds the replay of a key
			// without guards only once a cap refuses (0043), SQLite first.
			s := open(t)
			MustCreateKey(t, s, NewKey("key_a"))
			first := MustReserve(t, s, "key_a", "idem_1", USD(5), T0)
			if _, err := s.UpdateKey(ctx, "key_a", keybrake.KeyUpdate{SetPerRequest: true, PerRequest: Ptr(USD(1))}, T0); err != nil {
				t.Fatal(err)
			}
			res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_a", "idem_1", USD(5)), Now: T0})
			if err != nil || !res.Replay || res.OverCap != nil || res.Reservation.ID != first.ID {
				t.Fatalf("replay = %+v, %v; want Replay of %s", res, err, first.ID)
			}
			res, err = s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_a", "idem_2", USD(5)), Now: T0})
			if err != nil || res.OverCap == nil || res.OverCap.Window != keybrake.WindowPerRequest {
				t.Fatalf("new request = %+v, %v; want over the per-request cap", res, err)
			}
			wantSpend(t, MustSpend(t, s, "key_a", T0, utc), keybrake.Spend{Day: USD(5), Month: USD(5), Total: USD(5)})
		})
		t.Run("OverCapGuardedKey", func(t *testing.T) {
			// A key with guards finds its replay before the caps and the
			// guards: answered, counting nothing, refusing nothing.
			s := open(t)
			MustCreateGuardedKey(t, s, "key_a", keybrake.Caps{Total: Ptr(USD(10))},
				&keybrake.Guards{Duplicate: &keybrake.DuplicateGuard{WindowSeconds: 3600}})
			first := reserveGuarded(t, s, NewCharge("key_a", "idem_1", "cus_1", USD(10)), T0)
			if first.Reservation == nil {
				t.Fatalf("first = %+v", first)
			}
			res := reserveGuarded(t, s, NewCharge("key_a", "idem_1", "cus_1", USD(10)), T0.Add(time.Second))
			if !res.Replay || res.OverCap != nil || res.Guard != nil || res.Reservation.ID != first.Reservation.ID {
				t.Fatalf("replay = %+v, want Replay of %s", res, first.Reservation.ID)
			}
			wantSpend(t, MustSpend(t, s, "key_a", T0, utc), keybrake.Spend{Day: USD(10), Month: USD(10), Total: USD(10)})
		})
		t.Run("GivenIDOfTheReplay", func(t *testing.T) {
			// The same given ID and Idempotency-Key again is the replay,
			// not a conflict of IDs.
			s := open(t)
			MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: Ptr(USD(10))})
			in := NewReservation("key_a", "idem_1", USD(4))
			in.ID = "res_given"
			if _, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: in, Now: T0}); err != nil {
				t.Fatal(err)
			}
			again := NewReservation("key_a", "idem_1", USD(4))
			again.ID = "res_given"
			res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: again, Now: T0})
			if err != nil || !res.Replay || res.Reservation.ID != "res_given" {
				t.Fatalf("replay = %+v, %v; want Replay of res_given", res, err)
			}
			other := NewReservation("key_a", "idem_2", USD(1))
			other.ID = "res_given"
			_, err = s.Reserve(ctx, keybrake.ReserveArgs{Reservation: other, Now: T0})
			wantCode(t, err, keybrake.ECONFLICT)
			wantSpend(t, MustSpend(t, s, "key_a", T0, utc), keybrake.Spend{Day: USD(4), Month: USD(4), Total: USD(4)})
		})
		t.Run("OtherKeyIndependent", func(t *testing.T) {
			s := open(t)
			MustCreateKey(t, s, NewKey("key_a"))
			MustCreateKey(t, s, NewKey("key_b"))
			a := MustReserve(t, s, "key_a", "idem_1", USD(1), T0)
			b := MustReserve(t, s, "key_b", "idem_1", USD(2), T0)
			if a.ID == b.ID {
				t.Fatalf("keys share reservation %s", a.ID)
			}
			wantSpend(t, MustSpend(t, s, "key_a", T0, utc), keybrake.Spend{Day: USD(1), Month: USD(1), Total: USD(1)})
			wantSpend(t, MustSpend(t, s, "key_b", T0, utc), keybrake.Spend{Day: USD(2), Month: USD(2), Total: USD(2)})
		})
	})

	t.Run("OverCap", func(t *testing.T) {
		// Each window on its own: 6.00 spent earlier today, then 4.50 asked
		// under a cap of 10.00 (per request: a cap of 4.00).
		nextDay := time.Date(2026, 11, 30, 0, 0, 0, 0, utc)
		nextMonth := time.Date(2026, 12, 1, 0, 0, 0, 0, utc)
		tests := []struct {
			name string
			caps keybrake.Caps
			want keybrake.OverCap
		}{
			{"PerRequest", keybrake.Caps{PerRequest: Ptr(USD(4))},
				keybrake.OverCap{Window: keybrake.WindowPerRequest, Cap: USD(4), Spent: 0, Requested: USD(4) + 500_000}},
			{"Daily", keybrake.Caps{Daily: Ptr(USD(10))},
				keybrake.OverCap{Window: keybrake.WindowDaily, Cap: USD(10), Spent: USD(6), Requested: USD(4) + 500_000, ResetsAt: &nextDay}},
			{"Monthly", keybrake.Caps{Monthly: Ptr(USD(10))},
				keybrake.OverCap{Window: keybrake.WindowMonthly, Cap: USD(10), Spent: USD(6), Requested: USD(4) + 500_000, ResetsAt: &nextMonth}},
			{"Total", keybrake.Caps{Total: Ptr(USD(10))},
				keybrake.OverCap{Window: keybrake.WindowTotal, Cap: USD(10), Spent: USD(6), Requested: USD(4) + 500_000}},
			{"PerRequestFirst", keybrake.Caps{PerRequest: Ptr(USD(4)), Daily: Ptr(USD(10)), Monthly: Ptr(USD(10)), Total: Ptr(USD(10))},
				keybrake.OverCap{Window: keybrake.WindowPerRequest, Cap: USD(4), Spent: 0, Requested: USD(4) + 500_000}},
			{"DailyBeforeMonthly", keybrake.Caps{Daily: Ptr(USD(10)), Monthly: Ptr(USD(10)), Total: Ptr(USD(10))},
				keybrake.OverCap{Window: keybrake.WindowDaily, Cap: USD(10), Spent: USD(6), Requested: USD(4) + 500_000, ResetsAt: &nextDay}},
			{"MonthlyBeforeTotal", keybrake.Caps{Daily: Ptr(USD(100)), Monthly: Ptr(USD(10)), Total: Ptr(USD(10))},
				keybrake.OverCap{Window: keybrake.WindowMonthly, Cap: USD(10), Spent: USD(6), Requested: USD(4) + 500_000, ResetsAt: &nextMonth}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				s := open(t)
				MustCreateCappedKey(t, s, "key_a", "UTC", tt.caps)
				MustReserve(t, s, "key_a", "idem_1", USD(3), T0.Add(-time.Hour))
				MustReserve(t, s, "key_a", "idem_2", USD(3), T0.Add(-time.Minute))
				before := MustSpend(t, s, "key_a", T0, utc)
				got := MustOverCap(t, s, "key_a", "idem_3", USD(4)+500_000, T0)
				wantTimePtr(t, "ResetsAt", got.ResetsAt, tt.want.ResetsAt)
				g, w := *got, tt.want
				g.ResetsAt, w.ResetsAt = nil, nil
				if g != w {
					t.Fatalf("OverCap = %+v, want %+v", g, w)
				}
				// Nothing recorded: no reservation, no spend, and the
				// refused Idempotency-Key is free to be used again.
				wantSpend(t, MustSpend(t, s, "key_a", T0, utc), before)
				if n := mustCountReservations(t, s, "key_a"); n != 2 {
					t.Fatalf("reservations = %d, want 2", n)
				}
				MustReserve(t, s, "key_a", "idem_3", 1, T0)
			})
		}
	})

	t.Run("AtCap", func(t *testing.T) {
		// 6.00 spent, cap 10.00: 4.00 lands exactly on the cap and passes,
		// 4.000001 is refused.
		tests := []struct {
			name string
			caps keybrake.Caps
		}{
			{"PerRequest", keybrake.Caps{PerRequest: Ptr(USD(4))}},
			{"Daily", keybrake.Caps{Daily: Ptr(USD(10))}},
			{"Monthly", keybrake.Caps{Monthly: Ptr(USD(10))}},
			{"Total", keybrake.Caps{Total: Ptr(USD(10))}},
		}
		for _, tt := range tests {
			t.Run(tt.name+"/OK", func(t *testing.T) {
				s := open(t)
				MustCreateCappedKey(t, s, "key_a", "UTC", tt.caps)
				MustReserve(t, s, "key_a", "idem_1", USD(3), T0)
				MustReserve(t, s, "key_a", "idem_2", USD(3), T0)
				MustReserve(t, s, "key_a", "idem_3", USD(4), T0)
			})
			t.Run(tt.name+"/OneMicroOver", func(t *testing.T) {
				s := open(t)
				MustCreateCappedKey(t, s, "key_a", "UTC", tt.caps)
				MustReserve(t, s, "key_a", "idem_1", USD(3), T0)
				MustReserve(t, s, "key_a", "idem_2", USD(3), T0)
				MustOverCap(t, s, "key_a", "idem_3", USD(4)+1, T0)
			})
		}
		t.Run("ZeroCapRefusesOneMicro", func(t *testing.T) {
			s := open(t)
			MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Daily: Ptr(0)})
			MustOverCap(t, s, "key_a", "idem_1", 1, T0)
		})
		t.Run("HugeAmountNoOverflow", func(t *testing.T) {
			s := open(t)
			MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: Ptr(USD(10))})
			MustReserve(t, s, "key_a", "idem_1", USD(1), T0)
			MustOverCap(t, s, "key_a", "idem_2", keybrake.Micros(1<<63-1), T0)
		})
	})

	t.Run("CapLoweredBelowSpend", func(t *testing.T) {
		tests := []struct {
			name string
			upd  keybrake.KeyUpdate
		}{
			{"Daily", keybrake.KeyUpdate{SetDaily: true, Daily: Ptr(USD(5))}},
			{"Monthly", keybrake.KeyUpdate{SetMonthly: true, Monthly: Ptr(USD(5))}},
			{"Total", keybrake.KeyUpdate{SetTotal: true, Total: Ptr(USD(5))}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				s := open(t)
				MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Daily: Ptr(USD(100)), Monthly: Ptr(USD(100)), Total: Ptr(USD(100))})
				MustReserve(t, s, "key_a", "idem_1", USD(8), T0)
				if _, err := s.UpdateKey(ctx, "key_a", tt.upd, T0); err != nil {
					t.Fatalf("UpdateKey: %v", err)
				}
				oc := MustOverCap(t, s, "key_a", "idem_2", 1, T0)
				if oc.Spent != USD(8) || oc.Cap != USD(5) || oc.Remaining() != 0 {
					t.Fatalf("OverCap = %+v, want spent 8.00 cap 5.00", *oc)
				}
			})
		}
	})

	t.Run("CapRaisedTakesEffect", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: Ptr(USD(5))})
		MustReserve(t, s, "key_a", "idem_1", USD(5), T0)
		MustOverCap(t, s, "key_a", "idem_2", USD(1), T0)
		if _, err := s.UpdateKey(ctx, "key_a", keybrake.KeyUpdate{SetTotal: true}, T0); err != nil {
			t.Fatalf("UpdateKey: %v", err)
		}
		MustReserve(t, s, "key_a", "idem_2", USD(1000), T0)
	})
}
