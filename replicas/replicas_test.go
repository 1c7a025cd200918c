package replicas_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// TestFourReplicas sends 400 concurrent $1.00 charges, round-robin across
// four replicas with a pool each on one database, on a key capped at
// $100.00 in total: exactly 100 go through, the 300 others are refused with
// 429 and never reach the upstream, and the settled spend is exactly the
// simulator's ground truth.
func TestFourReplicas(t *testing.T) {
	dsn := MustDatabase(t, MustServerDSN(t))
	sim := MustSim(t)
	var replicas []*Replica
	for range 4 {
		replicas = append(replicas, MustReplica(t, dsn, sim))
	}
	keyID, secret := MustCreateKey(t, replicas[0].URL(), `{"label":"hot","total_usd_cap":100}`)

	const n = 400
	statuses := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			statuses[i], _, errs[i] = Charge(replicas[i%len(replicas)].URL(), secret, 100, fmt.Sprintf("order_%d", i))
		}()
	}
	close(start)
	wg.Wait()

	count := map[int]int{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("charge %d: %v", i, errs[i])
		}
		count[statuses[i]]++
	}
	if count[http.StatusOK] != 100 || count[http.StatusTooManyRequests] != n-100 {
		t.Fatalf("statuses = %v; want 100 × 200 and %d × 429", count, n-100)
	}

	for i, r := range replicas {
		sp := MustSpend(t, r.Store, keyID)
		if want := (keybrake.Spend{Day: USD(100), Month: USD(100), Total: USD(100)}); sp != want {
			t.Fatalf("replica %d: spend = %+v, want %+v", i, sp, want)
		}
	}
	if open := MustOpenReservations(t, replicas[0].Store); len(open) != 0 {
		t.Fatalf("%d reservations left open, want none", len(open))
	}
	settled, err := replicas[0].Store.FindReservations(context.Background(), keybrake.ReservationFilter{KeyID: keyID, State: keybrake.StateSettled})
	if err != nil {
		t.Fatal(err)
	}
	if len(settled) != 100 {
		t.Fatalf("settled reservations = %d, want 100", len(settled))
	}
	var charges, cents int64
	for _, c := range sim.GroundTruth().Charges {
		if c.Status == "succeeded" {
			charges++
			cents += c.Amount
		}
	}
	if charges != 100 || cents != 100_00 {
		t.Fatalf("ground truth: %d charges, %d cents; want 100 charges of $1.00", charges, cents)
	}
}

// TestPolicyAcrossReplicas changes a key through replica A and checks the
// very next request on replica B obeys the change: money-moving requests
// because Reserve reads the key's policy under its row lock, whatever B
// cached; and B's cache drops the key once the NOTIFY arrives, so even
// requests that reserve nothing see the change.
func TestPolicyAcrossReplicas(t *testing.T) {
	dsn := MustDatabase(t, MustServerDSN(t))
	sim := MustSim(t)
	a, b := MustReplica(t, dsn, sim), MustReplica(t, dsn, sim)
	auth := func(secret string) map[string]string { return map[string]string{"Authorization": "Bearer " + secret} }

	t.Run("Revoke", func(t *testing.T) {
		keyID, secret := MustCreateKey(t, a.URL(), `{"label":"revoked","total_usd_cap":100}`)
		// B authenticates the key, and caches it.
		if status, body, err := Charge(b.URL(), secret, 100, ""); err != nil || status != http.StatusOK {
			t.Fatalf("charge on B before revoking: %d %s %v", status, body, err)
		}
		if status, body := Do(t, "GET", b.URL()+"/v1/keybrake/key", "", auth(secret)); status != http.StatusOK {
			t.Fatalf("own key on B before revoking: %d %s", status, body)
		}
		if status, body := Admin(t, a.URL(), "POST", "/vault/keys/"+keyID+"/revoke", ""); status != http.StatusOK {
			t.Fatalf("revoke on A: %d %s", status, body)
		}
		status, body, err := Charge(b.URL(), secret, 100, "")
		if err != nil || status != http.StatusUnauthorized {
			t.Fatalf("charge on B right after revoking on A: %d %s %v; want 401", status, body, err)
		}
		// The eviction reaches B's cache asynchronously: a bounded wait.
		deadline := time.Now().Add(30 * time.Second)
		for {
			status, _ := Do(t, "GET", b.URL()+"/v1/keybrake/key", "", auth(secret))
			if status == http.StatusUnauthorized {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("B still authenticates the revoked key: %d", status)
			}
			time.Sleep(10 * time.Millisecond) // poll interval, not synchronisation
		}
		if sp := MustSpend(t, b.Store, keyID); sp.Total != USD(1) {
			t.Fatalf("spend = %s, want 1.00", sp.Total)
		}
	})
	t.Run("CapLowered", func(t *testing.T) {
		keyID, secret := MustCreateKey(t, a.URL(), `{"label":"lowered","total_usd_cap":10}`)
		if status, body, err := Charge(b.URL(), secret, 500, ""); err != nil || status != http.StatusOK {
			t.Fatalf("charge on B: %d %s %v", status, body, err)
		}
		if status, body := Admin(t, a.URL(), "PATCH", "/vault/keys/"+keyID, `{"total_usd_cap":5}`); status != http.StatusOK {
			t.Fatalf("lower the cap on A: %d %s", status, body)
		}
		status, body, err := Charge(b.URL(), secret, 100, "")
		if err != nil || status != http.StatusTooManyRequests {
			t.Fatalf("charge on B right after lowering the cap on A: %d %s %v; want 429", status, body, err)
		}
		if sp := MustSpend(t, b.Store, keyID); sp.Total != USD(5) {
			t.Fatalf("spend = %s, want 5.00", sp.Total)
		}
	})
}
