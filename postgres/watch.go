package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
)

var _ keybrake.KeyWatcher = (*Store)(nil)

// Reconnection backoff of the key watcher after its connection is lost.
const (
	watchBackoffMin = 100 * time.Millisecond
	watchBackoffMax = 5 * time.Second
)

// WatchKeys calls fn with the ID of every key updated or revoked after the
// call, by any replica sharing the database, until ctx ends. A trigger on
// keys (migrations/0003_key_notify.sql) sends NOTIFY on every change, on
// commit; WatchKeys LISTENs on a dedicated connection, outside the pool.
//
// When that connection is lost, notifications sent meanwhile are lost too:
// WatchKeys calls fn("") (drop every cached key), reconnects with backoff,
// and once it listens again calls fn("") once more, since keys may have
// changed between the two. It returns once listening has started, or
// EUNAVAILABLE if the server cannot be reached.
func (s *Store) WatchKeys(ctx context.Context, fn func(keyID string)) error {
	conn, channel, err := s.listen(ctx)
	if err != nil {
		return s.wrap("watch keys", err)
	}
	go s.watch(ctx, conn, channel, fn)
	return nil
}

// listen opens a connection of its own and LISTENs on the channel of the
// keys table's schema, the one the trigger notifies.
func (s *Store) listen(ctx context.Context) (*pgx.Conn, string, error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, "", err
	}
	var schema string
	if err := conn.QueryRow(ctx, `SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = 'keys'::regclass`).Scan(&schema); err != nil {
		conn.Close(context.Background())
		return nil, "", err
	}
	channel := watchChannel(schema)
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		conn.Close(context.Background())
		return nil, "", err
	}
	return conn, channel, nil
}

// watch delivers notifications until ctx ends, reconnecting when the
// connection is lost.
func (s *Store) watch(ctx context.Context, conn *pgx.Conn, channel string, fn func(string)) {
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	backoff := watchBackoffMin
	for {
		n, err := conn.WaitForNotification(ctx)
		if err == nil {
			if n.Channel == channel {
				fn(n.Payload)
			}
			continue
		}
		if ctx.Err() != nil {
			return
		}
		// Lost: whatever was sent meanwhile is gone.
		conn.Close(context.Background())
		conn = nil
		fn("")
		for conn == nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			c, _, err := s.listen(ctx)
			if err != nil {
				backoff = min(2*backoff, watchBackoffMax)
				continue
			}
			conn, backoff = c, watchBackoffMin
		}
		// Listening again: drop what was cached between the loss and now.
		fn("")
	}
}

// watchChannel is the NOTIFY channel of the keys table in schema, as the
// trigger names it.
func watchChannel(schema string) string { return fmt.Sprintf("keybrake_keys:%s", schema) }
