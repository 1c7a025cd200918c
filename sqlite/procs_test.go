//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sqlite_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/keybrake/keybrake/sqlite"
)

// Stores of one process on one file hear each other's key changes, so
// their reports stay synchronous (the other process's case is
// http/TestAttackReplicas_SQLiteOtherProcessNarrowsKey); a closed store
// answers false, and its sidecar is owner-only like the database.
func TestKeyReportsSynchronous_OneProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keybrake.db")
	a, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if !a.KeyReportsSynchronous() {
		t.Fatal("a store alone on its file: not synchronous")
	}
	b, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if !a.KeyReportsSynchronous() || !b.KeyReportsSynchronous() {
		t.Fatal("two stores of one process: not synchronous")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if !a.KeyReportsSynchronous() {
		t.Fatal("the other store of this process closed: not synchronous")
	}
	if b.KeyReportsSynchronous() {
		t.Fatal("a closed store reports synchronous")
	}
	if fi, err := os.Stat(path + "-procs"); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the -procs sidecar: %v %v, want 0600", fi, err)
	}
}
