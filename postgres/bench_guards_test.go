package postgres_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/storetest"
)

// BenchmarkReserveHotKeyGuards measures reservations and settlements on one
// hot key from 32 goroutines, on a key without guards and on the same key
// with every kind of store-decided guard, both batched by
// keybrake_reserve_many: what a guarded key's guard checks cost.
func BenchmarkReserveHotKeyGuards(b *testing.B) {
	guards := &keybrake.Guards{
		Duplicate: &keybrake.DuplicateGuard{WindowSeconds: 3600},
		Velocity: []keybrake.VelocityLimit{
			{Name: "per_customer", Per: keybrake.PerCustomer, Limit: 1_000_000, WindowSeconds: 86400},
			{Name: "per_key", Per: keybrake.PerKey, Limit: 1_000_000, WindowSeconds: 60},
		},
		Breaker: &keybrake.Breaker{RepeatBody: 1000, RepeatWindowSeconds: 60, SpendMultiple: 1_000_000, SpendWindowSeconds: 60, BaselineSeconds: 3600},
	}
	for _, bm := range []struct {
		name   string
		guards *keybrake.Guards
	}{{"Plain", nil}, {"Guarded", guards}} {
		b.Run(bm.name, func(b *testing.B) {
			dsn := withParam(MustDatabase(b, MustServerDSN(b)), "pool_max_conns", "16")
			s := MustOpen(b, dsn)
			noCap := keybrake.Caps{Total: storetest.Ptr(keybrake.Micros(1 << 62))}
			storetest.MustCreateGuardedKey(b, s, "key_hot", noCap, bm.guards)
			var seq atomic.Int64
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					i := seq.Add(1)
					r := storetest.NewCharge("key_hot", fmt.Sprintf("idem_%d", i), fmt.Sprintf("cus_%d", i%50), storetest.USD(1))
					r.DupKey, r.Fingerprint = fmt.Sprintf("dup_%d", i), fmt.Sprintf("fp_%d", i)
					res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: r, Now: storetest.T0})
					if err != nil || res.Reservation == nil || res.Replay || res.OverCap != nil || res.Guard != nil {
						b.Errorf("Reserve: %+v, %v", res, err)
						return
					}
					if _, err := s.Settle(ctx, keybrake.SettleArgs{ID: res.Reservation.ID, State: keybrake.StateSettled,
						SettledMicros: storetest.USD(1), Amount: 100, Currency: "usd", Now: storetest.T0}); err != nil {
						b.Errorf("Settle: %v", err)
						return
					}
				}
			})
		})
	}
}
