package replicas_test

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// TestGuardsAcrossReplicas: four replicas on one PostgreSQL store decide a
// key's guards as one. Each replica caches the key; the guards are decided
// by the store under the key's row lock, so concurrency across processes
// changes nothing.
func TestGuardsAcrossReplicas(t *testing.T) {
	dsn := MustDatabase(t, MustServerDSN(t))
	sim := MustSim(t)
	var rs []*Replica
	for range 4 {
		rs = append(rs, MustReplica(t, dsn, sim))
	}
	// race sends n charges at once, request i to replica i%4, and counts
	// the answers by status.
	race := func(t *testing.T, secret string, n int, cents func(i int) int64) map[int]int {
		t.Helper()
		var (
			mu     sync.Mutex
			counts = map[int]int{}
			wg     sync.WaitGroup
			failed atomic.Int64
		)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				// Idempotency-Keys unique to the key: Stripe scopes them by
				// its secret, which every vault key shares, so one reused by
				// another subtest's key would be answered as its replay.
				status, _, err := Charge(rs[i%4].URL(), secret, cents(i), fmt.Sprintf("race-%s-%d", secret[len(secret)-8:], i))
				if err != nil {
					failed.Add(1)
					t.Errorf("charge %d: %v", i, err)
					return
				}
				mu.Lock()
				counts[status]++
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		return counts
	}

	t.Run("Duplicate", func(t *testing.T) {
		_, secret := MustCreateKey(t, rs[0].URL(), `{"label":"dup","total_usd_cap":100000,
			"guards":{"duplicate":{"window_seconds":3600}}}`)
		// 200 identical charges under 200 Idempotency-Keys: one passes.
		got := race(t, secret, 200, func(int) int64 { return 1234 })
		if got[http.StatusOK] != 1 || got[http.StatusConflict] != 199 {
			t.Fatalf("answers by status %v; want one 200 and 199 409", got)
		}
	})

	t.Run("Velocity", func(t *testing.T) {
		_, secret := MustCreateKey(t, rs[0].URL(), `{"label":"velocity","total_usd_cap":100000,
			"guards":{"velocity":[{"name":"seven_an_hour","per":"key","limit":7,"window_seconds":3600}]}}`)
		got := race(t, secret, 200, func(i int) int64 { return int64(100 + i) })
		if got[http.StatusOK] != 7 || got[http.StatusTooManyRequests] != 193 {
			t.Fatalf("answers by status %v; want 7 200 and 193 429", got)
		}
	})

	// A fixed day is a UTC day: a run across midnight UTC would see two.
	t.Run("VelocityFixed", func(t *testing.T) {
		_, secret := MustCreateKey(t, rs[0].URL(), `{"label":"velocity fixed","total_usd_cap":100000,
			"guards":{"velocity":[{"name":"five_a_day","per":"customer","limit":5,"window_seconds":86400,"window_kind":"fixed"}]}}`)
		got := race(t, secret, 200, func(i int) int64 { return int64(100 + i) })
		if got[http.StatusOK] != 5 || got[http.StatusTooManyRequests] != 195 {
			t.Fatalf("answers by status %v; want 5 200 and 195 429", got)
		}
	})

	// A limit counting requests counts reads, exactly, across replicas.
	t.Run("VelocityCountsReads", func(t *testing.T) {
		_, secret := MustCreateKey(t, rs[0].URL(), `{"label":"velocity reads","total_usd_cap":100000,
			"guards":{"velocity":[{"name":"eleven_an_hour","per":"key","limit":11,"window_seconds":3600,"requests":true}]}}`)
		var (
			mu     sync.Mutex
			counts = map[int]int{}
			wg     sync.WaitGroup
		)
		start := make(chan struct{})
		for i := range 200 {
			wg.Go(func() {
				<-start
				req, _ := http.NewRequest("GET", rs[i%4].URL()+"/v1/charges?limit=1", nil)
				req.Header.Set("Authorization", "Bearer "+secret)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Errorf("read %d: %v", i, err)
					return
				}
				resp.Body.Close()
				mu.Lock()
				counts[resp.StatusCode]++
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		if counts[http.StatusOK] != 11 || counts[http.StatusTooManyRequests] != 189 {
			t.Fatalf("answers by status %v; want 11 200 and 189 429", counts)
		}
	})

	t.Run("BreakerSuspendsEverywhere", func(t *testing.T) {
		keyID, secret := MustCreateKey(t, rs[0].URL(), `{"label":"breaker","total_usd_cap":100000,
			"guards":{"breaker":{"repeat_body":3,"repeat_window_seconds":600}}}`)
		// Every replica authenticates the key and caches it.
		for i, r := range rs {
			if status, body, err := Charge(r.URL(), secret, int64(200+i), "warm-"+strconv.Itoa(i)); err != nil || status != http.StatusOK {
				t.Fatalf("warm-up charge on replica %d: %d %s %v", i, status, body, err)
			}
		}
		// The same charge three times on replica 0: the third trips it.
		for i := range 3 {
			status, body, err := Charge(rs[0].URL(), secret, 999, "repeat-"+strconv.Itoa(i))
			want := http.StatusOK
			if i == 2 {
				want = http.StatusForbidden
			}
			if err != nil || status != want {
				t.Fatalf("repeat %d: %d %s %v; want %d", i, status, body, err, want)
			}
		}
		// The very next request on every other replica is refused, and
		// nothing more reaches the simulator's ledger.
		for i, r := range rs[1:] {
			status, body, err := Charge(r.URL(), secret, int64(300+i), "after-"+strconv.Itoa(i))
			if err != nil || status != http.StatusForbidden {
				t.Fatalf("charge on replica %d after the breaker tripped on replica 0: %d %s %v; want 403", i+1, status, body, err)
			}
		}
		if sp := MustSpend(t, rs[3].Store, keyID); sp.Total != CentsMicros(200+201+202+203+999+999) {
			t.Fatalf("spend %s; want the warm-ups and the two repeats that passed", sp.Total)
		}
	})
}
