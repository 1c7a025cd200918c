package main_test

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

	raw, err := sql.Open("sqlite", db)
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
