package postgres

import (
	"context"
	"slices"
	"sync"
	"time"
)

// groupQueue is a group-commit queue of this process: ops that arrive while
// a batch runs wait here, and when it ends the next batch takes as many of
// them as next allows, in arrival order. One batch runs at a time per
// queue; a lone op still runs at once, alone. Reservations have a queue per
// key, settlements one for the process.
type groupQueue[T comparable] struct {
	next func(pending []T) int // how many of the pending ops the next batch takes
	run  func(batch []T)       // runs a batch and answers every op of it

	// linger, if set, returns how long the next batch may wait for more
	// ops to join it, given the pending ones: zero runs it at once.
	linger func(pending []T) time.Duration

	mu      sync.Mutex
	pending []T
	running bool
}

// wait queues op and waits until it is answered (done closes). A caller
// whose ctx ends while op is still queued gets ctx's error and op never
// runs; once op is in a running batch its caller waits for the batch's
// outcome, which may have recorded it, so that no op is abandoned
// half-known.
func (q *groupQueue[T]) wait(ctx context.Context, op T, done <-chan struct{}) error {
	q.mu.Lock()
	q.pending = append(q.pending, op)
	start := !q.running
	q.running = true
	q.mu.Unlock()
	if start {
		go q.drain()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		q.mu.Lock()
		if i := slices.Index(q.pending, op); i >= 0 {
			q.pending = slices.Delete(q.pending, i, i+1)
			q.mu.Unlock()
			return ctx.Err()
		}
		q.mu.Unlock()
		<-done
		return nil
	}
}

// drain runs the queued ops, batch after batch, until none is left.
func (q *groupQueue[T]) drain() {
	for {
		q.mu.Lock()
		if q.linger != nil {
			if d := q.linger(q.pending); d > 0 {
				q.mu.Unlock()
				time.Sleep(d) // not synchronisation: a batch's time to fill
				q.mu.Lock()
			}
		}
		n := q.next(q.pending)
		if n == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		batch := slices.Clone(q.pending[:n])
		q.pending = slices.Delete(q.pending, 0, n)
		q.mu.Unlock()
		q.run(batch)
	}
}
