package sqlite

import (
	"context"
	"database/sql"
	"io/fs"
	"path"
	"strings"
	"testing/fstest"
)

// EmbeddedMigrations lists the names of the embedded migration files.
func EmbeddedMigrations() []string {
	names, _ := fs.Glob(migrationFS, "migrations/*.sql")
	for i, n := range names {
		names[i] = path.Base(n)
	}
	return names
}

// OpenWithMigrations opens path applying the embedded migrations plus
// extra, so tests can check how the runner orders and records files.
func OpenWithMigrations(path string, extra fstest.MapFS) (*Store, error) {
	all := fstest.MapFS{}
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		b, err := fs.ReadFile(migrationFS, name)
		if err != nil {
			return nil, err
		}
		all[name[len("migrations/"):]] = &fstest.MapFile{Data: b}
	}
	for name, f := range extra {
		all[name] = f
	}
	return open(path, all)
}

// QueryPlan returns SQLite's EXPLAIN QUERY PLAN of q on a reader, one
// step a line.
func QueryPlan(s *Store, q string, args ...any) (string, error) {
	rows, err := s.reader.Query("EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			return "", err
		}
		out = append(out, detail)
	}
	return strings.Join(out, "\n"), rows.Err()
}

// Hot queries of the writer and the resolver, for the plan test.
var (
	QCountRead = qCountRead

	// PruneEvents' statements (audit_chain.go).
	QPruneFirstKept, QPrunePrevOf, QPruneBefore, QPruneAll = qPruneFirstKept, qPrunePrevOf, qPruneBefore, qPruneAll
	QSpend                                                 = qSpend
)

// StopCheckpoints stops s's checkpointer after its last checkpoint: from
// then until Close the write-ahead log keeps every frame written, so a
// test can count them.
func StopCheckpoints(s *Store) error { return s.checkpoints.close() }

// PageOwners maps each page of s's database, as its newest snapshot has
// it, to the table or index it belongs to (SQLite's dbstat).
func PageOwners(s *Store) (map[uint32]string, error) {
	rows, err := s.reader.Query(`SELECT pageno, name FROM dbstat`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	owners := map[uint32]string{}
	for rows.Next() {
		var pg uint32
		var name string
		if err := rows.Scan(&pg, &name); err != nil {
			return nil, err
		}
		owners[pg] = name
	}
	return owners, rows.Err()
}

// BatchWrite runs fn as one write of the group commit, as the store's own
// writes do.
func (s *Store) BatchWrite(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return s.batch.write(ctx, fn)
}

// BatchQueued returns how many writes wait in the group commit's queue.
func (s *Store) BatchQueued() int { return len(s.batch.ops) }
