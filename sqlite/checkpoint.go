package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
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
// checkpointInterval copies what no reader still needs while writers go on.
//
// Under a steady stream of commits no PASSIVE checkpoint finds the whole log
// copied, so the log would never start over. Once it is longer than
// restartFrames, the checkpointer asks the writer (onWriter) to run one more
// PASSIVE checkpoint itself, between two group commits: nothing commits
// while it copies the few frames written since, so it copies the whole log
// unless a reader still reads an older snapshot, and SQLite's next commit
// then writes the log from its start (walRestartLog: a commit that begins
// on a fully copied log, with no reader on it, restarts it). The writer
// waits for no lock and no reader; a reader in the way only means the log
// starts over a tick later. Only past forceFrames, or with no writer to ask
// (onWriter nil, or the store closing), does it fall back to a RESTART
// checkpoint, which holds the write lock while it waits.
type checkpointer struct {
	db *sql.DB
	// onWriter runs a PASSIVE checkpoint on the writer's connection between
	// two of its commits (Store.checkpointOnWriter); nil: there is none.
	onWriter func(context.Context) (walState, error)
	// restartFrames and forceFrames are walRestartFrames and walForceFrames
	// (tests lower them).
	restartFrames, forceFrames int
	// restarts counts the RESTART checkpoints run (tests read it).
	restarts atomic.Int64
	started  bool // the ticker runs (startCheckpointer)
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
	err      error
}

// walState is what PRAGMA wal_checkpoint returns: whether the checkpoint was
// blocked, the frames in the log and how many of them are copied into the
// database file.
type walState struct{ busy, logFrames, copied int }

// startCheckpointer opens the checkpointer's connection on path and starts
// it; onWriter, if not nil, is how it asks the writer to checkpoint.
func startCheckpointer(path string, pragmas []string, onWriter func(context.Context) (walState, error)) (*checkpointer, error) {
	c, err := newCheckpointer(path, pragmas, onWriter)
	if err != nil {
		return nil, err
	}
	c.started = true
	go c.loop()
	return c, nil
}

// newCheckpointer is startCheckpointer without the ticker: checkpoints run
// only when checkpoint is called (tests).
func newCheckpointer(path string, pragmas []string, onWriter func(context.Context) (walState, error)) (*checkpointer, error) {
	db, err := openDB(path, pragmas, false)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxIdleTime(0)
	c := &checkpointer{db: db, onWriter: onWriter, restartFrames: walRestartFrames, forceFrames: walForceFrames,
		stop: make(chan struct{}), done: make(chan struct{})}
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

// walRestartFrames is the log length (in pages) past which the log is
// made to start over. Under a steady stream of writes a PASSIVE checkpoint
// copies the log but never lets it start over: the next commit always
// lands before the log is found fully copied, so the -wal file grew by
// about 44 KB per charge, 2.2 GB in 50k charges at full speed (measured
// with keybrake bench --growth). About 64 MB at 4 KiB pages.
const walRestartFrames = 16384

// walForceFrames is the log length past which a RESTART checkpoint may make
// the writer wait as long as busyTimeout: about 256 MB at 4 KiB pages,
// reached only if every earlier attempt found a reader in the way.
const walForceFrames = 4 * walRestartFrames

// walSizeLimit is the writer's journal_size_limit: the size in bytes the
// -wal file is cut back to when the log starts over. The log starts over
// past walRestartFrames frames, plus what was written since the last tick
// (at full speed ~36,000 frames a second), so it stays under walForceFrames
// frames: cutting the file back at every restart, as a 64 MB limit did,
// put an ftruncate of tens of MB in the first commit of every new log and
// had the writer grow the file again block by block (the first commit after
// a restart took 30–60 ms on a busy 2-core machine; docs/performance.md,
// "SQLite open-loop tail (walr)"). The file still shrinks after a burst
// that left it longer than this.
const walSizeLimit = walForceFrames * pageSize

// restartBusyTimeout bounds how long a RESTART checkpoint below
// walForceFrames waits, first for the writer's lock and then, holding it,
// for the readers of the old log to finish. A RESTART checkpoint holds the
// write lock from its start to its end, so every commit waits while it
// does: with the connection's busyTimeout (10 s) a restart that met one slow
// reader (an export, a long admin listing) would stop every charge for
// seconds. Giving up costs nothing: the next tick tries again.
const restartBusyTimeout = 50 * time.Millisecond

// catchUpFrames is how few frames the checkpointer's own PASSIVE
// checkpoints leave uncopied before it asks the writer for the last ones:
// the writer's pause is its copy of these and the two fsyncs.
const catchUpFrames = 256

// checkpoint runs one PASSIVE checkpoint, which never waits and never
// blocks a writer; when the log is longer than restartFrames it makes the
// log start over: PASSIVE again until few frames are left to copy (at most
// three times), then the last ones on the writer (onWriter), or a RESTART
// checkpoint (restart). The writer's journal_size_limit trims the file
// back to walSizeLimit if it grew past it. RESTART, not TRUNCATE: truncating the
// file under the write lock, and the writer growing it again page by page,
// was the largest stall of a capped charge (keybrake bench --ops charge
// --concurrency 64 --rate 1000 --duration 30s: p99 71 ms and max 251 ms
// with TRUNCATE, 24–29 ms and 53–101 ms with RESTART, 9 ms and 27 ms with no
// restart at all); and the RESTART itself, with its busy handler sleeping
// 1, 2, 5… ms while it holds the write lock, was most of what remained
// (docs/performance.md, "SQLite open-loop tail (walr)"). A failure (a busy
// database) is logged at debug level: the next tick tries again.
func (c *checkpointer) checkpoint() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := c.db.Conn(ctx)
	if err != nil {
		slog.Debug("sqlite checkpoint: no connection; will retry", "err", err)
		return
	}
	defer conn.Close()
	var st walState
	for i := 0; i < 3; i++ {
		if err := conn.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&st.busy, &st.logFrames, &st.copied); err != nil {
			slog.Debug("sqlite checkpoint failed; will retry", "err", err)
			return
		}
		if st.logFrames < c.restartFrames || st.logFrames-st.copied <= catchUpFrames {
			break
		}
	}
	if st.logFrames < c.restartFrames || st.copied == st.logFrames {
		return // short, or fully copied: the next commit starts it over by itself
	}
	if st.logFrames < c.forceFrames && c.onWriter != nil {
		w, err := c.onWriter(ctx)
		if err == nil {
			if w.copied < w.logFrames {
				slog.Debug("sqlite log restart: a reader still reads an older snapshot; will retry", "frames", w.logFrames, "copied", w.copied)
			}
			return
		}
		slog.Debug("sqlite log restart on the writer failed; restarting with a checkpoint", "err", err)
	}
	c.restart(ctx, conn, st.logFrames)
}

// restart runs a RESTART checkpoint, which copies what is left of the log
// and waits for the readers of the old log, holding the write lock, so the
// next commit starts the log over. It waits at most restartBusyTimeout for
// the writer and the readers (busyTimeout once the log is past forceFrames,
// so it cannot grow without bound).
func (c *checkpointer) restart(ctx context.Context, conn *sql.Conn, logFrames int) {
	c.restarts.Add(1)
	wait := restartBusyTimeout
	if logFrames >= c.forceFrames {
		wait = busyTimeout
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", wait.Milliseconds())); err != nil {
		slog.Debug("sqlite log restart: busy_timeout", "err", err)
		return
	}
	defer conn.ExecContext(context.Background(), fmt.Sprintf("PRAGMA busy_timeout = %d", busyTimeout.Milliseconds()))
	var st walState
	if err := conn.QueryRowContext(ctx, `PRAGMA wal_checkpoint(RESTART)`).Scan(&st.busy, &st.logFrames, &st.copied); err != nil {
		slog.Debug("sqlite log restart failed; will retry", "err", err)
	}
}

// checkpointOnWriter runs a PASSIVE checkpoint on the writer's connection
// between two group commits (batcher.between): with no commit landing while
// it runs, it copies the whole log unless a reader still reads an older
// snapshot, and then the writer's next commit starts the log over.
func (s *Store) checkpointOnWriter(ctx context.Context) (walState, error) {
	var st walState
	err := s.batch.between(ctx, func() error {
		return s.writer.QueryRowContext(context.Background(), `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&st.busy, &st.logFrames, &st.copied)
	})
	return st, err
}

// close stops the checkpointer and runs a last checkpoint; closing again
// returns the first close's error.
func (c *checkpointer) close() error {
	c.once.Do(func() {
		close(c.stop)
		if c.started {
			<-c.done
		}
		c.checkpoint()
		c.err = c.db.Close()
	})
	return c.err
}
