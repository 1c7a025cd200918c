package sqlite

import (
	"context"
	"path/filepath"
	"sync"
)

// watchers holds, per database file, the functions told about key changes.
// Stores opened on one file in one process share them, so a change through
// any of them reaches every cache in the process. Processes sharing a file
// do not see each other's changes: KeyReportsSynchronous (procs.go) tells
// the caches when another process has the file open, or did (use
// PostgreSQL for several replicas).
var watchers = struct {
	sync.Mutex
	byPath map[string]map[*func(string)]struct{}
}{byPath: map[string]map[*func(string)]struct{}{}}

// WatchKeys calls fn with the ID of every key updated or revoked through a
// Store on this file, in this process, until ctx ends.
func (s *Store) WatchKeys(ctx context.Context, fn func(keyID string)) error {
	path := s.watchPath()
	f := &fn
	watchers.Lock()
	if watchers.byPath[path] == nil {
		watchers.byPath[path] = map[*func(string)]struct{}{}
	}
	watchers.byPath[path][f] = struct{}{}
	watchers.Unlock()
	go func() {
		<-ctx.Done()
		watchers.Lock()
		delete(watchers.byPath[path], f)
		watchers.Unlock()
	}()
	return nil
}

// notifyKey tells every watcher of this file that a key changed. It runs
// after the change committed.
func (s *Store) notifyKey(id string) {
	watchers.Lock()
	fns := make([]func(string), 0, len(watchers.byPath[s.watchPath()]))
	for f := range watchers.byPath[s.watchPath()] {
		fns = append(fns, *f)
	}
	watchers.Unlock()
	for _, fn := range fns {
		fn(id)
	}
}

// watchPath names the database file for this process's watchers and its
// -procs sidecar: the canonical path, so that two spellings of one file
// (./keybrake.db and its absolute path, a symlink to it or to its
// directory) are one file for both.
func (s *Store) watchPath() string {
	if s.canon != "" {
		return s.canon
	}
	return canonicalPath(s.path)
}

// canonicalPath is path made absolute with every symlink resolved, or as
// much of that as can be done. Without it, a process that opened the file
// through a symlink used another -procs sidecar than one that opened it by
// its real path, and neither knew the other had the file open
// (TestAttackSQLiteProcs_SymlinkAlias).
func canonicalPath(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return path
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		return real
	}
	return abs
}
