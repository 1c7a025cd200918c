package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/postgres"
	"github.com/keybrake/keybrake/storetest"
)

// BenchmarkReserveOneClient is the request path's store work at one
// client: a reservation, then its settlement queued for later
// (SettleLater), one after another on one key. It reports the median
// time of a Reserve call, the part a request waits for.
func BenchmarkReserveOneClient(b *testing.B) {
	s := MustOpen(b, MustDatabase(b, MustServerDSN(b)))
	noCap := keybrake.Caps{Daily: storetest.Ptr(keybrake.Micros(1 << 50)), Total: storetest.Ptr(keybrake.Micros(1 << 50))}
	storetest.MustCreateCappedKey(b, s, "key_one", "UTC", noCap)
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	cpu0 := serverCPU()
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: storetest.NewReservation("key_one", fmt.Sprintf("idem_%d", i), storetest.USD(1)), Now: storetest.T0})
		lat = append(lat, time.Since(t0))
		if err != nil || res.Reservation == nil {
			b.Fatalf("Reserve: %+v, %v", res, err)
		}
		settleLater(b, s, res.Reservation.ID)
	}
	if err := s.FlushSettlements(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	reportServerCPU(b, cpu0)
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "reserve-p50-µs")
}

// BenchmarkReserveSpread is the store work of 64 clients charging keys
// spread over 1,000, through 1, 2 or 4 replicas (Stores with pools of
// their own on one database), each charge a Reserve and a SettleLater.
// More replicas must never be slower than fewer.
func BenchmarkReserveSpread(b *testing.B) {
	for _, replicas := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			dsn := MustDatabase(b, MustServerDSN(b))
			stores := make([]*postgres.Store, replicas)
			for i := range stores {
				stores[i] = MustOpen(b, dsn)
			}
			noCap := keybrake.Caps{Daily: storetest.Ptr(keybrake.Micros(1 << 50)), Total: storetest.Ptr(keybrake.Micros(1 << 50))}
			const keys = 1000
			for k := range keys {
				storetest.MustCreateCappedKey(b, stores[0], fmt.Sprintf("key_%d", k), "UTC", noCap)
			}
			// Every replica has met every key (its zone is cached), as in a
			// replica that has run a while.
			var seq atomic.Int64
			for _, s := range stores {
				for k := range keys {
					i := seq.Add(1)
					res, err := s.Reserve(context.Background(), keybrake.ReserveArgs{Reservation: storetest.NewReservation(fmt.Sprintf("key_%d", k), fmt.Sprintf("idem_%d", i), storetest.USD(1)), Now: storetest.T0})
					if err != nil {
						b.Fatalf("Reserve: %+v, %v", res, err)
					}
				}
			}
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			cpu0 := serverCPU()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					i := seq.Add(1)
					s := stores[int(i)%replicas]
					key := fmt.Sprintf("key_%d", rand.IntN(keys))
					res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: storetest.NewReservation(key, fmt.Sprintf("idem_%d", i), storetest.USD(1)), Now: storetest.T0})
					if err != nil || res.Reservation == nil {
						b.Errorf("Reserve: %+v, %v", res, err)
						return
					}
					settleLater(b, s, res.Reservation.ID)
				}
			})
			for _, s := range stores {
				if err := s.FlushSettlements(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportServerCPU(b, cpu0)
		})
	}
}

func settleLater(tb testing.TB, s *postgres.Store, id string) {
	err := s.SettleLater(context.Background(), keybrake.SettleArgs{ID: id, State: keybrake.StateSettled,
		SettledMicros: storetest.USD(1), Amount: 100, Currency: "usd", Now: storetest.T0}, func(_ *keybrake.Reservation, err error) {
		if err != nil {
			tb.Errorf("SettleLater: %v", err)
		}
	})
	if err != nil {
		tb.Fatalf("SettleLater: %v", err)
	}
}

// serverCPU returns the CPU time the PostgreSQL server of scripts/pg has
// used so far: its processes' and, through the postmaster, those of
// backends that have exited. It returns -1 if it cannot tell (no
// KEYBRAKE_TEST_POSTGRES_DATADIR, another machine, not Linux).
func serverCPU() time.Duration {
	return serverCPUOf(os.Getenv("KEYBRAKE_TEST_POSTGRES_DATADIR"))
}

// serverCPUOf is serverCPU for the server whose data directory is dataDir.
func serverCPUOf(dataDir string) time.Duration {
	raw, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return -1
	}
	pm, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(raw), "\n", 2)[0]))
	if err != nil {
		return -1
	}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return -1
	}
	var ticks int64
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the command's closing parenthesis: state is the
		// first, ppid the second, utime..cstime the 12th to 15th.
		i := strings.LastIndexByte(string(stat), ')')
		f := strings.Fields(string(stat)[i+1:])
		if len(f) < 15 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		if pid != pm && ppid != pm {
			continue
		}
		for j := 11; j <= 14; j++ {
			if pid != pm && j > 12 {
				break // a backend's own time; its children's is none
			}
			n, _ := strconv.ParseInt(f[j], 10, 64)
			ticks += n
		}
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ is 100 on Linux
}

// reportServerCPU reports the server's CPU per operation since cpu0.
func reportServerCPU(b *testing.B, cpu0 time.Duration) {
	if cpu1 := serverCPU(); cpu0 >= 0 && cpu1 >= 0 {
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "pg-cpu-µs/op")
	}
}
