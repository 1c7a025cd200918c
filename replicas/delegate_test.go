package replicas_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// TestChildrenAcrossReplicas mints children of one parent concurrently
// through four replicas sharing one PostgreSQL store, each with the
// parent's own vault key: the escrows never exceed what the parent had
// left, every child spends within its escrow, revoking the parent on one
// replica refuses its children on another, and what they did not spend
// returns to the parent.
func TestChildrenAcrossReplicas(t *testing.T) {
	dsn := MustDatabase(t, MustServerDSN(t))
	sim := MustSim(t)
	var replicas []*Replica
	for range 4 {
		replicas = append(replicas, MustReplica(t, dsn, sim))
	}
	parentID, parentSecret := MustCreateKey(t, replicas[0].URL(), `{"label":"billing run","total_usd_cap":100,"mint":true,"allowed_endpoints":["charges.create"]}`)
	MustCharge(t, replicas[1].URL(), parentSecret, 20_00, "own")

	const n = 40
	type minted struct{ id, secret string }
	var (
		mu       sync.Mutex
		children []minted
		statuses = map[int]int{}
		wg       sync.WaitGroup
		start    = make(chan struct{})
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			status, out, err := do("POST", replicas[i%4].URL()+"/vault/keys/self/children",
				fmt.Sprintf(`{"label":"worker %d","total_usd_cap":10}`, i), map[string]string{"Authorization": "Bearer " + parentSecret})
			if err != nil {
				t.Errorf("mint %d: %v", i, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			statuses[status]++
			if status == http.StatusCreated {
				var v struct {
					ID       string `json:"id"`
					VaultKey string `json:"vault_key"`
					ParentID string `json:"parent_id"`
				}
				json.Unmarshal(out, &v)
				if v.ParentID != parentID {
					t.Errorf("child %s names parent %q", v.ID, v.ParentID)
				}
				children = append(children, minted{v.ID, v.VaultKey})
			}
		}()
	}
	close(start)
	wg.Wait()
	if statuses[http.StatusCreated] != 8 || statuses[http.StatusTooManyRequests] != n-8 {
		t.Fatalf("mint statuses %v; want 8 × 201 ($80 left in $10 children) and %d × 429", statuses, n-8)
	}
	if sp := MustSpend(t, replicas[2].Store, parentID); sp.Total != USD(100) {
		t.Fatalf("parent counts %s with its escrows, want the cap $100", sp.Total)
	}

	// Each child spends $6, then tries $5 more: its own cap refuses it.
	for i, c := range children {
		MustCharge(t, replicas[i%4].URL(), c.secret, 6_00, "a-"+c.id) // Stripe idempotency keys are per account, not per vault key
		if status, _, _ := Charge(replicas[(i+1)%4].URL(), c.secret, 5_00, "b-"+c.id); status != http.StatusTooManyRequests {
			t.Fatalf("child %s spent past its escrow: %d", c.id, status)
		}
	}
	if status, _, _ := Charge(replicas[3].URL(), parentSecret, 1, "own2"); status != http.StatusTooManyRequests {
		t.Fatalf("parent spent past its cap with its children's escrows: %d", status)
	}

	if status, out := Admin(t, replicas[0].URL(), "POST", "/vault/keys/"+parentID+"/revoke", ""); status != http.StatusOK {
		t.Fatalf("revoke parent: %d %s", status, out)
	}
	for i, c := range children {
		if status, _, _ := Charge(replicas[(i+2)%4].URL(), c.secret, 1_00, "c-"+c.id); status != http.StatusUnauthorized {
			t.Fatalf("child %s of a revoked parent answered %d, want 401", c.id, status)
		}
	}
	// The revocation returned the escrows at once; a second pass finds none.
	if n, err := replicas[1].Store.ReturnEscrows(context.Background(), time.Now(), 0); err != nil || n != 0 {
		t.Fatalf("escrows left after the revocation's pass: %d, %v", n, err)
	}
	want := USD(20) + keybrake.Micros(len(children))*USD(6)
	if sp := MustSpend(t, replicas[2].Store, parentID); sp.Total != want || sp.Held != 0 {
		t.Fatalf("parent after its children returned: %+v, want total %s", sp, want)
	}
	var cents int64
	for _, c := range sim.GroundTruth().Charges {
		if c.Status == "succeeded" {
			cents += c.Amount
		}
	}
	if keybrake.Micros(cents)*10_000 != want {
		t.Fatalf("ground truth %d cents, counted %s", cents, want)
	}
}

// MustCharge charges cents through base or fails the test.
func MustCharge(tb testing.TB, base, secret string, cents int64, idem string) {
	tb.Helper()
	status, out, err := Charge(base, secret, cents, idem)
	if err != nil || status != http.StatusOK {
		tb.Fatalf("charge %d cents: %d %s %v", cents, status, out, err)
	}
}
