// Package sqlite implements keybrake.Store on SQLite, through the pure-Go
// modernc.org/sqlite driver. It is the embedded default store: one file, no
// server, no cgo.
//
// Locking. SQLite has a single writer per database file. The Store keeps two
// connection pools on the same file: a writer pool of exactly one connection,
// whose transactions begin with BEGIN IMMEDIATE, and a pool of readers. Every
// method that writes runs in one transaction on the writer, so a cap check
// and the increment it guards (Reserve) can never interleave with another
// write: not within the process, because there is one writer connection, and
// not across processes opening the same file, because BEGIN IMMEDIATE takes
// the database's write lock before the first read. Readers use WAL snapshots
// and never block the writer.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/internal/inflight"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Store is keybrake.Store on SQLite. Create it with Open.
type Store struct {
	// Now is the clock for timestamps the caller does not pass (a key's
	// CreatedAt when zero, a zero ReserveArgs.Now). Defaults to time.Now.
	Now func() time.Time

	writer *sql.DB // exactly one connection; every write transaction runs here
	reader *sql.DB // read-only connections on WAL snapshots

	// Prepared statements by query text. SQLite spends more time parsing
	// the hot statements than running them; a *sql.Stmt keeps one
	// prepared statement per connection.
	wstmts map[string]*sql.Stmt // on the writer, used through Tx.StmtContext
	rstmts map[string]*sql.Stmt // on the readers

	zones       sync.Map     // key ID -> timezone seen by the last Reserve; only a hint
	probes      sync.Map     // guard probe text -> *sql.Stmt on the writer, nil until prepared (guards.go)
	probeMisses atomic.Bool  // a probe ran unprepared
	plans       planCache    // guards column -> decoded guards and their plan (guard_plan.go)
	guardGuess  sync.Map     // key ID -> guards text read by its last reservation; only a hint (guard_plan.go)
	nextPrune   atomic.Int64 // Unix second of the next guard counter prune

	path  string // the database file as the caller named it
	canon string // path made absolute, symlinks resolved: names the watchers of its keys and its -procs

	batch *batcher // group commit of Reserve and Settle

	later inflight.Settlements // settlements queued by SettleLater, not yet answered

	checkpoints *checkpointer // WAL checkpoints off the writer

	procs     *procFile   // this process's hold on the file's -procs sidecar (procs.go); nil: none
	procsLeft atomic.Bool // leaveProcs ran: Close
}

var _ keybrake.Store = (*Store)(nil)

// busyTimeout is how long a connection waits for another process's write
// lock before failing with SQLITE_BUSY (reported as EUNAVAILABLE).
const busyTimeout = 10 * time.Second

// Open opens the database file at path, creating it if needed, applies the
// embedded migrations that have not run yet, and returns the Store. Several
// Stores, in one process or several, may open the same file.
//
// Durability: the database runs in WAL mode with synchronous=NORMAL. A commit
// is appended to the write-ahead log without an fsync; the log is synced at
// checkpoints. A crash of the process (kill -9) loses nothing that was
// committed, since the log is in the OS page cache; only a power loss or an
// OS crash can roll back the last transactions before the checkpoint. The
// proxy's invariants survive kill -9 and restart, and the fsync per request
// that synchronous=FULL would cost (milliseconds on most disks) would cap the
// proxy far below the throughput it is meant for. Deployments that must
// survive power loss without losing the last seconds of reservations should
// use the PostgreSQL store.
//
// Permissions: a new database file is created 0600, and SQLite gives its
// -wal and -shm the same mode. An existing database, -wal or -shm that group
// or others may read is made owner-only (chmod) on Open, with a warning on
// slog's default logger; Open fails if that chmod fails. The directory is
// the caller's (keybrake serve creates it 0700).
func Open(path string) (*Store, error) {
	migrations, err := fs.Sub(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	return open(path, migrations)
}

// open is Open with the migrations taken from the *.sql files of fsys.
func open(path string, migrations fs.FS) (*Store, error) {
	if path == "" || strings.ContainsAny(path, "?#") || strings.HasPrefix(path, "file:") || path == ":memory:" {
		return nil, keybrake.Errorf(keybrake.EINVALID, "sqlite: path %q must be a plain file path", path)
	}
	if err := secureFiles(path); err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s := &Store{Now: time.Now, path: path, canon: canonicalPath(path)}
	// Announced before anything is written, migrations included (some
	// rewrite keys): a serve already running on the file reads keys again
	// from the moment this process may change one.
	var err error
	if s.procs, err = s.joinProcs(); err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}

	// The writer never checkpoints: the checkpointer does, on a connection
	// of its own (checkpoint.go), so no commit waits for one. When the writer
	// starts the log over, it truncates it to journal_size_limit (walSizeLimit),
	// so a burst does not leave the -wal file at its high-water mark for good. Its
	// temporary files are in memory (temp_store): the statement journal of
	// each write's savepoint in a group commit (batch.go) only ever rolls
	// that write back within the transaction, so writing it to a temp file
	// buys nothing durable.
	if s.writer, err = openDB(path, storePragmas("wal_autocheckpoint(0)", fmt.Sprintf("journal_size_limit(%d)", walSizeLimit), "cache_size(-32000)", "temp_store(MEMORY)"), true); err != nil {
		s.leaveProcs()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s.writer.SetMaxOpenConns(1)
	s.writer.SetMaxIdleConns(1)
	s.writer.SetConnMaxLifetime(0)
	s.writer.SetConnMaxIdleTime(0)
	if err := s.setup(context.Background()); err != nil {
		s.writer.Close()
		s.leaveProcs()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := s.migrate(context.Background(), migrations); err != nil {
		s.writer.Close()
		s.leaveProcs()
		return nil, fmt.Errorf("sqlite: migrate %s: %w", path, err)
	}

	// Opened after the migrations, so the file is already in WAL mode.
	if s.reader, err = openDB(path, storePragmas("query_only(1)"), false); err != nil {
		s.writer.Close()
		s.leaveProcs()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s.reader.SetMaxOpenConns(8)
	s.reader.SetMaxIdleConns(8)
	s.reader.SetConnMaxIdleTime(0)
	if err := s.prepare(context.Background()); err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s.batch = newBatcher(s)
	if s.checkpoints, err = startCheckpointer(path, storePragmas("wal_autocheckpoint(0)"), s.checkpointOnWriter); err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	return s, nil
}

// prepare prepares the hot statements. It must run before any write
// transaction: preparing on the writer needs its only connection.
func (s *Store) prepare(ctx context.Context) error {
	s.wstmts, s.rstmts = map[string]*sql.Stmt{}, map[string]*sql.Stmt{}
	hot := []string{qReserveRead, qInsertReservation, qReservationByID, qSettle, qKeyByID,
		qInsertCounted, qFindEntry, qInsertEntry, qUpdateEntry, qClaimNew, qFinishHeld, qSavepoint, qRollbackTo, qRelease}
	for _, n := range eventChunks {
		hot = append(hot, qInsertEventsBy[n], qChainHeadsBy[n], qMoveHeadsBy[n])
	}
	for _, q := range hot {
		st, err := s.writer.PrepareContext(ctx, q)
		if err != nil {
			return err
		}
		s.wstmts[q] = st
	}
	for _, q := range []string{qKeyByID, qKeyByHash, qReservationByID, qSpend, qHeldObjects} {
		st, err := s.reader.PrepareContext(ctx, q)
		if err != nil {
			return err
		}
		s.rstmts[q] = st
	}
	return nil
}

// txExec runs q in tx, through its prepared statement if there is one.
func (s *Store) txExec(ctx context.Context, tx *sql.Tx, q string, args ...any) (sql.Result, error) {
	if st := s.wstmts[q]; st != nil {
		return tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, q, args...)
}

// txQueryRow is txExec for a query returning one row.
func (s *Store) txQueryRow(ctx context.Context, tx *sql.Tx, q string, args ...any) *sql.Row {
	if st := s.wstmts[q]; st != nil {
		return tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return tx.QueryRowContext(ctx, q, args...)
}

// queryRow runs q on a reader, through its prepared statement if any.
func (s *Store) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	if st := s.rstmts[q]; st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return s.reader.QueryRowContext(ctx, q, args...)
}

// Close waits (a bounded time) for the settlements SettleLater queued and
// closes both connection pools. After Close every method returns
// EUNAVAILABLE.
func (s *Store) Close() error {
	defer s.leaveProcs()
	s.later.Drain(laterDrain)
	if s.batch != nil {
		s.batch.close()
	}
	var errs []error
	if s.checkpoints != nil {
		errs = append(errs, s.checkpoints.close())
	}
	for _, m := range []map[string]*sql.Stmt{s.wstmts, s.rstmts} {
		for _, st := range m {
			errs = append(errs, st.Close())
		}
	}
	if s.reader != nil {
		errs = append(errs, s.reader.Close())
	}
	if s.writer != nil {
		errs = append(errs, s.writer.Close())
	}
	return errors.Join(errs...)
}

// Ping checks both pools can reach the database. Returns EUNAVAILABLE if
// not.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.writer.PingContext(ctx); err != nil {
		return wrap(err, "ping")
	}
	var one int
	if err := s.reader.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		return wrap(err, "ping")
	}
	return nil
}

// now returns the store's clock reading.
func (s *Store) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

// beginWrite starts a write transaction (BEGIN IMMEDIATE) on the writer.
func (s *Store) beginWrite(ctx context.Context) (*sql.Tx, error) {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return nil, wrap(err, "begin")
	}
	return tx, nil
}

// pageSize is the page size of a new database file. Every commit writes each
// b-tree page it touched to the WAL (about six pages for a Reserve, two for
// a Settle or an event); 1 KiB and 2 KiB pages measured no faster.
const pageSize = 4096

// setup puts a new file in WAL mode with the page size, which must be set
// before the first write. Both persist in the file; on an existing database
// they are no-ops.
func (s *Store) setup(ctx context.Context) error {
	if _, err := s.writer.ExecContext(ctx, fmt.Sprintf("PRAGMA page_size = %d", pageSize)); err != nil {
		return err
	}
	var mode string
	if err := s.writer.QueryRowContext(ctx, "PRAGMA journal_mode = WAL").Scan(&mode); err != nil {
		return err
	}
	if mode != "wal" {
		return fmt.Errorf("journal_mode is %q, want wal", mode)
	}
	return nil
}

// migrate applies every embedded migration not yet recorded in
// schema_migrations, in lexical order of file name, each in its own write
// transaction together with its record. Because the check runs inside the
// BEGIN IMMEDIATE transaction, two processes opening a fresh file at once
// apply each migration exactly once.
func (s *Store) migrate(ctx context.Context, fsys fs.FS) error {
	if _, err := s.writer.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		name       TEXT    PRIMARY KEY,
		applied_at INTEGER NOT NULL
	) STRICT`); err != nil {
		return err
	}
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		if err := s.migrateFile(ctx, fsys, name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func (s *Store) migrateFile(ctx context.Context, fsys fs.FS, name string) error {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()

	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE name = ?`, name).Scan(&n); err != nil {
		return err
	} else if n > 0 {
		return nil
	}
	body, err := fs.ReadFile(fsys, name)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, string(body)); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)`, name, s.now().UnixMicro()); err != nil {
		return err
	}
	return tx.Commit()
}

// wrap turns a driver error into a keybrake error where one fits: a closed
// store, a lost connection or a database locked past busy_timeout is
// EUNAVAILABLE; keybrake errors pass through; anything else is wrapped with
// what was being done.
func wrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	var kerr *keybrake.Error
	if errors.As(err, &kerr) {
		return err
	}
	what := fmt.Sprintf(format, args...)
	if strings.Contains(err.Error(), suspendedAbort) {
		// The trigger of migration 0005: a reservation of a suspended key.
		return keybrake.Errorf(keybrake.EFORBIDDEN, "This vault key is suspended; it refuses every request until an operator resumes it (POST /vault/keys/{id}/resume).")
	}
	if unavailable(err) {
		return &unavailableError{what: what, err: err}
	}
	return fmt.Errorf("sqlite: %s: %w", what, err)
}

// unavailableError is EUNAVAILABLE that still unwraps to the driver error.
type unavailableError struct {
	what string
	err  error
}

func (e *unavailableError) Error() string {
	return fmt.Sprintf("sqlite: %s: store unavailable: %v", e.what, e.err)
}

func (e *unavailableError) Unwrap() []error {
	return []error{keybrake.Errorf(keybrake.EUNAVAILABLE, "The spend store is unavailable."), e.err}
}

func unavailable(err error) bool {
	if errors.Is(err, sql.ErrConnDone) || strings.Contains(err.Error(), "sql: database is closed") || strings.Contains(err.Error(), "sql: statement is closed") {
		return true
	}
	if code, ok := errorCode(err); ok {
		switch code & 0xff {
		case sqliteBUSY, sqliteLOCKED, sqliteCANTOPEN,
			sqliteIOERR, sqliteFULL, sqliteREADONLY:
			return true
		}
	}
	return false
}

// isUnique reports whether err is a UNIQUE or PRIMARY KEY violation.
func isUnique(err error) bool {
	if code, ok := errorCode(err); ok {
		switch code {
		case sqliteCONSTRAINT_UNIQUE, sqliteCONSTRAINT_PRIMARYKEY:
			return true
		}
	}
	return false
}
