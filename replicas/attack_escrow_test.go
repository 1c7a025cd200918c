package replicas_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/keybrake/keybrake/internal/kbtest"
)

// TestAttackReplicas_ChildAfterEscrowReturnedOnSkewedClock: replica B's
// clock is 2 s behind replica A's. A child key ends on A (revoked by an
// operator, or expired at the resolver's pass) and its $50 escrow returns
// to its parent, which spends its whole $100 total cap again; the child's
// $50 charge on B, decided at B's time (before the child's end), then
// reserved and went through: $150 moved under a total cap of $100. A
// revocation is now final whatever the request's time (keybrake_reserve,
// migration 0033), and an expired child is closed before its escrow
// returns.
func TestAttackReplicas_ChildAfterEscrowReturnedOnSkewedClock(t *testing.T) {
	dsn := MustDatabase(t, MustServerDSN(t))
	sim := MustSim(t)
	a := MustReplica(t, dsn, sim)
	behind := kbtest.NewClock(time.Now().Add(-2 * time.Second))
	b := mustReplicaWith(t, dsn, sim, func(r *Replica) { r.Now = behind.Now })

	for _, end := range []string{"revoked", "expired"} {
		t.Run(end, func(t *testing.T) {
			before := len(sim.GroundTruth().Charges)
			parentID, parentSecret := MustCreateKey(t, a.URL(), `{"total_usd_cap":100,"mint":true,"allowed_endpoints":["charges.create"]}`)
			expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
			status, out := Do(t, "POST", a.URL()+"/vault/keys/self/children",
				`{"total_usd_cap":50,"expires_at":"`+expires.Format(time.RFC3339)+`"}`,
				map[string]string{"Authorization": "Bearer " + parentSecret, "Content-Type": "application/json"})
			if status != http.StatusCreated {
				t.Fatalf("mint: %d %s", status, out)
			}
			var child struct {
				ID       string `json:"id"`
				VaultKey string `json:"vault_key"`
			}
			json.Unmarshal(out, &child)
			if end == "revoked" {
				if status, out := Admin(t, a.URL(), "POST", "/vault/keys/"+child.ID+"/revoke", ""); status != http.StatusOK {
					t.Fatalf("revoke on A: %d %s", status, out)
				}
			} else if n, err := a.Store.ReturnEscrows(context.Background(), expires, 0); err != nil || n != 1 {
				t.Fatalf("A's resolver pass after the expiry: %d, %v", n, err)
			}
			if sp := MustSpend(t, a.Store, parentID); sp.Total != 0 {
				t.Fatalf("parent after the child's end: %+v, want its escrow returned", sp)
			}
			MustCharge(t, a.URL(), parentSecret, 100_00, "parent-"+end)
			if status, out, err := Charge(b.URL(), child.VaultKey, 50_00, "child-"+end); err != nil || status != http.StatusUnauthorized {
				t.Errorf("child's charge on B after its escrow returned: %d %s %v, want 401", status, out, err)
			}
			var moved int64
			for _, ch := range sim.GroundTruth().Charges[before:] {
				moved += ch.Amount
			}
			if moved > 100_00 {
				t.Fatalf("moved %d cents under the parent's total cap of 10000", moved)
			}
		})
	}
}
