package sqlite

import (
	"io/fs"
	"path"
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
