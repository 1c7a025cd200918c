package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// mustLaterSettler returns s as a keybrake.LaterSettler: every store
// implements it.
func mustLaterSettler(tb testing.TB, s keybrake.Store) keybrake.LaterSettler {
	tb.Helper()
	ls, ok := s.(keybrake.LaterSettler)
	if !ok {
		tb.Fatalf("%T does not implement keybrake.LaterSettler", s)
	}
	return ls
}

// outcome is what a SettleLater's done callback received.
type outcome struct {
	r   *keybrake.Reservation
	err error
}

// settleLater queues args and returns the channel its outcome arrives on.
func settleLater(tb testing.TB, ls keybrake.LaterSettler, args keybrake.SettleArgs) <-chan outcome {
	tb.Helper()
	ch := make(chan outcome, 1)
	if err := ls.SettleLater(context.Background(), args, func(r *keybrake.Reservation, err error) { ch <- outcome{r, err} }); err != nil {
		tb.Fatalf("SettleLater(%s): %v", args.ID, err)
	}
	return ch
}

func mustFlush(tb testing.TB, ls keybrake.LaterSettler) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ls.FlushSettlements(ctx); err != nil {
		tb.Fatalf("FlushSettlements: %v", err)
	}
}

func testSettleLater(t *testing.T, open opener) {
	later := T0.Add(2 * time.Second)
	spend := func(m keybrake.Micros) keybrake.Spend { return keybrake.Spend{Day: m, Month: m, Total: m} }

	t.Run("OK", func(t *testing.T) {
		s := open(t)
		ls := mustLaterSettler(t, s)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: Ptr(USD(10))})
		r := MustReserve(t, s, "key_a", "idem_1", USD(10), T0)
		got := settleLater(t, ls, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateSettled, SettledMicros: USD(6), Amount: 600, Currency: "usd", ObjectID: "ch_1", UpstreamStatus: 200, Now: later})
		mustFlush(t, ls)
		o := <-got
		if o.err != nil {
			t.Fatalf("done: %v", o.err)
		}
		want := *r
		want.State, want.SettledMicros, want.Amount, want.Currency = keybrake.StateSettled, USD(6), 600, "usd"
		want.ObjectID, want.UpstreamStatus, want.UpdatedAt = "ch_1", 200, later
		wantReservation(t, o.r, &want)
		wantReservation(t, mustFindReservation(t, s, r.ID), &want)
		wantSpend(t, MustSpend(t, s, "key_a", T0, time.UTC), spend(USD(6)))
		MustReserve(t, s, "key_a", "idem_2", USD(4), later)
	})
	t.Run("ManyConcurrent", func(t *testing.T) {
		// Settlements queued together commit together and each counts
		// exactly once.
		s := open(t)
		ls := mustLaterSettler(t, s)
		MustCreateKey(t, s, NewKey("key_a"))
		MustCreateKey(t, s, NewKey("key_b"))
		const n = 40
		var rs []*keybrake.Reservation
		for i := range n {
			key := []string{"key_a", "key_b"}[i%2]
			rs = append(rs, MustReserve(t, s, key, fmt.Sprintf("idem_%d", i), USD(3), T0))
		}
		var wg sync.WaitGroup
		outs := make([]<-chan outcome, n)
		for i, r := range rs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				outs[i] = settleLater(t, ls, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateSettled, SettledMicros: USD(2), Now: later})
			}()
		}
		wg.Wait()
		mustFlush(t, ls)
		for i, ch := range outs {
			if o := <-ch; o.err != nil || o.r.State != keybrake.StateSettled {
				t.Fatalf("settlement %d: %+v %v", i, o.r, o.err)
			}
		}
		wantSpend(t, MustSpend(t, s, "key_a", T0, time.UTC), spend(USD(2*n/2)))
		wantSpend(t, MustSpend(t, s, "key_b", T0, time.UTC), spend(USD(2*n/2)))
	})
	t.Run("ErrConflict", func(t *testing.T) {
		// Settled elsewhere first (the resolver): the late settlement
		// changes nothing and reports the conflict.
		s := open(t)
		ls := mustLaterSettler(t, s)
		MustCreateKey(t, s, NewKey("key_a"))
		r := MustReserve(t, s, "key_a", "idem_1", USD(5), T0)
		MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateSettled, SettledMicros: USD(4), Now: later})
		got := settleLater(t, ls, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateSettled, SettledMicros: USD(5), Now: later})
		mustFlush(t, ls)
		wantCode(t, (<-got).err, keybrake.ECONFLICT)
		wantSpend(t, MustSpend(t, s, "key_a", T0, time.UTC), spend(USD(4)))
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		s := open(t)
		ls := mustLaterSettler(t, s)
		got := settleLater(t, ls, keybrake.SettleArgs{ID: "rsv_missing", State: keybrake.StateSettled, SettledMicros: USD(1), Now: later})
		mustFlush(t, ls)
		wantCode(t, (<-got).err, keybrake.ENOTFOUND)
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		// Only a settlement to settled may wait: released, uncertain and
		// held change what a retry or another replica must see at once.
		s := open(t)
		ls := mustLaterSettler(t, s)
		MustCreateKey(t, s, NewKey("key_a"))
		r := MustReserve(t, s, "key_a", "idem_1", USD(5), T0)
		for _, a := range []keybrake.SettleArgs{
			{ID: r.ID, State: keybrake.StateReleased, Now: later},
			{ID: r.ID, State: keybrake.StateUncertain, Now: later},
			{ID: r.ID, State: keybrake.StateHeld, SettledMicros: USD(5), Now: later},
			{ID: r.ID, State: keybrake.StateSettled, SettledMicros: -1, Now: later},
		} {
			err := ls.SettleLater(context.Background(), a, func(*keybrake.Reservation, error) { t.Errorf("done called for a refused %+v", a) })
			wantCode(t, err, keybrake.EINVALID)
		}
		mustFlush(t, ls)
		if got := mustFindReservation(t, s, r.ID); got.State != keybrake.StateReserved {
			t.Fatalf("state = %s, want reserved", got.State)
		}
		wantSpend(t, MustSpend(t, s, "key_a", T0, time.UTC), spend(USD(5)))
	})
	t.Run("CloseWaits", func(t *testing.T) {
		// Close lets queued settlements commit before closing; the
		// outcome is known when Close returns.
		s := open(t)
		ls := mustLaterSettler(t, s)
		MustCreateKey(t, s, NewKey("key_a"))
		r := MustReserve(t, s, "key_a", "idem_1", USD(5), T0)
		got := settleLater(t, ls, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateSettled, SettledMicros: USD(5), Now: later})
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case o := <-got:
			if o.err != nil {
				t.Fatalf("done: %v", o.err)
			}
		default:
			t.Fatal("Close returned before the queued settlement was answered")
		}
	})
}
