//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sqlite_test

import (
	"os"
	"path/filepath"
	"strings"
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

// A hard link is another name of the database file with a -procs sidecar
// of its own: a process that opened the file by it announced itself where
// the others never looked. A store whose file has more than one name, or
// whose sidecar is no longer the file it locked, is never alone.
func TestAttackSQLiteProcs_HardLink(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keybrake.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.KeyReportsSynchronous() {
		t.Fatal("a store alone on its file: not synchronous")
	}
	if err := os.Link(path, path+".2"); err != nil {
		t.Fatal(err)
	}
	if s.KeyReportsSynchronous() {
		t.Fatal("the database file has a second name (a hard link): still synchronous")
	}
	if err := os.Remove(path + ".2"); err != nil {
		t.Fatal(err)
	}
	if !s.KeyReportsSynchronous() {
		t.Fatal("the hard link removed again: not synchronous")
	}
}

// A process that could not open or lock the -procs sidecar (a directory,
// a file it may not write, a file system without POSIX locks) opened the
// database anyway and changed keys without announcing itself, behind the
// back of a serve that believed itself alone. Opening now fails.
func TestAttackSQLiteProcs_UnjoinableSidecar(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keybrake.db")
	if err := os.Mkdir(path+"-procs", 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(path)
	if err == nil {
		s.Close()
		t.Fatal("opened a database whose -procs sidecar cannot be used")
	}
	if !strings.Contains(err.Error(), "-procs") {
		t.Fatalf("error %q does not name the sidecar", err)
	}
}
