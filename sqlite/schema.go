package sqlite

import (
	"context"
	"io/fs"
	"sort"

	"github.com/keybrake/keybrake"
)

var _ keybrake.SchemaChecker = (*Store)(nil)

// CheckSchema returns nil when every embedded migration is recorded in
// schema_migrations, EINTERNAL naming the first that is not.
func (s *Store) CheckSchema(ctx context.Context) error {
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		var n int
		base := name[len("migrations/"):]
		if err := s.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE name = ?`, base).Scan(&n); err != nil {
			return wrap(err, "check schema")
		}
		if n == 0 {
			return keybrake.Errorf(keybrake.EINTERNAL, "migration %s is not applied", base)
		}
	}
	return nil
}

// suspendedAbort is the message of migration 0005's triggers, which refuse
// a new reservation of a suspended key in the transaction that makes it.
const suspendedAbort = "keybrake: vault key suspended"
