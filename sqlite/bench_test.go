package sqlite_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/storetest"
)

// BenchmarkReserveSettle measures one proxied charge's store work on one hot
// key with every cap set: Reserve, Settle (for less), AddEvent.
func BenchmarkReserveSettle(b *testing.B) {
	ctx := context.Background()
	s, _ := MustOpen(b)
	defer s.Close()
	huge := keybrake.Micros(1 << 60)
	storetest.MustCreateCappedKey(b, s, "key_hot", "America/New_York", keybrake.Caps{
		PerRequest: storetest.Ptr(storetest.USD(100)), Daily: &huge, Monthly: &huge, Total: &huge,
	})
	var n atomic.Int64
	charge := func(tb testing.TB) {
		i := n.Add(1)
		now := storetest.T0.Add(time.Duration(i) * time.Microsecond)
		in := storetest.NewReservation("key_hot", fmt.Sprintf("idem_%d", i), storetest.USD(1))
		res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: in, Now: now})
		if err != nil || res.OverCap != nil || res.Replay {
			tb.Fatalf("Reserve: %+v %v", res, err)
		}
		if _, err := s.Settle(ctx, keybrake.SettleArgs{ID: res.Reservation.ID, State: keybrake.StateSettled,
			SettledMicros: 990_000, Amount: 99, Currency: "usd", ObjectID: "ch_x", UpstreamStatus: 200, Now: now}); err != nil {
			tb.Fatalf("Settle: %v", err)
		}
		e := storetest.NewEvent("key_hot", now, 1)
		e.ReservationID = res.Reservation.ID
		if err := s.AddEvent(ctx, e); err != nil {
			tb.Fatalf("AddEvent: %v", err)
		}
	}

	b.Run("Serial", func(b *testing.B) {
		defer reportCPU(b)()
		for b.Loop() {
			charge(b)
		}
	})
	b.Run("Parallel", func(b *testing.B) {
		defer reportCPU(b)()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				charge(b)
			}
		})
	})
	// One client as serve has it: the reservation waited for, the
	// settlement queued after the answer (SettleLater) and not waited for,
	// so it may still be committing when the next reservation comes.
	b.Run("SerialSettleLater", func(b *testing.B) {
		defer reportCPU(b)()
		for b.Loop() {
			i := n.Add(1)
			now := storetest.T0.Add(time.Duration(i) * time.Microsecond)
			res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: storetest.NewReservation("key_hot", fmt.Sprintf("idem_%d", i), storetest.USD(1)), Now: now})
			if err != nil || res.OverCap != nil {
				b.Fatalf("Reserve: %+v %v", res, err)
			}
			if err := s.SettleLater(ctx, keybrake.SettleArgs{ID: res.Reservation.ID, State: keybrake.StateSettled,
				SettledMicros: 990_000, Amount: 99, Currency: "usd", ObjectID: "ch_x", UpstreamStatus: 200, Now: now}, nil); err != nil {
				b.Fatalf("SettleLater: %v", err)
			}
		}
		if err := s.FlushSettlements(ctx); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkReserve measures Reserve alone on a hot key.
func BenchmarkReserve(b *testing.B) {
	ctx := context.Background()
	s, _ := MustOpen(b)
	defer s.Close()
	storetest.MustCreateKey(b, s, storetest.NewKey("key_hot"))
	i := 0
	defer reportCPU(b)()
	for b.Loop() {
		i++
		in := storetest.NewReservation("key_hot", fmt.Sprintf("idem_%d", i), 1)
		if _, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: in, Now: storetest.T0}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSettle measures Settle alone (for less than reserved).
func BenchmarkSettle(b *testing.B) {
	ctx := context.Background()
	s, _ := MustOpen(b)
	defer s.Close()
	storetest.MustCreateKey(b, s, storetest.NewKey("key_hot"))
	var ids []string
	for i := range b.N {
		ids = append(ids, storetest.MustReserve(b, s, "key_hot", fmt.Sprintf("idem_%d", i), 1000, storetest.T0).ID)
	}
	b.ResetTimer()
	defer reportCPU(b)()
	for i := range b.N {
		if _, err := s.Settle(ctx, keybrake.SettleArgs{ID: ids[i], State: keybrake.StateSettled, SettledMicros: 900, Now: storetest.T0}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAddEvent measures AddEvent alone.
func BenchmarkAddEvent(b *testing.B) {
	ctx := context.Background()
	s, _ := MustOpen(b)
	defer s.Close()
	defer reportCPU(b)()
	for i := 0; b.Loop(); i++ {
		if err := s.AddEvent(ctx, storetest.NewEvent("key_hot", storetest.T0, i)); err != nil {
			b.Fatal(err)
		}
	}
}

// cpuTime returns the process's user+system CPU time. Benchmarks report it
// per op besides wall time: on a shared machine it is the steadier number.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU starts the CPU clock; call the result when the loop is done.
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() {
		b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkAddEvents writes batches of 64 events over 8 keys, as the
// proxy's background audit writer does; ns/op is per event.
func BenchmarkAddEvents(b *testing.B) {
	ctx := context.Background()
	s, _ := MustOpen(b)
	defer s.Close()
	defer reportCPU(b)()
	batch := make([]*keybrake.Event, 0, 64)
	for i := 0; b.Loop(); i++ {
		batch = append(batch, storetest.NewEvent(fmt.Sprintf("key_%d", i%8), storetest.T0, i))
		if len(batch) == cap(batch) {
			if err := s.AddEvents(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

// BenchmarkCharge measures the store's CPU per proxied charge as keybrake
// serve drives it at 64 clients: each client reserves and then settles,
// and one audit writer appends the events in batches of up to 64 (as
// http's auditLog does), so the writer commits them in groups. HotKey
// charges one key; Keys1000 spreads the charges round-robin over 1,000
// keys. cpu-ns/op is the number to compare (the process's CPU per charge).
func BenchmarkCharge(b *testing.B) {
	for _, tc := range []struct {
		name string
		keys int
	}{{"HotKey", 1}, {"Keys1000", 1000}} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			s, _ := MustOpen(b)
			defer s.Close()
			huge := keybrake.Micros(1 << 60)
			ids := make([]string, tc.keys)
			for i := range ids {
				ids[i] = fmt.Sprintf("key_%04d", i)
				storetest.MustCreateCappedKey(b, s, ids[i], "America/New_York", keybrake.Caps{
					PerRequest: storetest.Ptr(storetest.USD(100)), Daily: &huge, Monthly: &huge, Total: &huge,
				})
			}
			events, audited := storetest.AuditInBatches(b, s, 1024)
			var n atomic.Int64
			b.SetParallelism(64 / max(1, runtime.GOMAXPROCS(0)))
			defer reportCPU(b)()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					key := ids[int(i)%len(ids)]
					now := storetest.T0.Add(time.Duration(i) * time.Microsecond)
					in := storetest.NewReservation(key, fmt.Sprintf("idem_%d", i), storetest.USD(1))
					res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: in, Now: now})
					if err != nil || res.OverCap != nil || res.Replay {
						b.Errorf("Reserve: %+v %v", res, err)
						return
					}
					if _, err := s.Settle(ctx, keybrake.SettleArgs{ID: res.Reservation.ID, State: keybrake.StateSettled,
						SettledMicros: 990_000, Amount: 99, Currency: "usd", ObjectID: fmt.Sprintf("ch_%d", i), UpstreamStatus: 200, Now: now}); err != nil {
						b.Errorf("Settle: %v", err)
						return
					}
					e := storetest.NewEvent(key, now, int(i))
					e.ReservationID = res.Reservation.ID
					events <- e
				}
			})
			close(events)
			<-audited
		})
	}
}
