package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// TestCheckpointRestartGivesWayToAReader: a log restart (a RESTART
// checkpoint) holds the write lock from its start to its end, so every
// commit waits for it. When a reader still reads an older snapshot, the
// restart must give up within restartBusyTimeout, not wait busyTimeout
// (10 s) for that reader with the writer stopped behind it; once the reader
// is gone, the next restart lets the log start over.
func TestCheckpointRestartGivesWayToAReader(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "kb.db")
	pragmas := []string{fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()), "synchronous(NORMAL)", "wal_autocheckpoint(0)"}
	w, err := openDB(path, pragmas, false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.SetMaxOpenConns(1)
	insert := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if _, err := w.ExecContext(ctx, `INSERT INTO t (x) VALUES (randomblob(2000))`); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, q := range []string{`PRAGMA journal_mode = WAL`, `CREATE TABLE t (x BLOB)`} {
		if _, err := w.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	insert(50)

	// A reader in the middle of a read transaction on the log as it is now.
	r, err := openDB(path, pragmas, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rtx, err := r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := rtx.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 50 {
		t.Fatalf("reader: %d rows, %v", n, err)
	}
	insert(50) // frames the reader's snapshot does not see

	c, err := newCheckpointer(path, pragmas, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	c.restartFrames, c.forceFrames = 1, 1<<30

	start := time.Now()
	c.checkpoint()
	if held := time.Since(start); held > time.Second {
		t.Fatalf("the restart held the write lock %v waiting for a reader; want at most about %v", held, restartBusyTimeout)
	}
	insert(1) // the writer goes on

	if err := rtx.Rollback(); err != nil {
		t.Fatal(err)
	}
	c.checkpoint()
	insert(1) // the first commit after a restart writes the log from its start
	var busy, logFrames, copied int
	if err := w.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &logFrames, &copied); err != nil {
		t.Fatal(err)
	}
	if logFrames > 5 {
		t.Fatalf("after a restart with no reader in the way and one insert the log holds %d frames; want the insert's few (the log did not start over)", logFrames)
	}
	if err := w.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 102 {
		t.Fatalf("after the restarts: %d rows, %v; want 102", n, err)
	}
}

// TestCheckpointOnWriterRestartsTheLog: once the log is long and not fully
// copied, the checkpointer asks the writer, which copies the last frames
// between two group commits, and its next commit starts the log over, with
// no RESTART checkpoint (which holds the write lock while it waits). A
// reader on an older snapshot only keeps the log from starting over: the
// writer neither waits for it nor stops committing, and the next try after
// the reader is gone succeeds. A closed writer falls back to the RESTART
// checkpoint.
func TestCheckpointOnWriterRestartsTheLog(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "kb.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The store's own checkpointer would race this test's: a PASSIVE
	// checkpoint that meets another one taking a reader slot copies less,
	// and the "whole log copied" below failed about once in a dozen -race
	// runs. This test's checkpointer is the only one.
	if err := s.checkpoints.close(); err != nil {
		t.Fatal(err)
	}
	write := func(q string) {
		t.Helper()
		if err := s.batch.write(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, q)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	insert := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			write(`INSERT INTO walr_t (x) VALUES (randomblob(2000))`)
		}
	}
	logFrames := func() int {
		t.Helper()
		var st walState
		if err := s.reader.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&st.busy, &st.logFrames, &st.copied); err != nil {
			t.Fatal(err)
		}
		return st.logFrames
	}
	write(`CREATE TABLE walr_t (x BLOB)`)
	insert(50)

	// A reader in the middle of a read transaction on the log as it is now.
	rtx, err := s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := rtx.QueryRowContext(ctx, `SELECT count(*) FROM walr_t`).Scan(&n); err != nil || n != 50 {
		t.Fatalf("reader: %d rows, %v", n, err)
	}
	insert(50) // frames the reader's snapshot does not see

	pragmas := []string{fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()), "synchronous(NORMAL)", "wal_autocheckpoint(0)"}
	asked := 0
	c, err := newCheckpointer(path, pragmas, func(ctx context.Context) (walState, error) {
		asked++
		return s.checkpointOnWriter(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	c.restartFrames, c.forceFrames = 1, 1<<30

	c.checkpoint()
	if asked != 1 {
		t.Fatalf("the checkpointer asked the writer %d times for a log it could not copy whole; want 1", asked)
	}
	before := logFrames()
	insert(1) // the writer goes on
	if after := logFrames(); after <= before {
		t.Fatalf("with a reader on an older snapshot the log went from %d to %d frames after an insert; want it to grow (it cannot start over under that reader)", before, after)
	}

	if err := rtx.Rollback(); err != nil {
		t.Fatal(err)
	}
	st, err := s.checkpointOnWriter(ctx)
	if err != nil || st.copied != st.logFrames {
		t.Fatalf("the writer's checkpoint with no reader in the way: %+v, %v; want the whole log copied", st, err)
	}
	insert(1) // the first commit after the writer's checkpoint writes the log from its start
	if frames := logFrames(); frames > 5 {
		t.Fatalf("after the writer's checkpoint with no reader in the way and one insert the log holds %d frames; want the insert's few (the log did not start over)", frames)
	}
	if got := c.restarts.Load(); got != 0 {
		t.Fatalf("%d RESTART checkpoints ran; want none below forceFrames while the writer can checkpoint", got)
	}
	if err := s.reader.QueryRowContext(ctx, `SELECT count(*) FROM walr_t`).Scan(&n); err != nil || n != 102 {
		t.Fatalf("after the restarts: %d rows, %v; want 102", n, err)
	}

	// A store being closed has no writer to ask: with the log not fully
	// copied (a reader on an older snapshot again), the checkpointer falls
	// back to a RESTART checkpoint.
	if rtx, err = s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	defer rtx.Rollback()
	if err := rtx.QueryRowContext(ctx, `SELECT count(*) FROM walr_t`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	insert(1)
	s.batch.close()
	c.checkpoint()
	if got := c.restarts.Load(); got != 1 {
		t.Fatalf("%d RESTART checkpoints ran with the writer closed; want 1", got)
	}
}
