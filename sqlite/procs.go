package sqlite

import (
	"encoding/binary"
	"fmt"
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
	path string        // the database file's canonical path (Store.watchPath)
	db   os.FileInfo   // the database file when joined
	side os.FileInfo   // the sidecar f is
}

var procs = struct {
	sync.Mutex
	byPath map[string]*procFile
}{byPath: map[string]*procFile{}}

// joinProcs registers this Store's process as one that has the file open.
// It returns nil, and no error, where the platform has no POSIX record
// locks (key reports are then never taken as synchronous), and an error
// when the sidecar cannot be used where it could: a process that opened
// the file without announcing itself would change keys behind the back of
// every serve that believes itself alone (TestAttackSQLiteProcs_UnjoinableSidecar).
func (s *Store) joinProcs() (*procFile, error) {
	path := s.watchPath()
	procs.Lock()
	defer procs.Unlock()
	if p := procs.byPath[path]; p != nil {
		p.refs++
		return p, nil
	}
	if !posixLocks {
		return nil, nil
	}
	db, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("the database file: %w", err)
	}
	f, err := os.OpenFile(path+procsSuffix, os.O_RDWR|os.O_CREATE, fileMode)
	if err != nil {
		return nil, fmt.Errorf("the %s sidecar, which tells the processes that open the file about each other: %w", procsSuffix, err)
	}
	side, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("the %s sidecar: %w", procsSuffix, err)
	}
	n, err := announce(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("the %s sidecar's locks: %w", procsSuffix, err)
	}
	p := &procFile{f: f, refs: 1, db: db, side: side, path: path}
	p.seen.Store(n)
	procs.byPath[path] = p
	return p, nil
}

// intact reports whether the database file and the sidecar at p's path are
// still the ones p joined, and the database has one name: a sidecar
// deleted or replaced while this process runs is one the next process
// announces itself in without this one knowing, and a hard link to the
// database file is another name with a sidecar of its own. Two stats.
func (p *procFile) intact() bool {
	db, err := os.Stat(p.path)
	if err != nil || !os.SameFile(db, p.db) || linkCount(db) != 1 {
		return false
	}
	side, err := os.Stat(p.path + procsSuffix)
	return err == nil && os.SameFile(side, p.side)
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
// cached key: a lock test, an 8-byte read and two stats, no query.
func (s *Store) KeyReportsSynchronous() bool {
	p := s.procs
	if p == nil || s.procsLeft.Load() || othersPresent(p.f) || !p.intact() {
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
