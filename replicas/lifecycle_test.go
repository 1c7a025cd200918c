package replicas_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// A suspension made on A refuses the very next charge on B, which cached
// the key; a rotation's old secret works on B during the grace period.
func TestLifecycleAcrossReplicas(t *testing.T) {
	dsn := MustDatabase(t, MustServerDSN(t))
	sim := MustSim(t)
	a, b := MustReplica(t, dsn, sim), MustReplica(t, dsn, sim)

	t.Run("Suspend", func(t *testing.T) {
		keyID, secret := MustCreateKey(t, a.URL(), `{"label":"suspended","total_usd_cap":100}`)
		if status, body, err := Charge(b.URL(), secret, 100, ""); err != nil || status != http.StatusOK {
			t.Fatalf("charge on B before suspending: %d %s %v", status, body, err)
		}
		if status, body := Admin(t, a.URL(), "POST", "/vault/keys/"+keyID+"/suspend", ""); status != http.StatusOK {
			t.Fatalf("suspend on A: %d %s", status, body)
		}
		// No wait: B's cache may still hold the key, the store refuses.
		if status, body, err := Charge(b.URL(), secret, 100, ""); err != nil || status != http.StatusForbidden {
			t.Fatalf("charge on B right after suspending on A: %d %s %v; want 403", status, body, err)
		}
		if status, body := Admin(t, a.URL(), "POST", "/vault/keys/"+keyID+"/resume", ""); status != http.StatusOK {
			t.Fatalf("resume on A: %d %s", status, body)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			status, _, _ := Charge(b.URL(), secret, 100, "")
			if status == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("B still refuses the resumed key: %d", status)
			}
			time.Sleep(10 * time.Millisecond) // poll interval, not synchronisation
		}
		if sp := MustSpend(t, b.Store, keyID); sp.Total != USD(2) {
			t.Fatalf("spend = %s, want 2.00", sp.Total)
		}
	})
	t.Run("RotateGrace", func(t *testing.T) {
		keyID, old := MustCreateKey(t, a.URL(), `{"label":"rotated","total_usd_cap":100}`)
		if status, _, _ := Charge(b.URL(), old, 100, ""); status != http.StatusOK {
			t.Fatalf("charge on B: %d", status)
		}
		status, body := Admin(t, a.URL(), "POST", "/vault/keys/"+keyID+"/rotate", `{"grace_period":"1h"}`)
		if status != http.StatusOK {
			t.Fatalf("rotate on A: %d %s", status, body)
		}
		var v struct {
			VaultKey string `json:"vault_key"`
		}
		json.Unmarshal([]byte(body), &v)
		for _, s := range []string{old, v.VaultKey} {
			deadline := time.Now().Add(30 * time.Second)
			for {
				st, _, _ := Charge(b.URL(), s, 100, "")
				if st == http.StatusOK {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("B refuses a secret during the grace period: %d", st)
				}
				time.Sleep(10 * time.Millisecond) // poll interval
			}
		}
	})
}
