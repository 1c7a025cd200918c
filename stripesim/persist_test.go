package stripesim_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/keybrake/keybrake/stripesim"
)

func TestPersistence(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sim.json")
	clock := &fakeClock{t: epoch}
	opts := stripesim.Options{Now: clock.Now, StatePath: path}

	first := MustEnvWith(t, opts)
	r := first.do(t, "POST", "/v1/charges", visa2000, "Idempotency-Key", "persist")
	wantStatus(t, r, 200)
	id := r.object(t)["id"].(string)
	first.sim.Advance(time.Hour)
	// The state is on disk without Close: a killed simulator keeps it.
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("state file: %v", err)
	}

	second := MustEnvWith(t, opts)
	if gt := second.sim.GroundTruth(); len(gt.Charges) != 1 || gt.Charges[0].ID != id || gt.Charges[0].Metadata["order"] != "1" {
		t.Fatalf("ground truth after restart = %+v", gt.Charges)
	}
	if got := second.sim.Now(); !got.Equal(epoch.Add(time.Hour)) {
		t.Fatalf("clock after restart = %v, want %v", got, epoch.Add(time.Hour))
	}
	wantStatus(t, second.do(t, "GET", "/v1/charges/"+id, ""), 200)
	replay := second.do(t, "POST", "/v1/charges", visa2000, "Idempotency-Key", "persist")
	if replay.header.Get("Idempotent-Replayed") != "true" || string(replay.body) != string(r.body) {
		t.Fatalf("replay after restart: %d %v", replay.status, replay.header)
	}
	wantStatus(t, second.do(t, "POST", "/v1/refunds", form("charge", id, "amount", "100")), 200)

	third := MustEnvWith(t, opts)
	gt := third.sim.GroundTruth()
	if len(gt.Refunds) != 1 || gt.Charges[0].AmountRefunded != 100 {
		t.Fatalf("ground truth after second restart = %+v", gt)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("files left in the state directory: %v", entries)
	}
}

func TestPersistenceErrCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sim.json")
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := stripesim.New(stripesim.Options{StatePath: path}); err == nil {
		t.Fatal("New accepted a corrupt state file")
	}
}

func TestAdminObjects(t *testing.T) {
	e := MustEnv(t)
	MustFault(t, e.sim, stripesim.Fault{Path: "/v1/charges", Mode: stripesim.FaultCutAfter})
	if _, err := e.send(t.Context(), "POST", "/v1/charges", visa2000); err == nil {
		t.Fatal("want a connection error")
	}
	wantStatus(t, e.do(t, "POST", "/v1/customers", form("name", "Ada")), 200)
	r := e.do(t, "GET", "/_sim/objects", "", "Authorization", "")
	wantStatus(t, r, 200)
	obj := r.object(t)
	if len(obj["charges"].([]any)) != 1 || len(obj["customers"].([]any)) != 1 || r.header.Get("Request-Id") == "" {
		t.Fatalf("objects = %s", r.body)
	}
}
