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
//
// The batcher has no goroutine of its own: every write queues itself and
// then either is answered or becomes the leader, the one goroutine that
// commits, and commits whatever is queued (its own write among them, unless
// an earlier leader took it). A write that finds the writer idle is so
// committed on its caller's goroutine, and one that waits is woken once,
// answered or made leader. A goroutine of the batcher's own cost each write
// two hand-offs (waking the batcher, then being woken by it): about 100 µs
// of a reservation's 280 at one client on a 2-core VM (docs/performance.md,
// "SQLite at one client, step by step").
type batcher struct {
	s      *Store
	ops    chan *writeOp
	lead   chan struct{} // holds a token while a leader commits
	mu     sync.RWMutex  // read-held by every write until it is answered
	closed bool
	batch  []*writeOp // reused by the leader
}

func newBatcher(s *Store) *batcher {
	return &batcher{s: s, ops: make(chan *writeOp, maxBatch), lead: make(chan struct{}, 1), batch: make([]*writeOp, 0, maxBatch)}
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

// between runs fn after the batch being committed and before the next one
// begins, with no write transaction open, and returns its error: while fn
// runs, nothing commits. The WAL checkpoint that lets the log start over
// runs here (checkpoint.go).
func (b *batcher) between(ctx context.Context, fn func() error) error {
	return b.queue(ctx, &writeOp{idle: fn, done: make(chan struct{})})
}

// queue queues op and waits for its outcome, committing batches itself
// whenever no other goroutine is.
func (b *batcher) queue(ctx context.Context, op *writeOp) error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return keybrake.Errorf(keybrake.EUNAVAILABLE, "The keybrake store (SQLite) is closed.")
	}
	select {
	case b.ops <- op:
	case <-ctx.Done():
		return ctx.Err()
	}
	// Once queued, the op is answered: its outcome must not be abandoned
	// half-known, since the commit may make it durable.
	for {
		select {
		case <-op.done:
			return op.err
		case b.lead <- struct{}{}:
			b.lead1(op)
		}
	}
}

// lead1 commits one batch as the leader, unless op was answered by the
// leader before, and lets go of the leadership even if a write panics: the
// panic goes on up the caller (an HTTP handler's is recovered by net/http),
// and the writes queued behind it still find a leader.
func (b *batcher) lead1(op *writeOp) {
	defer func() { <-b.lead }()
	select {
	case <-op.done: // answered by the leader before
	default:
		b.run()
	}
}

// close refuses writes from now on, once every write queued is answered.
func (b *batcher) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
}

// run commits the writes queued, up to a batch, or runs an op queued to
// run between commits, and answers each. The caller is the leader.
func (b *batcher) run() {
	var op *writeOp
	select {
	case op = <-b.ops:
	default:
		return
	}
	var unanswered []*writeOp
	defer func() {
		if unanswered == nil {
			return
		}
		// A write panicked: its transaction was rolled back (commit's
		// deferred Rollback), so nothing of the batch is durable. Each
		// write is answered with that before the panic goes on, so no
		// caller waits for an answer that will never come.
		p := recover()
		err := keybrake.Errorf(keybrake.EUNAVAILABLE, "A write of its group commit panicked; nothing of it was committed: %v", p)
		for _, w := range unanswered {
			w.err = err
			close(w.done)
		}
		clear(b.batch)
		panic(p)
	}()
	if op.idle == nil {
		b.batch, op = b.gather(append(b.batch[:0], op))
		unanswered = b.batch
		if op != nil { // to run after the batch: unanswered too if it panics
			unanswered = append(unanswered[:len(unanswered):len(unanswered)], op)
		}
		b.commit(b.batch)
		unanswered = nil
		for _, w := range b.batch {
			close(w.done)
		}
		clear(b.batch)
	}
	if op != nil {
		unanswered = []*writeOp{op}
		op.err = op.idle()
		unanswered = nil
		close(op.done)
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
		case op := <-b.ops:
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
