package main_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	main "github.com/keybrake/keybrake/cmd/keybrake"
	"github.com/keybrake/keybrake/sqlite"
	"github.com/keybrake/keybrake/storetest"
)

func TestAudit(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "keybrake.db")
	s, err := sqlite.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i := range 4 {
		ids = append(ids, storetest.MustAddEvent(t, s, storetest.NewEvent("vk_a", storetest.T0, i+1)).ID)
	}
	s.Close()

	run := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		err := main.Run(context.Background(), args, main.Env{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }})
		return out.String(), errOut.String(), err
	}
	export := filepath.Join(dir, "audit.jsonl")
	if out, _, err := run("audit", "export", "--db", db, "--out", export); err != nil || !strings.Contains(out, "4 chained events") {
		t.Fatalf("export: %v\n%s", err, out)
	}
	if _, errOut, err := run("audit", "verify", "--file", export); err != nil || !strings.Contains(errOut, "verifies") {
		t.Fatalf("verify --file: %v\n%s", err, errOut)
	}

	raw, err := sqlite.OpenDB(db)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`UPDATE events SET reason = 'nothing to see' WHERE id = ?`, ids[1]); err != nil {
		t.Fatal(err)
	}
	_, errOut, err := run("audit", "verify", "--db", db)
	if err == nil || !strings.Contains(errOut, `key "vk_a": chain broken at seq 2`) {
		t.Fatalf("verify after edit: err %v\n%s", err, errOut)
	}
	// The export taken before the edit still verifies: it is the evidence.
	if _, _, err := run("audit", "verify", "--file", export); err != nil {
		t.Fatalf("old export: %v", err)
	}
	if b, _ := os.ReadFile(export); !bytes.Contains(b, []byte(`"type":"head"`)) {
		t.Fatalf("export has no head line:\n%s", b)
	}
}

// TestEventsExportSince: an export since a time holds each key's events from
// then on, verifies on its own, and the next export's anchors continue where
// it ended; a prune between them (retention) changes nothing of that.
func TestEventsExportSince(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "keybrake.db")
	s, err := sqlite.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	day := 24 * time.Hour
	for i := range 6 {
		storetest.MustAddEvent(t, s, storetest.NewEvent("vk_a", storetest.T0.Add(time.Duration(i)*day), i+1))
	}
	storetest.MustAddEvent(t, s, storetest.NewEvent("vk_b", storetest.T0, 1))
	run := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		err := main.Run(context.Background(), args, main.Env{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }})
		return out.String(), errOut.String(), err
	}
	first := filepath.Join(dir, "first.jsonl")
	since := storetest.T0.Add(3 * day).Format(time.RFC3339)
	if out, _, err := run("events", "export", "--db", db, "--since", since, "--format", "jsonl", "--out", first); err != nil || !strings.Contains(out, "3 chained events") {
		t.Fatalf("events export --since: %v\n%s", err, out)
	}
	if _, errOut, err := run("audit", "verify", "--file", first); err != nil {
		t.Fatalf("verify the since export: %v\n%s", err, errOut)
	}
	if n, err := s.PruneEvents(context.Background(), storetest.T0.Add(3*day), storetest.T0.Add(90*day)); err != nil || n != 4 {
		t.Fatalf("PruneEvents = %d, %v", n, err)
	}
	if out, _, err := run("audit", "export", "--db", db, "--out", "-"); err != nil || !strings.Contains(out, `"seq":4`) || strings.Contains(out, `"seq":3,`) {
		t.Fatalf("export after prune to stdout: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"events", "export", "--db", db, "--format", "csv"}, "jsonl is the only format"},
		{[]string{"events", "export", "--db", db, "--since", "yesterday"}, "want a date like 2026-01-31"},
		{[]string{"events", "verify", "--db", db, "--since", "2d"}, "--since applies to export only"},
		{[]string{"events"}, "no action given"},
	} {
		if _, _, err := run(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want %q", tc.args, err, tc.want)
		}
	}
}
