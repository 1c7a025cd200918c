package kbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/keybrake/keybrake/postgres"
)

// PostgresServerDSN returns the DSN of the test server from
// KEYBRAKE_TEST_POSTGRES (scripts/pg start prints it). Without it the test
// is skipped, unless KEYBRAKE_REQUIRE_POSTGRES=1 (CI, scripts/test), which
// fails it.
func PostgresServerDSN(tb testing.TB) string {
	tb.Helper()
	dsn := os.Getenv("KEYBRAKE_TEST_POSTGRES")
	if dsn == "" {
		if os.Getenv("KEYBRAKE_REQUIRE_POSTGRES") == "1" {
			tb.Fatal("KEYBRAKE_TEST_POSTGRES is not set but KEYBRAKE_REQUIRE_POSTGRES=1; run the tests under `scripts/pg run -- go test ./…`")
		}
		tb.Skip("KEYBRAKE_TEST_POSTGRES is not set; run `scripts/pg run -- go test ./…` to test against PostgreSQL")
	}
	return dsn
}

// PostgresSchema creates a fresh, empty schema on the server of serverDSN,
// drops it when the test ends, and returns a DSN whose search_path selects
// it: as isolated as a database, and ten times faster to make.
func PostgresSchema(tb testing.TB, serverDSN string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := make([]byte, 8)
	rand.Read(b)
	name := "test_" + hex.EncodeToString(b)
	conn, err := pgx.Connect(ctx, serverDSN)
	if err != nil {
		tb.Fatalf("connect to the test server: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		tb.Fatalf("create schema %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, serverDSN)
		if err != nil {
			tb.Errorf("connect to drop %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", name, err)
		}
	})
	return WithParam(serverDSN, "search_path", name)
}

// WithParam returns dsn with one more URL query parameter (or keyword).
func WithParam(dsn, key, value string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		return dsn + sep + key + "=" + url.QueryEscape(value)
	}
	return dsn + " " + key + "=" + value
}

// Postgres opens a PostgreSQL store in a fresh schema of the test server;
// tb.Cleanup closes it.
func Postgres(tb testing.TB) *postgres.Store {
	tb.Helper()
	s, err := postgres.Open(context.Background(), PostgresSchema(tb, PostgresServerDSN(tb)))
	if err != nil {
		tb.Fatalf("open postgres: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}
