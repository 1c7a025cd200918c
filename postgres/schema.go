package postgres

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
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	var missing []string
	if err := s.pool.QueryRow(ctx, `SELECT COALESCE(array_agg(n ORDER BY n), '{}') FROM unnest($1::text[]) AS n
		WHERE n NOT IN (SELECT name FROM schema_migrations)`, names).Scan(&missing); err != nil {
		return s.wrap("check schema", err)
	}
	if len(missing) > 0 {
		return keybrake.Errorf(keybrake.EINTERNAL, "migration %s is not applied", missing[0])
	}
	return nil
}
