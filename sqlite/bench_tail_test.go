package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/storetest"
)

// BenchmarkOpenLoopTail measures the store's part of a capped charge's tail
// latency in an open loop, as keybrake serve sees it at 1,000 charges/s
// over 64 connections: b.N charges are scheduled 1 ms apart, taken by
// whichever of 64 clients is free, and each one's Reserve latency (the
// part on the request path before forwarding) counts from its scheduled
// time, so a stall counts against every charge queued behind it. Each
// charge then settles through SettleLater and appends an audit event (one
// batching writer), as serve does. The sub-benchmarks differ in how the log
// starts over: Writer (the writer copies the last frames between two group
// commits) and Restart (a RESTART checkpoint, which holds the write lock).
// Run with -benchtime 30000x for 30 s each, alternated with -count.
func BenchmarkOpenLoopTail(b *testing.B) {
	for _, onWriter := range []bool{true, false} {
		name := map[bool]string{true: "Writer", false: "Restart"}[onWriter]
		b.Run(name, func(b *testing.B) { openLoopTail(b, onWriter) })
	}
}

func openLoopTail(b *testing.B, onWriter bool) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "kb.db")
	s, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	// The store's checkpointer, replaced by one that restarts the log the
	// way this sub-benchmark measures.
	s.checkpoints.close()
	var writer func(context.Context) (walState, error)
	if onWriter {
		writer = s.checkpointOnWriter
	}
	pragmas := storePragmas("wal_autocheckpoint(0)")
	if s.checkpoints, err = startCheckpointer(path, pragmas, writer); err != nil {
		b.Fatal(err)
	}
	huge := keybrake.Micros(1 << 60)
	storetest.MustCreateCappedKey(b, s, "key_hot", "America/New_York", keybrake.Caps{
		PerRequest: storetest.Ptr(storetest.USD(100)), Daily: &huge, Monthly: &huge, Total: &huge,
	})

	events, audited := storetest.AuditInBatches(b, s, 4096)

	type charge struct {
		i   int
		due time.Time
	}
	due := make(chan charge, b.N)
	lat := make([]time.Duration, b.N)
	var settled sync.WaitGroup
	var clients sync.WaitGroup
	for range 64 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			for c := range due {
				now := storetest.T0.Add(time.Duration(c.i) * time.Microsecond)
				in := storetest.NewReservation("key_hot", fmt.Sprintf("idem_%d", c.i), storetest.USD(1))
				res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: in, Now: now})
				lat[c.i] = time.Since(c.due)
				if err != nil || res.OverCap != nil || res.Replay {
					b.Errorf("Reserve: %+v %v", res, err)
					continue
				}
				settled.Add(1)
				args := keybrake.SettleArgs{ID: res.Reservation.ID, State: keybrake.StateSettled, SettledMicros: 990_000,
					Amount: 99, Currency: "usd", ObjectID: fmt.Sprintf("ch_%d", c.i), UpstreamStatus: 200, Now: now}
				if err := s.SettleLater(ctx, args, func(*keybrake.Reservation, error) { settled.Done() }); err != nil {
					b.Errorf("SettleLater: %v", err)
					settled.Done()
				}
				e := storetest.NewEvent("key_hot", now, c.i)
				e.ReservationID = res.Reservation.ID
				events <- e
			}
		}()
	}
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		at := start.Add(time.Duration(i) * time.Millisecond)
		time.Sleep(time.Until(at)) // the schedule, not synchronisation
		due <- charge{i, at}
	}
	close(due)
	clients.Wait()
	b.StopTimer()
	settled.Wait()
	close(events)
	<-audited
	slices.Sort(lat)
	pct := func(q float64) float64 { return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Microseconds()) }
	b.ReportMetric(pct(0.5), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(pct(0.999), "p999-µs")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
}
