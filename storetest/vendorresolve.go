package storetest

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// mustReserveOp reserves m for one request of operation op at now.
func mustReserveOp(tb testing.TB, s keybrake.Store, keyID, idem, op string, m keybrake.Micros, now time.Time) *keybrake.Reservation {
	tb.Helper()
	r := NewReservation(keyID, idem, m)
	r.Operation = op
	res, err := s.Reserve(context.Background(), keybrake.ReserveArgs{Reservation: r, Now: now})
	if err != nil || res.Reservation == nil || res.Replay {
		tb.Fatalf("Reserve(%s, %s) = %+v, %v", keyID, idem, res, err)
	}
	return res.Reservation
}

// testVendorResolve covers what the resolver of Twilio's lost answers and
// held prices reads: reservations by object, open reservations of one
// operation in a window, and the held ones that are due.
func testVendorResolve(t *testing.T, open opener) {
	ctx := context.Background()
	const sms, call = "twilio.messages.create", "twilio.calls.create"
	find := func(t *testing.T, s keybrake.Store, f keybrake.ReservationFilter) []string {
		t.Helper()
		rs, err := s.FindReservations(ctx, f)
		if err != nil {
			t.Fatalf("FindReservations(%+v): %v", f, err)
		}
		return ids(rs)
	}
	t.Run("FindByObjectAndOpenOperation", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		MustCreateKey(t, s, NewKey("key_b"))
		a1 := mustReserveOp(t, s, "key_a", "i1", sms, 10_000, T0)
		a2 := mustReserveOp(t, s, "key_a", "i2", sms, 10_000, T0.Add(time.Second))
		b1 := mustReserveOp(t, s, "key_b", "i1", sms, 10_000, T0.Add(2*time.Second))
		c1 := mustReserveOp(t, s, "key_b", "i2", call, 10_000, T0.Add(2*time.Second))
		a3 := mustReserveOp(t, s, "key_a", "i3", sms, 10_000, T0.Add(time.Minute))
		MustSettle(t, s, keybrake.SettleArgs{ID: a1.ID, State: keybrake.StateHeld, SettledMicros: 10_000, Amount: 1, Currency: "usd", ObjectID: "SM1", Now: T0})
		MustSettle(t, s, keybrake.SettleArgs{ID: a2.ID, State: keybrake.StateUncertain, Now: T0})
		MustSettle(t, s, keybrake.SettleArgs{ID: b1.ID, State: keybrake.StateReleased, ObjectID: "SM2", Now: T0})

		if got, want := find(t, s, keybrake.ReservationFilter{ObjectID: "SM1"}), []string{a1.ID}; !reflect.DeepEqual(got, want) {
			t.Fatalf("by object SM1 = %v, want %v", got, want)
		}
		if got, want := find(t, s, keybrake.ReservationFilter{ObjectID: "SM2"}), []string{b1.ID}; !reflect.DeepEqual(got, want) {
			t.Fatalf("by object SM2 = %v, want %v (a released reservation still names its object)", got, want)
		}
		if got := find(t, s, keybrake.ReservationFilter{ObjectID: "SM9"}); len(got) != 0 {
			t.Fatalf("unknown object = %v", got)
		}
		// Only Twilio's reservations are found by object: a Stripe charge's
		// ID is not indexed (ReservationFilter.ObjectID).
		st := mustReserveOp(t, s, "key_b", "i3", "charges.create", 10_000, T0)
		MustSettle(t, s, keybrake.SettleArgs{ID: st.ID, State: keybrake.StateSettled, SettledMicros: 10_000, Amount: 1, Currency: "usd", ObjectID: "ch_1", Now: T0})
		if got := find(t, s, keybrake.ReservationFilter{ObjectID: "ch_1"}); len(got) != 0 {
			t.Fatalf("a Stripe charge by object = %v, want none", got)
		}
		if got, want := find(t, s, keybrake.ReservationFilter{KeyID: "key_b", Operation: "charges.create"}), []string{st.ID}; !reflect.DeepEqual(got, want) {
			t.Fatalf("the Stripe charge by key and operation = %v, want %v", got, want)
		}
		// Open (reserved or uncertain) messages created in [T0, T0+30s):
		// not the held one, the released one, the call, or the later one.
		f := keybrake.ReservationFilter{Operation: sms, Open: true, CreatedFrom: T0, CreatedBefore: T0.Add(30 * time.Second)}
		if got, want := find(t, s, f), []string{a2.ID}; !reflect.DeepEqual(got, want) {
			t.Fatalf("open messages in the window = %v, want %v", got, want)
		}
		f.CreatedBefore = T0.Add(2 * time.Minute)
		if got, want := find(t, s, f), []string{a2.ID, a3.ID}; !reflect.DeepEqual(got, want) {
			t.Fatalf("open messages in a wider window = %v, want %v", got, want)
		}
		if got, want := find(t, s, keybrake.ReservationFilter{Operation: call, Open: true}), []string{c1.ID}; !reflect.DeepEqual(got, want) {
			t.Fatalf("open calls = %v, want %v", got, want)
		}
	})
	t.Run("LeaseHeld", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		held := func(idem, op string, at time.Time) *keybrake.Reservation {
			r := mustReserveOp(t, s, "key_a", idem, op, 10_000, at)
			return MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateHeld, SettledMicros: 10_000, Amount: 1, Currency: "usd", ObjectID: "SM_" + idem, Now: at})
		}
		m1 := held("m1", sms, T0)
		m2 := held("m2", sms, T0.Add(time.Second))
		c1 := held("c1", call, T0.Add(2*time.Second))
		held("pi", "payment_intents.create", T0)            // a Stripe hold: never leased here
		mustReserveOp(t, s, "key_a", "m3", sms, 10_000, T0) // open: never leased here
		lease := func(owner string, now, until time.Time, limit int) []string {
			t.Helper()
			rs, err := s.LeaseHeld(ctx, keybrake.LeaseHeldArgs{Operations: []string{sms, call}, Owner: owner, Now: now, Until: until, Limit: limit})
			if err != nil {
				t.Fatalf("LeaseHeld(%s): %v", owner, err)
			}
			for _, r := range rs {
				if r.State != keybrake.StateHeld || r.LeaseOwner != owner {
					t.Fatalf("leased %+v", r)
				}
			}
			return ids(rs)
		}
		now := T0.Add(time.Minute)
		// Bounded: two of the three due, oldest first.
		if got, want := lease("r1", now, now.Add(time.Minute), 2), []string{m1.ID, m2.ID}; !reflect.DeepEqual(got, want) {
			t.Fatalf("first lease = %v, want %v", got, want)
		}
		// What r1 leased is not due again before its lease ends, to anyone.
		if got, want := lease("r2", now, now.Add(30*time.Second), 0), []string{c1.ID}; !reflect.DeepEqual(got, want) {
			t.Fatalf("second lease = %v, want %v", got, want)
		}
		if got := lease("r3", now.Add(10*time.Second), now.Add(time.Hour), 0); len(got) != 0 {
			t.Fatalf("nothing is due yet, leased %v", got)
		}
		// The longest due first: c1's lease ended before m1's and m2's.
		later := now.Add(2 * time.Minute)
		if got, want := lease("r4", later, later.Add(time.Minute), 0), []string{c1.ID, m1.ID, m2.ID}; !reflect.DeepEqual(got, want) {
			t.Fatalf("lease after expiry = %v, want %v", got, want)
		}
		// A settled reservation is no longer held, and never leased again.
		MustSettle(t, s, keybrake.SettleArgs{ID: m1.ID, State: keybrake.StateSettled, SettledMicros: 7_900, Amount: 1, Currency: "usd", Now: later})
		evenLater := later.Add(time.Hour)
		// m2 and c1 were due at the same time: the older first.
		if got, want := lease("r5", evenLater, evenLater.Add(time.Minute), 0), []string{m2.ID, c1.ID}; !reflect.DeepEqual(got, want) {
			t.Fatalf("lease after settling m1 = %v, want %v", got, want)
		}
		if rs, err := s.LeaseHeld(ctx, keybrake.LeaseHeldArgs{Owner: "r6", Now: evenLater, Until: evenLater}); err != nil || len(rs) != 0 {
			t.Fatalf("no operations leased %v, %v", ids(rs), err)
		}
	})
}
