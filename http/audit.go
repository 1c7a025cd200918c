package http

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/keybrake/keybrake"
)

// auditQueue bounds the events waiting to be written. When it is full,
// requests write their event themselves, which slows them down but never
// drops an event.
const auditQueue = 8192

// auditBatch is the most events written in one transaction.
const auditBatch = 512

// auditLinger is how long the writer waits for more events before writing
// a batch: on a quiet proxy each request would otherwise pay a transaction
// of its own in the background, competing for the CPU with the next
// request. The admin API flushes before it reads, so nobody waits for it.
const auditLinger = 20 * time.Millisecond

// auditLog writes audit events in the background, many per transaction, so
// a request does not wait for a write of its own: on SQLite's single writer
// that write would serialise every request, reads included. The money
// ledger (reservations) is written synchronously and is the source of
// truth; what the audit log can lose is the events of the last few
// milliseconds before a crash (kill -9), never on a clean shutdown, which
// drains the queue.
type auditLog struct {
	store  keybrake.EventService
	logger *slog.Logger
	ch     chan *keybrake.Event
	flush  chan chan struct{}
	done   chan struct{}
	once   sync.Once
	mu     sync.RWMutex // held for reading by add, for writing by close
	closed bool
}

func newAuditLog(store keybrake.EventService, logger *slog.Logger) *auditLog {
	a := &auditLog{store: store, logger: logger, ch: make(chan *keybrake.Event, auditQueue), flush: make(chan chan struct{}), done: make(chan struct{})}
	go a.run()
	return a
}

// add queues e, or writes it at once if the queue is full or closed.
func (a *auditLog) add(e *keybrake.Event) {
	a.mu.RLock()
	if !a.closed {
		select {
		case a.ch <- e:
			a.mu.RUnlock()
			return
		default:
		}
	}
	a.mu.RUnlock()
	a.write([]*keybrake.Event{e})
}

// Flush returns once every event queued before the call is written, so the
// admin API reads its own writes.
func (a *auditLog) Flush() {
	ack := make(chan struct{})
	select {
	case a.flush <- ack:
		<-ack
	case <-a.done:
	}
}

// close drains the queue and stops the writer.
func (a *auditLog) close() {
	a.once.Do(func() {
		a.mu.Lock()
		a.closed = true
		close(a.ch)
		a.mu.Unlock()
		<-a.done
	})
}

func (a *auditLog) run() {
	defer close(a.done)
	batch := make([]*keybrake.Event, 0, auditBatch)
	for {
		select {
		case e, ok := <-a.ch:
			if !ok {
				return
			}
			batch = append(batch[:0], e)
			open := a.linger(&batch)
			a.write(batch)
			if !open {
				return
			}
		case ack := <-a.flush:
			for {
				batch = a.drain(batch[:0], auditBatch)
				if len(batch) == 0 {
					break
				}
				a.write(batch)
			}
			close(ack)
		}
	}
}

// linger collects events for up to auditLinger or until the batch is full.
// A flush request ends the wait early and is answered once the batch and
// everything queued before it are written. It reports false when the queue
// was closed.
func (a *auditLog) linger(batch *[]*keybrake.Event) bool {
	t := time.NewTimer(auditLinger)
	defer t.Stop()
	for len(*batch) < auditBatch {
		select {
		case e, ok := <-a.ch:
			if !ok {
				return false
			}
			*batch = append(*batch, e)
		case <-t.C:
			return true
		case ack := <-a.flush:
			*batch = a.drain(*batch, auditBatch)
			a.write(*batch)
			*batch = (*batch)[:0]
			for {
				b := a.drain(nil, auditBatch)
				if len(b) == 0 {
					break
				}
				a.write(b)
			}
			close(ack)
			return true
		}
	}
	return true
}

// drain appends queued events without blocking, up to max.
func (a *auditLog) drain(batch []*keybrake.Event, max int) []*keybrake.Event {
	for len(batch) < max {
		select {
		case e, ok := <-a.ch:
			if !ok {
				return batch
			}
			batch = append(batch, e)
		default:
			return batch
		}
	}
	return batch
}

func (a *auditLog) write(batch []*keybrake.Event) {
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := a.store.AddEvents(ctx, batch)
	if err == nil {
		return
	}
	if len(batch) == 1 {
		a.lost(batch[0], err)
		return
	}
	// One bad event must not lose the batch: write them one by one.
	a.logger.Error("audit batch failed; writing one by one", "events", len(batch), "err", err)
	for _, e := range batch {
		if err := a.store.AddEvent(ctx, e); err != nil {
			a.lost(e, err)
		}
	}
}

func (a *auditLog) lost(e *keybrake.Event, err error) {
	a.logger.Error("audit event lost", "key_id", e.KeyID, "request_id", e.RequestID, "operation", e.Operation, "decision", e.Decision, "err", err)
}
