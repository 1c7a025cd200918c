package sqlite

import (
	"encoding/binary"
	"os"
	"sync"
	"sync/atomic"
)

// Several processes may open one SQLite file (a second `keybrake serve`
// during a restart, `keybrake serve --replicas`, `keybrake audit`), and
// each hears only its own key changes (watch.go). A process's key reports
// are synchronous only while no other process has the file open, and did
// not since the process last emptied its watchers' caches: procs tells.
//
// Each process that opens a file holds a POSIX read lock on a byte of the
// file's -procs sidecar (presenceByte) for as long as it has the file open,
// and on opening adds one to the counter at its start. A process is alone
// when no other process holds a lock on presenceByte (F_GETLK: a
// process's own locks never conflict with it) and the counter is the one
// it last saw.

// procsSuffix names the sidecar file next to the database.
const procsSuffix = "-procs"

// presenceByte is the offset of the byte each process holding the file
// open read-locks; the counter is the 8 bytes before it.
const presenceByte = 8

// procFile is this process's hold on a database file's sidecar, shared by
// every Store of the process on the file (POSIX locks are the process's:
// closing any descriptor of the file drops them all).
type procFile struct {
	f    *os.File
	refs int
	seen atomic.Uint64 // the counter when this process last knew every change
}

var procs = struct {
	sync.Mutex
	byPath map[string]*procFile
}{byPath: map[string]*procFile{}}

// joinProcs registers this Store's process as one that has the file open,
// nil when the sidecar cannot be used (then key reports are never taken
// as synchronous).
func (s *Store) joinProcs() *procFile {
	path := s.watchPath()
	procs.Lock()
	defer procs.Unlock()
	if p := procs.byPath[path]; p != nil {
		p.refs++
		return p
	}
	f, err := os.OpenFile(path+procsSuffix, os.O_RDWR|os.O_CREATE, fileMode)
	if err != nil {
		return nil
	}
	n, err := announce(f)
	if err != nil {
		f.Close()
		return nil
	}
	p := &procFile{f: f, refs: 1}
	p.seen.Store(n)
	procs.byPath[path] = p
	return p
}

// leaveProcs undoes joinProcs, once. s.procs stays set (requests still
// asking KeyReportsSynchronous during Close read it unlocked); a closed
// store answers false.
func (s *Store) leaveProcs() {
	if s.procs == nil || !s.procsLeft.CompareAndSwap(false, true) {
		return
	}
	procs.Lock()
	defer procs.Unlock()
	p := s.procs
	if p.refs--; p.refs == 0 {
		delete(procs.byPath, s.watchPath())
		p.f.Close()
	}
}

// readCounter reads the sidecar's counter; 0 for a new file.
func readCounter(f *os.File) uint64 {
	var b [8]byte
	if n, _ := f.ReadAt(b[:], 0); n < len(b) {
		return 0
	}
	return binary.LittleEndian.Uint64(b[:])
}

// KeyReportsSynchronous reports whether this process hears of every key
// change: no other process has the database file open, and none opened it
// since this process last emptied the key caches of its watchers. When one
// did but has gone, the caches are emptied now (a key it changed may be
// cached as it was) and false is returned for the request asking, whose key
// came from a cache. It is called for every money-moving request on a
// cached key: a lock test and an 8-byte read, no query.
func (s *Store) KeyReportsSynchronous() bool {
	p := s.procs
	if p == nil || s.procsLeft.Load() || othersPresent(p.f) {
		return false
	}
	n := readCounter(p.f)
	seen := p.seen.Load()
	if n == seen {
		return true
	}
	if othersPresent(p.f) {
		return false
	}
	s.notifyKey("") // every key: which ones the other process changed is unknown
	p.seen.CompareAndSwap(seen, n)
	return false
}
