package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/storetest"
)

// benchGuards are the guards of `keybrake bench --ops guards`' guarded key
// (cmd/keybrake/bench_guards.go): all four kinds, none refusing.
var benchGuards = &keybrake.Guards{
	Duplicate: &keybrake.DuplicateGuard{WindowSeconds: 3600, MatchMetadata: "n"},
	Velocity: []keybrake.VelocityLimit{
		{Name: "per_customer", Per: keybrake.PerCustomer, Operations: []string{"charges.create"}, Limit: 1_000_000, WindowSeconds: 86400},
		{Name: "per_key", Per: keybrake.PerKey, Limit: 1_000_000, WindowSeconds: 60},
	},
	Rules: []keybrake.FieldRule{{Name: "small_usd", Expr: `amount <= 5000 && currency == "usd"`}},
	Breaker: &keybrake.Breaker{RefusalBurst: 1000, RefusalWindowSeconds: 60, RepeatBody: 1000, RepeatWindowSeconds: 60,
		SpendMultiple: 1_000_000, SpendWindowSeconds: 60, BaselineSeconds: 3600},
}

// BenchmarkReserveSettleGuards measures a capped charge's store work
// (Reserve, Settle) on a key without guards and on the same caps with
// benchGuards: the difference is what the guards cost the store.
func BenchmarkReserveSettleGuards(b *testing.B) {
	ctx := context.Background()
	s, _ := MustOpen(b)
	defer s.Close()
	huge := keybrake.Micros(1 << 60)
	caps := keybrake.Caps{PerRequest: storetest.Ptr(storetest.USD(100)), Daily: &huge, Monthly: &huge, Total: &huge}
	storetest.MustCreateCappedKey(b, s, "key_plain", "UTC", caps)
	storetest.MustCreateGuardedKey(b, s, "key_guarded", caps, benchGuards)
	var n atomic.Int64
	charge := func(tb testing.TB, key string, guarded bool) {
		i := n.Add(1)
		now := storetest.T0.Add(time.Duration(i) * time.Millisecond)
		in := storetest.NewReservation(key, fmt.Sprintf("idem_%d", i), storetest.USD(1))
		in.Fingerprint = fmt.Sprintf("fp_%d", i)
		if guarded {
			in.Customer = "tok_visa"
			in.DupKey = keybrake.GuardKey(in.Customer, in.Currency, in.Amount, "n", map[string]string{"n": fmt.Sprint(i)})
		}
		res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: in, Now: now})
		if err != nil || res.Reservation == nil || res.Replay {
			tb.Fatalf("Reserve: %+v %v", res, err)
		}
		if _, err := s.Settle(ctx, keybrake.SettleArgs{ID: res.Reservation.ID, State: keybrake.StateSettled,
			SettledMicros: 990_000, Amount: 99, Currency: "usd", ObjectID: "ch_x", UpstreamStatus: 200, Now: now}); err != nil {
			tb.Fatalf("Settle: %v", err)
		}
	}
	// Interleaved, so both keys see the same machine: the medians and
	// their difference are reported per charge.
	var d [2][]time.Duration
	for b.Loop() {
		for k, key := range []string{"key_plain", "key_guarded"} {
			start := time.Now()
			charge(b, key, k == 1)
			d[k] = append(d[k], time.Since(start))
		}
	}
	p, g := median(d[0]), median(d[1])
	b.ReportMetric(p, "plain-p50-µs")
	b.ReportMetric(g, "guarded-p50-µs")
	b.ReportMetric(g-p, "added-p50-µs")
}

// median returns the median of ds in microseconds.
func median(ds []time.Duration) float64 {
	slices.Sort(ds)
	return float64(ds[len(ds)/2].Nanoseconds()) / 1e3
}

// BenchmarkReserveSettleGuardsOne runs the charges of one key alone, guarded when
// KB_BENCH_GUARDED is set, so that a profile or strace -c of it is one kind of charge.
func BenchmarkReserveSettleGuardsOne(b *testing.B) {
	ctx := context.Background()
	s, _ := MustOpen(b)
	defer s.Close()
	huge := keybrake.Micros(1 << 60)
	caps := keybrake.Caps{PerRequest: storetest.Ptr(storetest.USD(100)), Daily: &huge, Monthly: &huge, Total: &huge}
	guarded := os.Getenv("KB_BENCH_GUARDED") != ""
	if guarded {
		storetest.MustCreateGuardedKey(b, s, "key", caps, benchGuards)
	} else {
		storetest.MustCreateCappedKey(b, s, "key", "UTC", caps)
	}
	for i := 0; b.Loop(); i++ {
		now := storetest.T0.Add(time.Duration(i) * time.Millisecond)
		in := storetest.NewReservation("key", fmt.Sprintf("idem_%d", i), storetest.USD(1))
		in.Fingerprint = fmt.Sprintf("fp_%d", i)
		if guarded {
			in.Customer = "tok_visa"
			in.DupKey = keybrake.GuardKey(in.Customer, in.Currency, in.Amount, "n", map[string]string{"n": fmt.Sprint(i)})
		}
		res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: in, Now: now})
		if err != nil || res.Reservation == nil {
			b.Fatalf("Reserve: %+v %v", res, err)
		}
		if _, err := s.Settle(ctx, keybrake.SettleArgs{ID: res.Reservation.ID, State: keybrake.StateSettled,
			SettledMicros: 990_000, Amount: 99, Currency: "usd", ObjectID: "ch_x", UpstreamStatus: 200, Now: now}); err != nil {
			b.Fatalf("Settle: %v", err)
		}
	}
}
