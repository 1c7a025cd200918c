package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// testManyKeysConcurrent races reservations of keys of every kind at once,
// so a store that decides several keys' reservations together (PostgreSQL's
// keybrake_reserve_many) must decide each exactly as alone: every cap
// window holds exactly, guards see the reservations decided before them in
// the same batch, a revoked key is refused and replays count once.
func testManyKeysConcurrent(t *testing.T, open opener) {
	ctx := context.Background()
	s := open(t)
	const per = 30 // goroutines per key
	capped := map[string]keybrake.Caps{
		"key_total":   {Total: Ptr(USD(20))},
		"key_daily":   {Daily: Ptr(USD(20))},
		"key_monthly": {Monthly: Ptr(USD(20))},
		"key_request": {PerRequest: Ptr(USD(1)), Total: Ptr(USD(20))},
	}
	for id, caps := range capped {
		MustCreateCappedKey(t, s, id, "America/New_York", caps)
	}
	MustCreateGuardedKey(t, s, "key_dup", keybrake.Caps{}, &keybrake.Guards{Duplicate: &keybrake.DuplicateGuard{WindowSeconds: 3600}})
	MustCreateGuardedKey(t, s, "key_velocity", keybrake.Caps{Total: Ptr(USD(1000))}, &keybrake.Guards{
		Velocity: []keybrake.VelocityLimit{{Name: "per_key", Per: keybrake.PerKey, Limit: 7, WindowSeconds: 3600}},
	})
	MustCreateKey(t, s, NewKey("key_replay"))
	MustCreateKey(t, s, NewKey("key_revoked"))
	if _, err := s.RevokeKey(ctx, "key_revoked", T0.Add(-time.Hour)); err != nil {
		t.Fatalf("RevokeKey: %v", err)
	}
	keys := []string{"key_total", "key_daily", "key_monthly", "key_request", "key_dup", "key_velocity", "key_replay", "key_revoked"}

	type outcome struct {
		key, kind, id string
	}
	var (
		mu  sync.Mutex
		got []outcome
		wg  sync.WaitGroup
	)
	start := make(chan struct{})
	for i := range per * len(keys) {
		wg.Go(func() {
			key := keys[i%len(keys)]
			var r *keybrake.Reservation
			switch key {
			case "key_dup":
				r = NewCharge(key, fmt.Sprintf("idem_%d", i), "cus_same", USD(1))
			case "key_replay":
				r = NewReservation(key, fmt.Sprintf("idem_%d", i%5), USD(1))
			default:
				r = NewCharge(key, fmt.Sprintf("idem_%d", i), fmt.Sprintf("cus_%d", i), USD(1))
			}
			<-start
			res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: r, Now: T0})
			o := outcome{key: key}
			switch {
			case err != nil:
				o.kind = keybrake.ErrorCode(err)
			case res.OverCap != nil:
				o.kind = "over:" + res.OverCap.Window
			case res.Guard != nil:
				o.kind = "guard:" + res.Guard.Guard
			case res.Replay:
				o.kind, o.id = "replay", res.Reservation.ID
			default:
				o.kind, o.id = "ok", res.Reservation.ID
			}
			mu.Lock()
			got = append(got, o)
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()

	count := map[string]map[string]int{}
	ids := map[string]map[string]bool{} // key_replay: reservation IDs seen
	for _, o := range got {
		if count[o.key] == nil {
			count[o.key] = map[string]int{}
			ids[o.key] = map[string]bool{}
		}
		count[o.key][o.kind]++
		if o.id != "" {
			ids[o.key][o.id] = true
		}
	}
	want := map[string]map[string]int{
		"key_total":    {"ok": 20, "over:total": per - 20},
		"key_daily":    {"ok": 20, "over:daily": per - 20},
		"key_monthly":  {"ok": 20, "over:monthly": per - 20},
		"key_request":  {"ok": 20, "over:total": per - 20},
		"key_dup":      {"ok": 1, "guard:duplicate": per - 1},
		"key_velocity": {"ok": 7, "guard:velocity": per - 7},
		"key_replay":   {"ok": 5, "replay": per - 5},
		"key_revoked":  {keybrake.EUNAUTHORIZED: per},
	}
	for _, key := range keys {
		if fmt.Sprint(count[key]) != fmt.Sprint(want[key]) {
			t.Errorf("%s: outcomes %v, want %v", key, count[key], want[key])
		}
	}
	if len(ids["key_replay"]) != 5 {
		t.Errorf("key_replay: %d distinct reservations answered, want 5", len(ids["key_replay"]))
	}
	ny := MustLocation(t, "America/New_York")
	for _, key := range []string{"key_total", "key_daily", "key_monthly", "key_request"} {
		wantSpend(t, MustSpend(t, s, key, T0, ny), keybrake.Spend{Day: USD(20), Month: USD(20), Total: USD(20)})
		if n := mustCountReservations(t, s, key); n != 20 {
			t.Errorf("%s: %d reservations, want 20", key, n)
		}
	}
	wantSpend(t, MustSpend(t, s, "key_replay", T0, time.UTC), keybrake.Spend{Day: USD(5), Month: USD(5), Total: USD(5)})
	for key, n := range map[string]int{"key_dup": 1, "key_velocity": 7, "key_replay": 5, "key_revoked": 0} {
		if got := mustCountReservations(t, s, key); got != n {
			t.Errorf("%s: %d reservations, want %d", key, got, n)
		}
	}
}
