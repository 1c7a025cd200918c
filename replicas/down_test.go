package replicas_test

import (
	"net/http"
	"os/exec"
	"strings"
	"testing"
)

// pgScript is scripts/pg, relative to this package's directory.
const pgScript = "../scripts/pg"

// MustScratchCluster starts a throwaway PostgreSQL cluster of the test's own
// through scripts/pg, so stopping it disturbs no other test, and removes it
// when the test ends. It returns the cluster's DSN and data dir.
func MustScratchCluster(tb testing.TB) (dsn, dataDir string) {
	tb.Helper()
	MustServerDSN(tb) // the binaries are there only where the shared server is
	cmd := exec.Command(pgScript, "start")
	cmd.Env = append(cmd.Environ(), "KEYBRAKE_PG_PORT=55349")
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		tb.Fatalf("scripts/pg start: %v\n%s", err, stderr)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "export KEYBRAKE_TEST_POSTGRES="); ok {
			dsn = v
		} else if v, ok := strings.CutPrefix(line, "export KEYBRAKE_TEST_POSTGRES_DATADIR="); ok {
			dataDir = v
		}
	}
	if dsn == "" || dataDir == "" {
		tb.Fatalf("scripts/pg start printed no DSN or data dir:\n%s", out)
	}
	tb.Cleanup(func() { MustPG(tb, "stop", dataDir) })
	return dsn, dataDir
}

// MustPG runs scripts/pg with args or fails the test.
func MustPG(tb testing.TB, args ...string) {
	tb.Helper()
	if out, err := exec.Command(pgScript, args...).CombinedOutput(); err != nil {
		tb.Fatalf("scripts/pg %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestStoreDown stops the real PostgreSQL server under a running proxy:
// charges are refused with a Stripe-shaped 503 and nothing reaches the
// upstream; once the server is back, the same proxy, never restarted,
// charges again.
func TestStoreDown(t *testing.T) {
	dsn, dataDir := MustScratchCluster(t)
	sim := MustSim(t)
	p := MustReplica(t, dsn, sim)
	keyID, secret := MustCreateKey(t, p.URL(), `{"label":"down","total_usd_cap":100}`)
	if status, body, err := Charge(p.URL(), secret, 100, "before"); err != nil || status != http.StatusOK {
		t.Fatalf("charge before the stop: %d %s %v", status, body, err)
	}

	MustPG(t, "pause", dataDir)

	for _, idem := range []string{"during_1", "during_2"} {
		status, body, err := Charge(p.URL(), secret, 100, idem)
		if err != nil {
			t.Fatal(err)
		}
		if status != http.StatusServiceUnavailable || StripeErrorType(body) != "api_error" {
			t.Fatalf("charge with the store down: %d %s; want a 503 api_error", status, body)
		}
		if !strings.Contains(string(body), "nothing was forwarded") {
			t.Fatalf("the 503 does not say nothing was forwarded: %s", body)
		}
	}
	if n := len(sim.GroundTruth().Charges); n != 1 {
		t.Fatalf("the upstream has %d charges, want the 1 made before the stop", n)
	}
	if status, _ := Do(t, "GET", p.URL()+"/readyz", "", nil); status != http.StatusServiceUnavailable {
		t.Fatalf("readyz with the store down = %d, want 503", status)
	}
	// Liveness reads nothing: a database outage must not get keybrake restarted.
	if status, _ := Do(t, "GET", p.URL()+"/healthz", "", nil); status != http.StatusOK {
		t.Fatalf("healthz with the store down = %d, want 200", status)
	}

	MustPG(t, "resume", dataDir)

	// The very next charge succeeds: no restart, no warm-up.
	if status, body, err := Charge(p.URL(), secret, 100, "after"); err != nil || status != http.StatusOK {
		t.Fatalf("charge after the restart: %d %s %v", status, body, err)
	}
	if sp := MustSpend(t, p.Store, keyID); sp.Total != USD(2) || sp.Uncertain != 0 {
		t.Fatalf("spend = %+v, want 2.00 settled", sp)
	}
	if n := len(sim.GroundTruth().Charges); n != 2 {
		t.Fatalf("the upstream has %d charges, want 2", n)
	}
}
