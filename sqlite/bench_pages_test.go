package sqlite_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/sqlite"
	"github.com/keybrake/keybrake/storetest"
)

// BenchmarkChargePages measures a capped charge's store work with the
// inputs a real client makes, on an empty database or, with
// KEYBRAKE_BENCH_DB=FILE, on that file (a copy: the benchmark writes to it;
// e.g. one made by keybrake bench --growth 1000000): a fresh key, random
// upstream object IDs (as Stripe's charge IDs), random fingerprints
// (distinct bodies), and Idempotency-Keys either keybrake's own
// (time-ordered, "Own") or random UUIDs as the Stripe SDKs send ("SDK").
// Serial is one client (reserve, settle, event); Clients64 is 64 as
// BenchmarkCharge. Besides ns/op and cpu-ns/op it reports write-B/op, the
// bytes the process wrote to the file system per charge (/proc/self/io:
// the WAL and the checkpoints' copies into the database file), that is the
// pages a charge dirties. KEYBRAKE_BENCH_SQL runs statements on the file
// first (whatIf).
func BenchmarkChargePages(b *testing.B) {
	for _, idem := range []string{"Own", "SDK"} {
		for _, clients := range []int{1, 64} {
			name := fmt.Sprintf("%s/Serial", idem)
			if clients > 1 {
				name = fmt.Sprintf("%s/Clients%d", idem, clients)
			}
			b.Run(name, func(b *testing.B) { benchChargePages(b, idem == "SDK", clients) })
		}
	}
}

func benchChargePages(b *testing.B, sdkKeys bool, clients int) {
	ctx := context.Background()
	var s *sqlite.Store
	if path := os.Getenv("KEYBRAKE_BENCH_DB"); path != "" {
		if err := whatIf(path, os.Getenv("KEYBRAKE_BENCH_SQL")); err != nil {
			b.Fatal(err)
		}
		var err error
		if s, err = sqlite.Open(path); err != nil {
			b.Fatal(err)
		}
	} else {
		s, _ = MustOpen(b)
	}
	defer s.Close()
	huge := keybrake.Micros(1 << 60)
	key := "key_pages_" + rand.Text()[:12]
	storetest.MustCreateCappedKey(b, s, key, "America/New_York", keybrake.Caps{
		PerRequest: storetest.Ptr(storetest.USD(100)), Daily: &huge, Monthly: &huge, Total: &huge,
	})
	events := make(chan *keybrake.Event, 1024)
	audited := make(chan struct{})
	go func() {
		defer close(audited)
		batch := make([]*keybrake.Event, 0, 64)
		for e := range events {
			batch = append(batch[:0], e)
		drain:
			for len(batch) < cap(batch) {
				select {
				case e, ok := <-events:
					if !ok {
						break drain
					}
					batch = append(batch, e)
				default:
					break drain
				}
			}
			if err := s.AddEvents(ctx, batch); err != nil {
				b.Errorf("AddEvents: %v", err)
			}
		}
	}()
	start := time.Now()
	var n atomic.Int64
	charge := func() bool {
		i := n.Add(1)
		now := start.Add(time.Duration(i) * time.Microsecond)
		idem := "kb_" + strings.TrimPrefix(keybrake.NewReservationID(now), "rsv_")
		if sdkKeys {
			t := rand.Text()
			idem = t[:8] + "-" + t[8:12] + "-" + t[12:16] + "-" + t[16:20] + "-" + t[20:26]
		}
		in := storetest.NewReservation(key, idem, storetest.USD(1))
		in.Fingerprint = rand.Text() + rand.Text()
		res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: in, Now: now})
		if err != nil || res.OverCap != nil || res.Replay {
			b.Errorf("Reserve: %+v %v", res, err)
			return false
		}
		if _, err := s.Settle(ctx, keybrake.SettleArgs{ID: res.Reservation.ID, State: keybrake.StateSettled,
			SettledMicros: 990_000, Amount: 99, Currency: "usd", ObjectID: "ch_" + rand.Text()[:24], UpstreamStatus: 200, Now: now}); err != nil {
			b.Errorf("Settle: %v", err)
			return false
		}
		e := storetest.NewEvent(key, now, int(i))
		e.ReservationID = res.Reservation.ID
		events <- e
		return true
	}
	b.ResetTimer()
	w0 := writeBytes()
	defer func() {
		b.ReportMetric(float64(writeBytes()-w0)/float64(b.N), "write-B/op")
	}()
	defer reportCPU(b)()
	if clients == 1 {
		for b.Loop() {
			if !charge() {
				break
			}
		}
	} else {
		b.SetParallelism(clients / max(1, runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !charge() {
					return
				}
			}
		})
	}
	close(events)
	<-audited
}

// whatIf runs the statements sql (KEYBRAKE_BENCH_SQL) on the file at path
// before the store opens it, for what-if experiments (drop an index and
// measure again): once per file, as the store migrates once.
func whatIf(path, stmts string) error {
	if stmts == "" {
		return nil
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.Exec(stmts)
	return err
}

// writeBytes returns what the process has written to storage so far
// (write_bytes of /proc/self/io), 0 where it cannot be read.
func writeBytes() int64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
