package jetstream

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	jsapi "github.com/nats-io/nats.go/jetstream"
)

// The Worker's fetching. One goroutine pulls, Concurrency goroutines
// handle. The puller asks the server for as many messages as there are idle
// handlers at that moment, never more, and hands each message to an idle
// handler as it arrives, so no message waits unattended in a client buffer
// while its AckWait runs (as with one Next per handler), but one pull
// request serves every handler that went idle during the previous one:
// under load the pulls batch themselves, where a Next per handler cost a
// subscription, a request and an unsubscribe for every message (a third of
// the worker's time in the issue 16 profile).

// dispatch pulls messages for idle handlers until Close, then closes msgs.
// idle holds one token per idle handler.
func (w *Worker) dispatch(msgs chan<- jsapi.Msg, idle chan struct{}) {
	defer w.wg.Done()
	defer close(msgs)
	for {
		select {
		case <-w.stop:
			return
		case <-idle:
		}
		n := 1 + drain(idle)
		got, err := w.pull(n, msgs)
		for range n - got {
			idle <- struct{}{}
		}
		if got > 0 {
			continue
		}
		cons, _, _ := w.current()
		if err == nil {
			err = jsapi.ErrNoMessages
		}
		if errors.Is(err, jsapi.ErrConsumerDeleted) || errors.Is(err, jsapi.ErrConsumerNotFound) || w.gone(cons, err) {
			w.rebind(cons)
			continue
		}
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, jsapi.ErrNoMessages) && !errors.Is(err, nats.ErrTimeout) {
			w.Logger.Warn("jetstream fetch", "stream", w.Stream, "durable", w.Durable, "err", err)
			w.pause(time.Second)
		}
	}
}

// pull fetches up to n messages, giving up after FetchWait or at Close, and
// sends each to msgs as it arrives. It returns how many it sent and the
// pull's error.
func (w *Worker) pull(n int, msgs chan<- jsapi.Msg) (int, error) {
	cons, _, _ := w.current()
	ctx, cancel := context.WithTimeout(context.Background(), w.FetchWait)
	defer cancel()
	go func() {
		select {
		case <-w.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	batch, err := cons.Fetch(n, jsapi.FetchContext(ctx))
	if err != nil {
		return 0, err
	}
	got := 0
	for msg := range batch.Messages() {
		msgs <- msg
		got++
	}
	return got, batch.Error()
}

// handleLoop handles the messages of msgs, one at a time, and says when it
// is idle.
func (w *Worker) handleLoop(msgs <-chan jsapi.Msg, idle chan<- struct{}) {
	defer w.wg.Done()
	for msg := range msgs {
		w.handle(msg)
		idle <- struct{}{}
	}
}

// drain takes every token left in c without waiting and returns how many.
func drain(c chan struct{}) int {
	n := 0
	for {
		select {
		case <-c:
			n++
		default:
			return n
		}
	}
}
