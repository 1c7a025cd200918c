package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

func testConcurrency(t *testing.T, open opener) {
	ctx := context.Background()

	// 200 goroutines each reserve 1.00 under a 50.00 cap: exactly 50 pass.
	for _, tt := range []struct {
		name string
		caps keybrake.Caps
	}{
		{"Total", keybrake.Caps{Total: Ptr(USD(50))}},
		{"Daily", keybrake.Caps{Daily: Ptr(USD(50))}},
		{"Monthly", keybrake.Caps{Monthly: Ptr(USD(50))}},
	} {
		t.Run("Reserve200"+tt.name, func(t *testing.T) {
			s := open(t)
			MustCreateCappedKey(t, s, "key_a", "America/New_York", tt.caps)
			var ok, over atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 200)
			start := make(chan struct{})
			for i := range 200 {
				wg.Go(func() {
					<-start
					res, err := s.Reserve(ctx, keybrake.ReserveArgs{
						Reservation: NewReservation("key_a", fmt.Sprintf("idem_%d", i), USD(1)),
						Now:         T0,
					})
					switch {
					case err != nil:
						errs <- err
					case res.OverCap != nil:
						over.Add(1)
					case res.Replay:
						errs <- fmt.Errorf("idem_%d: unexpected replay", i)
					default:
						ok.Add(1)
					}
				})
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("Reserve: %v", err)
			}
			if ok.Load() != 50 || over.Load() != 150 {
				t.Fatalf("passed %d, refused %d; want 50 and 150", ok.Load(), over.Load())
			}
			ny := MustLocation(t, "America/New_York")
			wantSpend(t, MustSpend(t, s, "key_a", T0, ny), keybrake.Spend{Day: USD(50), Month: USD(50), Total: USD(50)})
			if n := mustCountReservations(t, s, "key_a"); n != 50 {
				t.Fatalf("reservations = %d, want 50", n)
			}
		})
	}

	t.Run("ManyKeys", func(t *testing.T) { testManyKeysConcurrent(t, open) })

	t.Run("ReplayRace", func(t *testing.T) {
		// 50 goroutines send the same Idempotency-Key: one counts, all
		// see the same reservation.
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		var wg sync.WaitGroup
		var fresh atomic.Int64
		got := make([]string, 50)
		errs := make(chan error, 50)
		for i := range 50 {
			wg.Go(func() {
				res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_a", "idem_same", USD(3)), Now: T0})
				if err != nil {
					errs <- err
					return
				}
				if !res.Replay {
					fresh.Add(1)
				}
				got[i] = res.Reservation.ID
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("Reserve: %v", err)
		}
		if fresh.Load() != 1 {
			t.Fatalf("%d goroutines reserved anew, want 1", fresh.Load())
		}
		for _, id := range got {
			if id != got[0] {
				t.Fatalf("reservation IDs differ: %s vs %s", id, got[0])
			}
		}
		wantSpend(t, MustSpend(t, s, "key_a", T0, time.UTC), keybrake.Spend{Day: USD(3), Month: USD(3), Total: USD(3)})
	})

	t.Run("SettleReserveInterleaved", func(t *testing.T) {
		// Workers reserve and then settle (for less), release or mark
		// uncertain, while a watcher checks the cap is never exceeded.
		// At the end the counters equal the sum over the reservations.
		const (
			workers = 8
			rounds  = 40
		)
		capm := USD(50)
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Daily: Ptr(capm), Total: Ptr(capm)})
		var wg sync.WaitGroup
		errs := make(chan error, workers*rounds+1)
		done := make(chan struct{})
		var watcher sync.WaitGroup
		watcher.Go(func() {
			day, month := keybrake.Buckets(T0, time.UTC)
			for {
				select {
				case <-done:
					return
				default:
				}
				sp, err := s.Spend(ctx, "key_a", day, month)
				if err != nil {
					errs <- err
					return
				}
				if sp.Total > capm || sp.Day > capm {
					errs <- fmt.Errorf("spend %+v exceeds cap %s", sp, capm)
					return
				}
			}
		})
		for w := range workers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 42))
				for i := range rounds {
					amount := keybrake.Micros(rng.Int64N(int64(USD(5)))) + 1
					res, err := s.Reserve(ctx, keybrake.ReserveArgs{
						Reservation: NewReservation("key_a", fmt.Sprintf("idem_%d_%d", w, i), amount),
						Now:         T0,
					})
					if err != nil {
						errs <- err
						return
					}
					if res.OverCap != nil {
						if res.OverCap.Spent+amount <= res.OverCap.Cap {
							errs <- fmt.Errorf("refused %s with %s spent of %s", amount, res.OverCap.Spent, res.OverCap.Cap)
						}
						continue
					}
					args := keybrake.SettleArgs{ID: res.Reservation.ID, Now: T0}
					switch rng.IntN(4) {
					case 0:
						args.State = keybrake.StateReleased
					case 1:
						args.State = keybrake.StateSettled
						args.SettledMicros = amount / 2
					case 2:
						args.State = keybrake.StateSettled
						args.SettledMicros = amount
					case 3:
						args.State = keybrake.StateUncertain
					}
					if _, err := s.Settle(ctx, args); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(done)
		watcher.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("%v", err)
		}

		rs, err := s.FindReservations(ctx, keybrake.ReservationFilter{KeyID: "key_a"})
		if err != nil {
			t.Fatalf("FindReservations: %v", err)
		}
		var counted, uncertain keybrake.Micros
		for _, r := range rs {
			switch r.State {
			case keybrake.StateSettled:
				counted += r.SettledMicros
			case keybrake.StateUncertain:
				counted += r.Micros
				uncertain += r.Micros
			case keybrake.StateReserved:
				counted += r.Micros
			}
		}
		if counted > capm {
			t.Fatalf("counted %s exceeds cap %s", counted, capm)
		}
		wantSpend(t, MustSpend(t, s, "key_a", T0, time.UTC), keybrake.Spend{Day: counted, Month: counted, Total: counted, Uncertain: uncertain})
	})
}
