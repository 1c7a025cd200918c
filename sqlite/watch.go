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

func (s *Store) watchPath() string {
	if abs, err := filepath.Abs(s.path); err == nil {
		return abs
	}
	return s.path
}
