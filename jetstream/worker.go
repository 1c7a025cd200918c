package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	jsapi "github.com/nats-io/nats.go/jetstream"

	"github.com/keybrake/keybrake/billing"
	"github.com/keybrake/keybrake/internal/every"
)

// Defaults of Worker's zero fields.
const (
	DefaultAckWait         = 30 * time.Second
	DefaultMaxDeliver      = 10
	DefaultFetchWait       = 5 * time.Second
	DefaultRetryDelay      = 5 * time.Second
	DefaultShutdownTimeout = 30 * time.Second
	DefaultFloorInterval   = 250 * time.Millisecond
)

// Worker consumes a durable pull consumer (AckExplicit) of a stream and hands
// every message body to Handler. It answers the server only from the
// Handler's billing.Result:
//
//   - ActionAck: Ack. The ledger already holds the outcome durably, so the
//     ack is not waited for (no double ack): a lost ack only redelivers the
//     message, which the ledger answers already_done, and waiting for the
//     server's confirmation held a handler for a round trip per event.
//   - ActionRetry: NakWithDelay(Result.Delay); on the consumer's last
//     delivery (NumDelivered ≥ MaxDeliver), a dead letter and Term instead.
//   - ActionDeadLetter: publish a DeadLetter to DeadLetterSubject, then
//     TermWithReason; if the publish fails, NakWithDelay. A message is
//     never dropped.
//
// While Handler runs, the Worker sends InProgress every AckWait/3, so the
// server never redelivers a message whose Stripe call is still in flight.
// Messages the server gives up on without an answer (a worker died on the
// last delivery) are dead-lettered from the MaxDeliver advisory.
//
// Open binds the durable safely (see Open), Close stops fetching and waits
// for the in-flight messages.
type Worker struct {
	JS      jsapi.JetStream // required
	Stream  string          // required; the stream must exist
	Durable string          // required
	// Subject is the consumer's filter subject; "" for every subject of
	// the stream.
	Subject string
	Handler Handler // required; billing.Processor in production

	// Start says where a missing durable starts when no ack floor is
	// recorded. A recorded floor always wins: the durable resumes at
	// floor+1.
	Start StartPolicy
	// Floors records the ack floor; nil means KVFloors in JS.
	Floors FloorStore

	// AckWait and MaxDeliver configure the consumer (an existing durable is
	// updated to them); 0 means DefaultAckWait and DefaultMaxDeliver.
	AckWait    time.Duration
	MaxDeliver int
	// DeadLetterSubject receives the dead letters; a stream must capture
	// it. Required.
	DeadLetterSubject string

	// Concurrency is the number of messages handled at once; 0 means 1.
	// The Worker pulls only as many messages as it has idle handlers, so no
	// message waits unattended in a client buffer while its AckWait runs
	// (dispatch.go).
	Concurrency int
	// FetchWait bounds one pull request; 0 means DefaultFetchWait.
	FetchWait time.Duration
	// RetryDelay is the Nak delay of a retry whose Result.Delay is 0, and
	// after a failed dead-letter publish; 0 means DefaultRetryDelay.
	RetryDelay time.Duration
	// FloorInterval is how long after an ack the ack floor is recorded,
	// the acks of that interval recorded together; 0 means
	// DefaultFloorInterval.
	FloorInterval time.Duration
	// ShutdownTimeout is how long Close waits for in-flight handlers
	// before it cancels their context; 0 means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration

	Logger *slog.Logger     // nil discards
	Now    func() time.Time // the clock of dead letters and floors; time.Now if nil

	// mu guards what bind sets: a rebind runs while the handlers, the
	// floor recorder and the advisory callback read them.
	mu           sync.Mutex
	consumer     jsapi.Consumer
	ackWait      time.Duration
	maxDeliver   int
	stream       jsapi.Stream
	streamCreate time.Time // of the bound stream: recorded in its floors
	rebindMu     sync.Mutex
	advisory     interface{ Unsubscribe() error }

	stop       chan struct{}
	handlerCtx context.Context
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	floorKick  chan struct{}
	lastFloor  uint64 // the floor recordFloor last saw; recordFloors' own
	floorStop  chan struct{}
	floorDone  chan struct{}
	closeOnce  sync.Once
}

// Consumer returns the bound consumer, after Open.
func (w *Worker) Consumer() jsapi.Consumer {
	c, _, _ := w.current()
	return c
}

// Open validates the configuration, binds the durable, records its ack
// floor, subscribes to its MaxDeliver advisories, and starts fetching.
//
// Binding never replays history by accident: an existing durable is used
// where it stands; a missing one is created from the recorded ack floor + 1
// (DeliverByStartSequence), or else from Start; with neither, Open returns
// an error saying so and starts nothing.
func (w *Worker) Open(ctx context.Context) error {
	if err := w.validate(); err != nil {
		return err
	}
	w.defaults()
	if err := w.bind(ctx); err != nil {
		return err
	}
	if err := w.subscribeAdvisory(); err != nil {
		return err
	}
	if err := CheckDurables(ctx, w.JS, w.Stream, w.Durable, w.Subject); err != nil {
		w.Logger.Warn("DUPLICATE BILLING CONSUMERS: "+err.Error(), "stream", w.Stream, "durable", w.Durable)
	}
	w.stop = make(chan struct{})
	w.floorKick = make(chan struct{}, 1)
	w.floorStop, w.floorDone = make(chan struct{}), make(chan struct{})
	w.handlerCtx, w.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go w.recordFloors()
	w.kickFloor()
	msgs, idle := make(chan jsapi.Msg), make(chan struct{}, w.Concurrency)
	w.wg.Add(1 + w.Concurrency)
	go w.dispatch(msgs, idle)
	for range w.Concurrency {
		idle <- struct{}{}
		go w.handleLoop(msgs, idle)
	}
	w.Logger.Info("jetstream worker started", "stream", w.Stream, "durable", w.Durable, "subject", w.Subject,
		"ack_wait", w.ackWait, "max_deliver", w.maxDeliver, "concurrency", w.Concurrency)
	return nil
}

func (w *Worker) validate() error {
	switch {
	case w.JS == nil:
		return errors.New("jetstream worker: no JetStream context")
	case w.Stream == "":
		return errors.New("jetstream worker: stream is required")
	case w.Durable == "":
		return errors.New("jetstream worker: durable is required")
	case w.Handler == nil:
		return errors.New("jetstream worker: handler is required")
	case w.DeadLetterSubject == "":
		return errors.New("jetstream worker: dead_letter_subject is required")
	case w.AckWait < 0:
		return errors.New("jetstream worker: ack_wait must not be negative")
	case w.MaxDeliver < 0:
		return errors.New("jetstream worker: max_deliver must not be negative")
	}
	if w.Subject != "" && subjectsOverlap(w.Subject, w.DeadLetterSubject) {
		return fmt.Errorf("jetstream worker: dead_letter_subject %q overlaps subject %q: dead letters would be consumed as events", w.DeadLetterSubject, w.Subject)
	}
	if err := w.Start.Validate(); err != nil {
		return fmt.Errorf("jetstream worker: %w", err)
	}
	return nil
}

func (w *Worker) defaults() {
	if w.Floors == nil {
		w.Floors = &KVFloors{JS: w.JS}
	}
	if w.AckWait == 0 {
		w.AckWait = DefaultAckWait
	}
	if w.MaxDeliver == 0 {
		w.MaxDeliver = DefaultMaxDeliver
	}
	if w.Concurrency <= 0 {
		w.Concurrency = 1
	}
	if w.FetchWait <= 0 {
		w.FetchWait = DefaultFetchWait
	}
	if w.RetryDelay <= 0 {
		w.RetryDelay = DefaultRetryDelay
	}
	if w.ShutdownTimeout <= 0 {
		w.ShutdownTimeout = DefaultShutdownTimeout
	}
	if w.FloorInterval <= 0 {
		w.FloorInterval = DefaultFloorInterval
	}
	if w.Logger == nil {
		w.Logger = slog.New(slog.DiscardHandler)
	}
	if w.Now == nil {
		w.Now = time.Now
	}
}

// Close stops fetching, waits up to ShutdownTimeout for in-flight handlers
// (then cancels their context and waits for them to return), records the
// ack floor, and unsubscribes. Messages not answered are redelivered after
// AckWait.
func (w *Worker) Close() error {
	if w.stop == nil {
		return nil
	}
	w.closeOnce.Do(func() {
		close(w.stop)
		done := make(chan struct{})
		go func() { w.wg.Wait(); close(done) }()
		t := time.NewTimer(w.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			w.cancel()
			<-done
		}
		w.cancel()
		close(w.floorStop)
		<-w.floorDone
		if w.advisory != nil {
			w.advisory.Unsubscribe()
		}
	})
	return nil
}

// gone reports whether a pull that brought nothing (it failed, or timed
// out idle) did so because the durable is gone. A durable deleted while a
// pull request is pending answers it "consumer deleted" (the caller checks
// that); one deleted while none was pending (between two pulls, or while
// every handler was busy) leaves no one to answer the next pull, which
// fails at once with "no responders" and would again every second: taking
// that for a passing fetch error stalled the worker for good. So any
// unproductive pull is followed by one consumer-info request, which is
// answered "consumer not found" whatever the pull's error was. A failed
// check (the info request timed out under load) is not a verdict: the next
// unproductive pull checks again.
func (w *Worker) gone(cons jsapi.Consumer, err error) bool {
	select {
	case <-w.stop:
		return false
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.FetchWait)
	defer cancel()
	_, ierr := cons.Info(ctx)
	if errors.Is(ierr, jsapi.ErrConsumerNotFound) || errors.Is(ierr, jsapi.ErrConsumerDeleted) {
		return true
	}
	if ierr != nil {
		w.Logger.Debug("jetstream durable not checked; checking again after the next unproductive fetch", "stream", w.Stream, "durable", w.Durable, "fetch_err", err, "err", ierr)
	}
	return false
}

// pause waits d or until Close.
func (w *Worker) pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.stop:
	}
}

// handle runs the Handler on msg, keeping it in progress, and answers the
// server from the result.
func (w *Worker) handle(msg jsapi.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		w.Logger.Error("jetstream message without metadata", "subject", msg.Subject(), "err", err)
		msg.Term()
		return
	}
	_, ackWait, maxDeliver := w.current()
	stopProgress := w.keepInProgress(msg, ackWait)
	res := process(w.handlerCtx, w.Handler, msg.Data())
	stopProgress()
	log := func() *slog.Logger {
		return w.Logger.With("stream", w.Stream, "durable", w.Durable, "stream_seq", md.Sequence.Stream,
			"num_delivered", md.NumDelivered, "key", res.Key, "outcome", res.Outcome, "action", res.Action)
	}
	if res.Action == billing.ActionAck {
		// The common case, kept free of the others' logger and context.
		if err := msg.Ack(); err != nil {
			// The message comes back and the ledger answers already_done.
			log().Warn("jetstream ack not sent; the message will be redelivered", "err", err)
			return
		}
		w.kickFloor()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch res.Action {
	case billing.ActionDeadLetter:
		w.deadLetter(ctx, log(), msg, md, res, res.Reason)
	default:
		if maxDeliver > 0 && md.NumDelivered >= uint64(maxDeliver) {
			w.deadLetter(ctx, log(), msg, md, res, fmt.Sprintf("max deliveries (%d) exhausted: %s", maxDeliver, res.Reason))
			return
		}
		delay := res.Delay
		if delay <= 0 {
			delay = w.RetryDelay
		}
		if err := msg.NakWithDelay(delay); err != nil {
			log().Warn("jetstream nak failed; the message will be redelivered after AckWait", "err", err)
		}
		log().Info("jetstream retry", "delay", delay, "reason", res.Reason)
	}
}

// deadLetter publishes msg's dead letter, then terminates msg; if the
// publish fails, msg is naked and comes back.
func (w *Worker) deadLetter(ctx context.Context, log *slog.Logger, msg jsapi.Msg, md *jsapi.MsgMetadata, res billing.Result, reason string) {
	d := DeadLetter{
		Reason: reason, Outcome: res.Outcome, Key: res.Key, Subject: msg.Subject(),
		Stream: md.Stream, Consumer: md.Consumer, StreamSeq: md.Sequence.Stream,
		NumDelivered: md.NumDelivered, Time: w.Now().UTC(),
	}
	d.setBody(msg.Data())
	if err := publishDeadLetter(ctx, w.JS, w.DeadLetterSubject, d); err != nil {
		log.Error("jetstream dead letter not published; the message will be redelivered", "err", err, "reason", reason)
		msg.NakWithDelay(w.RetryDelay)
		return
	}
	if err := msg.TermWithReason(clip(reason, 1024)); err != nil {
		log.Warn("jetstream term failed; the message will be redelivered and dead-lettered again (deduplicated)", "err", err)
	}
	log.Warn("jetstream dead letter", "reason", reason, "dead_letter_subject", w.DeadLetterSubject)
	w.kickFloor()
}

// keepInProgress sends InProgress every AckWait/3 until stop is called,
// on a timer rather than a goroutine of its own (internal/every).
func (w *Worker) keepInProgress(msg jsapi.Msg, ackWait time.Duration) (stop func()) {
	d := ackWait / 3
	if d <= 0 {
		d = time.Second
	}
	return every.Start(d, func() {
		if err := msg.InProgress(); err != nil {
			w.Logger.Warn("jetstream in-progress failed", "subject", msg.Subject(), "err", err)
		}
	})
}
