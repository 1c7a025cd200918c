// Package postgres implements keybrake.Store on PostgreSQL through pgx, for
// deployments that run several proxy replicas against one database.
//
// # Locking
//
// A reservation must check every cap of a key and record itself in one atomic
// step, and that must hold across replicas. The store does it without a
// global lock: Reserve takes the key's row lock (SELECT … FROM keys WHERE
// id = $1 FOR NO KEY UPDATE) first, so reservations of the same key are
// serialised and reservations of different keys never wait on each other.
// Policy changes (UpdateKey, RevokeKey write the row) take the same lock, so
// the check reads the key's current policy. Settle locks only the
// reservation's row and changes the counters by deltas: a settlement racing a
// check can only make it stricter (see docs/architecture.md, "PostgreSQL and
// replicas").
//
// Reserve and Settle each run as one statement calling a PL/pgSQL function
// (migrations/0002_one_round_trip.sql) that does lock, check and write in
// one implicit transaction, so the key lock is held for one server-side
// execution and its commit, never across a network round trip: on one hot
// key, throughput is bounded by that, not by the latency to the proxy.
//
// # Group commit
//
// Concurrent calls share that statement. Reservations that arrive while a
// statement of their lane (two per process; a key is always in the same
// lane) runs wait in the process and then go together as one
// keybrake_reserve_many statement (reserve_batch.go,
// migrations/0028_reserve_many.sql): each key locked once, in key order,
// each reservation decided in order exactly as alone, one commit.
// Settlements, of any key, batch the same way through keybrake_settle_batch
// (settle_batch.go). No
// caller is answered before its batch has committed, and an error raised by
// one element rolls back the batch, whose elements then run one by one so
// that each gets its own outcome.
//
// Transactions run at READ COMMITTED, not SERIALIZABLE: the row lock already
// orders every transaction that could invalidate the check, and under READ
// COMMITTED a statement that follows a granted lock sees everything committed
// before it. SERIALIZABLE would add nothing to correctness but would abort
// transactions with serialization failures under contention, which every
// caller would then have to retry in a loop; a lock wait needs no retry.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/internal/inflight"
)

//go:embed migrations/*.sql
var migrations embed.FS

// migrationLockID is the pg_advisory_lock key that serialises migrations of
// replicas starting together ("keybrake" in ASCII).
const migrationLockID int64 = 0x6b657962726b65

// defaultConnectTimeout bounds dialing the server when the DSN sets no
// connect_timeout, so a request fails with EUNAVAILABLE instead of hanging
// while the server is unreachable.
const defaultConnectTimeout = 5 * time.Second

// defaultMaxConns is the pool size when the DSN sets no pool_max_conns.
// pgxpool's own default (the number of CPUs, at least 4) starves a proxy
// with many concurrent requests, each of which needs a connection for its
// reservation and its settlement.
const defaultMaxConns = 32

// Store is keybrake.Store on PostgreSQL. It is safe for concurrent use, and
// several Stores (replicas) may share one database.
type Store struct {
	pool    *pgxpool.Pool
	locs    sync.Map             // key ID → *time.Location; a key's timezone never changes
	queues  sync.Map             // lane (laneOf) → *keyQueue: this process's reservations of the lane's keys, run in batches
	settles settleQueue          // this process's settlements, run in batches
	later   inflight.Settlements // settlements queued by SettleLater, not yet answered

	// Now fills in creation times the caller left zero (CreateKey,
	// AddEvent). It defaults to time.Now.
	Now func() time.Time

	// MaxClockSkew, when positive, is how far the time a reservation or
	// request is decided at may be from the database's clock before this
	// replica refuses it (guard_clock.go). Zero does not check.
	MaxClockSkew time.Duration
	clock        dbClock
}

var _ keybrake.Store = (*Store)(nil)

// Open connects (through a pgxpool) to dsn, applies the embedded migrations
// that are not applied yet, and returns the Store. Pool settings may be given
// in the DSN (pool_max_conns=…). Returns EUNAVAILABLE if the server cannot be
// reached.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgconn redacts the password from its parse errors.
		return nil, fmt.Errorf("%w: %v", keybrake.Errorf(keybrake.EINVALID, "postgres: the DSN cannot be parsed"), err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	// Reserve and Settle are single statements in implicit transactions,
	// which take the session's default isolation: make it READ COMMITTED
	// whatever the server's default, so a server set to SERIALIZABLE does
	// not start failing them with serialization errors.
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "read committed"
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = defaultMaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	s := &Store{pool: pool, Now: time.Now}
	s.settles.next = func(pending []*settleOp) int { return min(len(pending), maxSettleBatch) }
	s.settles.run = s.runSettleBatch
	s.settles.linger = lingerSettles
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, s.wrap("open: migrate", err)
	}
	return s, nil
}

// Close waits (a bounded time) for the settlements SettleLater queued,
// then closes every connection of the pool.
func (s *Store) Close() error {
	s.later.Drain(laterDrain)
	s.pool.Close()
	return nil
}

// Ping returns EUNAVAILABLE if the server cannot be reached.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return s.wrap("ping", err)
	}
	return nil
}

// migrate applies the embedded migrations in lexical order, each in its own
// transaction, recording them in schema_migrations. The advisory lock makes
// replicas that start together apply each migration exactly once.
func (s *Store) migrate(ctx context.Context) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrationLockID); err != nil {
		return err
	}
	defer func() {
		// A fresh context: the lock must be released even if ctx is done,
		// or the connection would go back to the pool still holding it.
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock($1)`, migrationLockID); err != nil {
			conn.Conn().Close(uctx) // dropping the session drops the lock
		}
	}()

	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		name       text PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return err
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		if err := applyMigration(ctx, conn.Conn(), name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func applyMigration(ctx context.Context, conn *pgx.Conn, name string) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)

	var done bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE name = $1)`, name).Scan(&done); err != nil {
		return err
	}
	if done {
		return nil
	}
	sql, err := migrations.ReadFile(name)
	if err != nil {
		return err
	}
	// Without arguments pgx uses the simple protocol, which runs a file of
	// several statements.
	if _, err := tx.Exec(ctx, string(sql)); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (name) VALUES ($1)`, name); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// inTx runs fn in a READ COMMITTED transaction and commits it. If the
// transaction cannot even begin because a pooled connection died (the server
// restarted), the pool is reset and the begin is tried once more: nothing was
// done yet, so the retry is safe, and the caller need not see a stale
// connection of a server that is back.
func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	// Explicit, so a server whose default_transaction_isolation was changed
	// does not start failing transactions with serialization errors.
	opts := pgx.TxOptions{IsoLevel: pgx.ReadCommitted}
	tx, err := s.pool.BeginTx(ctx, opts)
	if err != nil && isConnLost(err) && !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		s.pool.Reset()
		tx, err = s.pool.BeginTx(ctx, opts)
	}
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// queryRow is pool.QueryRow for one statement outside a transaction. If the
// statement could not even be sent because a pooled connection was dead (the
// server restarted), the pool is reset and the statement tried once more:
// pgconn.SafeToRetry guarantees the server never saw it, so the retry cannot
// run it twice.
func (s *Store) queryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return &retryRow{s: s, ctx: ctx, sql: sql, args: args}
}

// query runs sql and hands its rows to scan, retrying once on a fresh
// connection exactly as queryRow does: only when the statement could not
// even be sent, so it cannot run twice.
func (s *Store) query(ctx context.Context, scan func(pgx.Rows) error, sql string, args ...any) error {
	err := s.queryOnce(ctx, scan, sql, args...)
	if err != nil && pgconn.SafeToRetry(err) && ctx.Err() == nil {
		s.pool.Reset()
		err = s.queryOnce(ctx, scan, sql, args...)
	}
	return err
}

func (s *Store) queryOnce(ctx context.Context, scan func(pgx.Rows) error, sql string, args ...any) error {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if err := scan(rows); err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

type retryRow struct {
	s    *Store
	ctx  context.Context
	sql  string
	args []any
}

func (r *retryRow) Scan(dest ...any) error {
	err := r.s.pool.QueryRow(r.ctx, r.sql, r.args...).Scan(dest...)
	if err != nil && pgconn.SafeToRetry(err) && r.ctx.Err() == nil {
		r.s.pool.Reset()
		err = r.s.pool.QueryRow(r.ctx, r.sql, r.args...).Scan(dest...)
	}
	return err
}

// SQLSTATEs raised by keybrake's own functions (migrations/0002_one_round_trip.sql).
const (
	codeNotFound = "KB404" // no such key or reservation
	codeUnusable = "KB401" // the key is revoked or expired
	codeConflict = "KB409" // the reservation is already final
	// codeSuspended: a reservation of a suspended key (migration 0009).
	codeSuspended = "KB403"
)

// pgCode returns the SQLSTATE of a server error in err's chain, or "".
func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// wrap turns err into what the store returns: keybrake errors pass through,
// unique violations become ECONFLICT, missing rows ENOTFOUND, and a server
// that cannot be reached EUNAVAILABLE. Anything else is wrapped with op as
// context and reads as EINTERNAL.
func (s *Store) wrap(op string, err error) error {
	var kerr *keybrake.Error
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &kerr):
		return err
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("postgres: %s: %w", op, keybrake.Errorf(keybrake.ENOTFOUND, "Not found."))
	case errors.As(err, &pgErr) && pgErr.Code == codeNotFound:
		return fmt.Errorf("postgres: %s: %w", op, keybrake.Errorf(keybrake.ENOTFOUND, "%s", pgErr.Message))
	case errors.As(err, &pgErr) && pgErr.Code == codeSuspended:
		return fmt.Errorf("postgres: %s: %w", op, keybrake.Errorf(keybrake.EFORBIDDEN, "%s", pgErr.Message))
	case errors.As(err, &pgErr) && pgErr.Code == codeConflict:
		return fmt.Errorf("postgres: %s: %w", op, keybrake.Errorf(keybrake.ECONFLICT, "%s", pgErr.Message))
	case errors.As(err, &pgErr) && pgErr.Code == "23505":
		return fmt.Errorf("postgres: %s: %w (%s)", op, keybrake.Errorf(keybrake.ECONFLICT, "Already exists."), pgErr.ConstraintName)
	case isUnavailable(err):
		if isConnLost(err) && !errors.Is(err, context.DeadlineExceeded) {
			// The server went away: dead connections go now rather than
			// failing one request each. (A deadline is the caller's, and
			// says nothing about the other connections.)
			s.pool.Reset()
		}
		return fmt.Errorf("postgres: %s: %w (%v)", op,
			keybrake.Errorf(keybrake.EUNAVAILABLE, "The keybrake store (PostgreSQL) is unavailable; nothing was forwarded. Retry later."), err)
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

// isUnavailable reports whether err means the server could not be reached or
// went away (isConnLost), or did not answer before the caller's deadline.
func isUnavailable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "53300" || pgErr.Code == "57P03") {
		return true // too many connections; the server is starting up
	}
	return isConnLost(err) || errors.Is(err, context.DeadlineExceeded)
}

// isConnLost reports whether err means a connection could not be made or
// broke: a failed dial, a closed socket, a server shutting down.
func isConnLost(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"): // connection_exception
			return true
		case pgErr.Code == "57P01", pgErr.Code == "57P02": // admin or crash shutdown
			return true
		}
		return false
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connectErr):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	case errors.As(err, &netErr):
		return true
	}
	return strings.Contains(err.Error(), "conn closed")
}

// ts prepares a time for storage: PostgreSQL keeps microseconds, so every
// time is truncated the same way on the way in and comes back equal.
func ts(t time.Time) time.Time { return t.Truncate(time.Microsecond).UTC() }

// tsPtr is ts for optional times; nil stays nil (SQL NULL).
func tsPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := ts(*t)
	return &v
}
