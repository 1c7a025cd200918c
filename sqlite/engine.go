package sqlite

import (
	"database/sql"
	"fmt"
)

// The SQLite engine is the pure-Go modernc.org/sqlite (engine_pure.go): one
// static binary, no C toolchain. Everything that opens the file goes through
// engineOpen, so the engine is one file's choice: the C SQLite of
// github.com/mattn/go-sqlite3 was tried behind the same seam and bought
// nothing measurable end to end (docs/performance.md, "The C SQLite
// engine, tried").

// openDB opens the database file at path with pragmas ("name(value)", as
// SQLite's PRAGMA takes them) applied to every connection the pool makes;
// immediate makes every transaction BEGIN IMMEDIATE (the writer's).
func openDB(path string, pragmas []string, immediate bool) (*sql.DB, error) {
	return engineOpen(path, pragmas, immediate)
}

// OpenDB opens the SQLite file at path with the engine the store is built
// with and the store's busy timeout, for tools and tests that read or write
// the file beside a Store. It must be this engine, not another SQLite linked
// into the same process: two copies of SQLite in one process do not see each
// other's locks on a file, and closing one's descriptor drops the other's
// (https://sqlite.org/howtocorrupt.html, 2.2.1).
func OpenDB(path string) (*sql.DB, error) {
	return openDB(path, []string{fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds())}, false)
}

// SQLite's result codes that the store tells apart (https://sqlite.org/rescode.html).
const (
	sqliteBUSY                  = 5
	sqliteLOCKED                = 6
	sqliteREADONLY              = 8
	sqliteIOERR                 = 10
	sqliteFULL                  = 13
	sqliteCANTOPEN              = 14
	sqliteCONSTRAINT_PRIMARYKEY = 1555
	sqliteCONSTRAINT_UNIQUE     = 2067
)

// storePragmas are the pragmas of every connection of the store, then more.
func storePragmas(more ...string) []string {
	return append([]string{fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()), "foreign_keys(1)", "synchronous(NORMAL)"}, more...)
}

// Engine names the SQLite engine this binary was built with, for
// `keybrake version` and the bench's report.
func Engine() string { return engineName }
