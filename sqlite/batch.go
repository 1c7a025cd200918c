package sqlite

import (
	"context"
	"database/sql"
	"runtime"
	"sync"

	"github.com/keybrake/keybrake"
)

// The savepoint around each write of a batch, prepared like the hot
// statements: SQLite would otherwise parse three statements more per write.
const (
	qSavepoint  = `SAVEPOINT op`
	qRollbackTo = `ROLLBACK TO op`
	qRelease    = `RELEASE op`
)

// maxBatch bounds the writes committed together.
const maxBatch = 64

// writeOp is one write of a batch: run does its statements inside the
// batch's transaction, within a savepoint of its own. An op with idle
// instead of run is no write: the batcher runs it alone, between two
// commits, with no transaction open (between).
type writeOp struct {
	run   func(tx *sql.Tx) error
	alone func() error // optional: the same write committed alone, cheaper than a transaction for one statement
	idle  func() error
	err   error
	done  chan struct{}
}

// batcher commits concurrent writes together (group commit). SQLite has one
// writer, and most of a small write transaction's cost is beginning and
// committing it (taking the write lock, appending the pages to the WAL):
// shared by a batch, it is paid once. Each write runs in a savepoint, so a
// failing one is rolled back alone, and none is answered before the commit
// that makes it durable. The ops of a batch run in arrival order, one after
// the other, so each sees the ones before it: a cap check still sees every
// reservation made before it.
type batcher struct {
	s      *Store
	ops    chan *writeOp
	mu     sync.RWMutex
	closed bool
	done   chan struct{}
}

func newBatcher(s *Store) *batcher {
	b := &batcher{s: s, ops: make(chan *writeOp, maxBatch), done: make(chan struct{})}
	go b.loop()
	return b
}

// write runs fn in a batch and returns its error, or the commit's.
func (b *batcher) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return b.writeAlone(ctx, fn, nil)
}

// writeAlone is write for a single statement: when the batch holds only
// this write, alone runs instead, committing by itself.
func (b *batcher) writeAlone(ctx context.Context, fn func(tx *sql.Tx) error, alone func() error) error {
	return b.queue(ctx, &writeOp{run: fn, alone: alone, done: make(chan struct{})})
}

// between runs fn on the batcher's goroutine after the batch being
// committed and before the next one begins, with no write transaction
// open, and returns its error: while fn runs, nothing commits. The WAL
// checkpoint that lets the log start over runs here (checkpoint.go).
func (b *batcher) between(ctx context.Context, fn func() error) error {
	return b.queue(ctx, &writeOp{idle: fn, done: make(chan struct{})})
}

// queue hands op to the batcher and waits for its outcome.
func (b *batcher) queue(ctx context.Context, op *writeOp) error {
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		return keybrake.Errorf(keybrake.EUNAVAILABLE, "The keybrake store (SQLite) is closed.")
	}
	select {
	case b.ops <- op:
	case <-ctx.Done():
		b.mu.RUnlock()
		return ctx.Err()
	}
	b.mu.RUnlock()
	// Once queued, the op is answered: its outcome must not be abandoned
	// half-known, since the commit may make it durable.
	<-op.done
	return op.err
}

func (b *batcher) close() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.ops)
	}
	b.mu.Unlock()
	<-b.done
}

func (b *batcher) loop() {
	defer close(b.done)
	batch := make([]*writeOp, 0, maxBatch)
	for op := range b.ops {
		if op.idle == nil {
			batch, op = b.gather(append(batch[:0], op))
			b.commit(batch)
			for _, w := range batch {
				close(w.done)
			}
		}
		if op != nil {
			op.err = op.idle()
			close(op.done)
		}
	}
}

// gather adds to batch the writes already queued, up to maxBatch. It stops
// at an op run between commits and returns it, to run after this batch.
func (b *batcher) gather(batch []*writeOp) ([]*writeOp, *writeOp) {
	if len(b.ops) == 0 {
		// Let the goroutines about to write queue first: one yield
		// (microseconds when nothing else is runnable) took the
		// billing worker's batches from 1.35 writes to 5.5, and
		// each commit writes its pages to the WAL once for all.
		runtime.Gosched()
	}
	for len(batch) < maxBatch {
		select {
		case op, ok := <-b.ops:
			if !ok {
				return batch, nil
			}
			if op.idle != nil {
				return batch, op
			}
			batch = append(batch, op)
		default:
			return batch, nil
		}
	}
	return batch, nil
}

// commit runs a batch in one transaction. Statements run without the
// callers' contexts: interrupting one statement would roll back the whole
// transaction, every other caller's write with it.
func (b *batcher) commit(batch []*writeOp) {
	ctx := context.Background()
	if len(batch) == 1 && batch[0].alone != nil {
		batch[0].err = batch[0].alone()
		return
	}
	tx, err := b.s.beginWrite(ctx)
	if err != nil {
		for _, op := range batch {
			op.err = err
		}
		return
	}
	defer tx.Rollback()
	if len(batch) == 1 {
		// A write alone needs no savepoint, but it is all or nothing too:
		// one that fails is rolled back, never committed half done.
		if batch[0].err = batch[0].run(tx); batch[0].err != nil {
			return
		}
	} else {
		for _, op := range batch {
			if _, err := b.s.txExec(ctx, tx, qSavepoint); err != nil {
				op.err = wrap(err, "savepoint")
				continue
			}
			if op.err = op.run(tx); op.err != nil {
				if _, err := b.s.txExec(ctx, tx, qRollbackTo); err != nil {
					// The transaction is in an unknown state: fail the batch.
					for _, o := range batch {
						o.err = wrap(err, "rollback to savepoint")
					}
					return
				}
			}
			if _, err := b.s.txExec(ctx, tx, qRelease); err != nil {
				for _, o := range batch {
					o.err = wrap(err, "release savepoint")
				}
				return
			}
		}
	}
	if err := tx.Commit(); err != nil {
		err = wrap(err, "commit")
		for _, op := range batch {
			if op.err == nil {
				op.err = err
			}
		}
	}
}
