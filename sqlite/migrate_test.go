package sqlite_test

import (
	"context"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"testing/fstest"

	"github.com/keybrake/keybrake/sqlite"
	"github.com/keybrake/keybrake/storetest"
)

// mustApplied lists schema_migrations in the order the files were applied.
func mustApplied(tb testing.TB, path string) []string {
	tb.Helper()
	db, err := sqlite.OpenDB(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name FROM schema_migrations ORDER BY rowid`)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			tb.Fatal(err)
		}
		names = append(names, n)
	}
	return names
}

func TestMigrate(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		// Lexical order: 0002 before 0010 before 0100_z, each applied
		// once, and a file added later is applied on the next Open. (Not
		// named like an embedded migration, which it would replace: the
		// Store prepares statements on every embedded table.)
		path := filepath.Join(t.TempDir(), "m.db")
		files := fstest.MapFS{
			"0100_z.sql": {Data: []byte(`CREATE TABLE ledger (id TEXT PRIMARY KEY, n INTEGER); INSERT INTO ledger VALUES ('a', (SELECT COUNT(*) FROM b));`)},
			"0010_b.sql": {Data: []byte(`CREATE TABLE b (x INTEGER); INSERT INTO b SELECT 1 FROM a;`)},
			"0002_a.sql": {Data: []byte(`CREATE TABLE a (x INTEGER); INSERT INTO a VALUES (1);`)},
			"README.md":  {Data: []byte(`not a migration`)},
		}
		s, err := sqlite.OpenWithMigrations(path, files)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		s.Close()
		want := append(sqlite.EmbeddedMigrations(), "0002_a.sql", "0010_b.sql", "0100_z.sql")
		sort.Strings(want)
		if got := mustApplied(t, path); !reflect.DeepEqual(got, want) {
			t.Fatalf("applied %v, want %v", got, want)
		}

		files["0101_more.sql"] = &fstest.MapFile{Data: []byte(`CREATE TABLE more (x INTEGER);`)}
		s, err = sqlite.OpenWithMigrations(path, files)
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		s.Close()
		if got := mustApplied(t, path); !reflect.DeepEqual(got, append(want, "0101_more.sql")) {
			t.Fatalf("applied %v after reopen", got)
		}
	})

	t.Run("ErrFailedMigrationRollsBack", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "m.db")
		files := fstest.MapFS{
			"0002_bad.sql": {Data: []byte(`CREATE TABLE half (x INTEGER); THIS IS NOT SQL;`)},
		}
		if s, err := sqlite.OpenWithMigrations(path, files); err == nil {
			s.Close()
			t.Fatalf("Open with a broken migration succeeded")
		}
		if got := mustApplied(t, path); !reflect.DeepEqual(got, []string{"0001_store.sql"}) {
			t.Fatalf("applied %v, want only 0001", got)
		}
		// The broken file's first statement was rolled back with it.
		files["0002_bad.sql"] = &fstest.MapFile{Data: []byte(`CREATE TABLE half (x INTEGER);`)}
		s, err := sqlite.OpenWithMigrations(path, files)
		if err != nil {
			t.Fatalf("Open with the fixed migration: %v", err)
		}
		s.Close()
	})
}

// 0003_key_policy writes out the old meaning of an empty allowed_endpoints,
// every operation, as ["*"], and keys made before it may not read secrets.
func TestMigrate_KeyPolicy(t *testing.T) {
	s, path := MustOpen(t)
	old := storetest.NewKey("key_old")
	old.AllowedEndpoints = nil
	storetest.MustCreateKey(t, s, old)
	limited := storetest.NewKey("key_limited")
	limited.AllowedEndpoints = []string{"charges.create"}
	storetest.MustCreateKey(t, s, limited)
	s.Close()

	// Put the file back as it was before 0003.
	db, err := sqlite.OpenDB(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`ALTER TABLE keys DROP COLUMN allow_secret_reads`,
		`DELETE FROM schema_migrations WHERE name = '0003_key_policy.sql'`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	s2 := MustReopen(t, path)
	for id, want := range map[string][]string{"key_old": {"*"}, "key_limited": {"charges.create"}} {
		k, err := s2.FindKeyByID(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(k.AllowedEndpoints, want) || k.AllowSecretReads {
			t.Fatalf("%s after 0003: endpoints %q, secret reads %v", id, k.AllowedEndpoints, k.AllowSecretReads)
		}
	}
}

// 0027_velocity_aliases names the aliases of every operation a
// velocity limit saved before them names: a limit of one refunds.create an
// hour did not count POST /v1/charges/{id}/refund until an admin saved it
// again, so a key refunded at will by the legacy path.
func TestAttackLife_LegacyVelocityAliases(t *testing.T) {
	s, path := MustOpen(t)
	storetest.MustCreateLegacyVelocityKey(t, s, "key_legacy")
	s.Close()

	// Put the file back as it was before 0027.
	db, err := sqlite.OpenDB(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DELETE FROM schema_migrations WHERE name = '0027_velocity_aliases.sql'`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	storetest.CheckVelocityAliases(t, MustReopen(t, path), "key_legacy")
}
