package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// checkpointInterval is how often the background checkpointer copies the
// write-ahead log back into the database file.
const checkpointInterval = time.Second

// checkpointer runs WAL checkpoints on a connection of its own, so they never
// run inline on the writer. SQLite's automatic checkpoint (wal_autocheckpoint)
// runs inside the commit that crosses the threshold, on the only writer: that
// commit, and every write queued behind it, waits for the copy and the fsync
// of the database file, stalls that grow with the database. Here the writer
// has wal_autocheckpoint off, and a PASSIVE checkpoint every
// checkpointInterval copies what no reader still needs while writers go on;
// once a checkpoint has copied the whole log, the next write starts it over
// from the beginning, so the log stays bounded.
type checkpointer struct {
	db *sql.DB
	// restartFrames and forceFrames are walRestartFrames and walForceFrames
	// (tests lower them).
	restartFrames, forceFrames int
	stop                       chan struct{}
	done                       chan struct{}
	once                       sync.Once
	err                        error
}

// startCheckpointer opens the checkpointer's connection on path and starts
// it.
func startCheckpointer(path, pragmas string) (*checkpointer, error) {
	db, err := sql.Open("sqlite", path+"?"+pragmas)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxIdleTime(0)
	c := &checkpointer{db: db, restartFrames: walRestartFrames, forceFrames: walForceFrames,
		stop: make(chan struct{}), done: make(chan struct{})}
	go c.loop()
	return c, nil
}

func (c *checkpointer) loop() {
	defer close(c.done)
	t := time.NewTicker(checkpointInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.checkpoint()
		}
	}
}

// walRestartFrames is the log length (in pages) past which a checkpoint
// also restarts the log. Under a steady stream of writes a PASSIVE
// checkpoint copies the log but never lets it start over: the next commit
// always lands before the log is found fully copied, so the -wal file grew
// by about 44 KB per charge, 2.2 GB in 50k charges at full speed (measured
// with keybrake bench --growth). About 64 MB at 4 KiB pages.
const walRestartFrames = 16384

// walForceFrames is the log length past which a restart may make the
// writer wait as long as busyTimeout: about 256 MB at 4 KiB pages, reached
// only if every restart under walForceFrames found a reader in the way.
const walForceFrames = 4 * walRestartFrames

// restartBusyTimeout bounds how long a restart waits, first for the
// writer's lock and then, holding it, for the readers of the old log to
// finish. A RESTART checkpoint holds the write lock from its start to its
// end, so every commit waits while it does: with the connection's
// busyTimeout (10 s) a restart that met one slow reader (an export, a long
// admin listing) would stop every charge for seconds. Giving up costs
// nothing: the next tick tries again.
const restartBusyTimeout = 50 * time.Millisecond

// checkpoint runs one PASSIVE checkpoint, which never waits and never
// blocks a writer, then, when the log is longer than restartFrames, a
// RESTART one that copies the few pages the PASSIVE one left, so the next
// commit starts the log over from its beginning (the writer's
// journal_size_limit trims the file back to 64 MB if it grew past it).
// RESTART, not TRUNCATE: truncating the file under the write lock, and the
// writer growing it again page by page, was the largest stall of a capped
// charge (keybrake bench --ops charge --concurrency 64 --rate 1000
// --duration 30s: p99 71 ms and max 251 ms with TRUNCATE, 24–29 ms and
// 53–101 ms with RESTART, 9 ms and 27 ms with no restart at all). The
// RESTART waits at most restartBusyTimeout for the writer and the readers
// (busyTimeout once the log is past forceFrames, so it cannot grow
// without bound). A failure (a busy database) is logged at debug level:
// the next tick tries again.
func (c *checkpointer) checkpoint() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := c.db.Conn(ctx)
	if err != nil {
		slog.Debug("sqlite checkpoint: no connection; will retry", "err", err)
		return
	}
	defer conn.Close()
	var busy, logFrames, copied int
	if err := conn.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &logFrames, &copied); err != nil {
		slog.Debug("sqlite checkpoint failed; will retry", "err", err)
		return
	}
	if logFrames < c.restartFrames {
		return
	}
	wait := restartBusyTimeout
	if logFrames >= c.forceFrames {
		wait = busyTimeout
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", wait.Milliseconds())); err != nil {
		slog.Debug("sqlite log restart: busy_timeout", "err", err)
		return
	}
	defer conn.ExecContext(context.Background(), fmt.Sprintf("PRAGMA busy_timeout = %d", busyTimeout.Milliseconds()))
	if err := conn.QueryRowContext(ctx, `PRAGMA wal_checkpoint(RESTART)`).Scan(&busy, &logFrames, &copied); err != nil {
		slog.Debug("sqlite log restart failed; will retry", "err", err)
	}
}

// close stops the checkpointer and runs a last checkpoint; closing again
// returns the first close's error.
func (c *checkpointer) close() error {
	c.once.Do(func() {
		close(c.stop)
		<-c.done
		c.checkpoint()
		c.err = c.db.Close()
	})
	return c.err
}
