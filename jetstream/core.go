package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	jsapi "github.com/nats-io/nats.go/jetstream"

	"github.com/keybrake/keybrake/billing"
)

// Defaults of QueueWorker's zero fields.
const (
	DefaultMaxAttempts   = 5
	DefaultCheckInterval = time.Minute
)

// QueueWorker consumes a Core NATS subject in a queue group, so each event
// reaches one member of the group instead of every subscriber (the seeds'
// fan-out). Core NATS has no acknowledgments and no redelivery, so:
//
//   - ActionAck: nothing to do.
//   - ActionRetry: the QueueWorker itself waits Result.Delay and processes
//     the body again, up to MaxAttempts, then dead-letters it.
//   - ActionDeadLetter: a DeadLetter to DeadLetterSubject, published through
//     JetStream when a stream captures it, else on Core NATS.
//
// An event is lost if no member is subscribed when it is published, or if
// the worker dies while handling it (the ledger keeps its claim, pending,
// for the reconciler): JetStream's Worker is the transport for billing;
// QueueWorker is for deployments that already publish on Core NATS.
//
// When MonitorURL is set, Open and then every CheckInterval run CheckFanOut
// and log at WARN when the subject has other receivers than this group.
type QueueWorker struct {
	Conn    *nats.Conn // required
	Subject string     // required
	Queue   string     // required: the queue group every billing worker joins
	Handler Handler    // required

	DeadLetterSubject string // required
	// MaxAttempts bounds the in-process retries of one message; 0 means
	// DefaultMaxAttempts.
	MaxAttempts int
	// RetryDelay is the wait of a retry whose Result.Delay is 0; 0 means
	// DefaultRetryDelay.
	RetryDelay time.Duration

	// MonitorURL is the server's HTTP monitoring endpoint for CheckFanOut;
	// "" disables the check.
	MonitorURL    string
	CheckInterval time.Duration // 0 means DefaultCheckInterval
	HTTPClient    *http.Client  // for CheckFanOut; nil means http.DefaultClient

	// ShutdownTimeout is how long Close waits for in-flight handlers
	// before it cancels their context; 0 means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	Logger          *slog.Logger     // nil discards
	Now             func() time.Time // the clock of dead letters; time.Now if nil

	js        jsapi.JetStream
	sub       *nats.Subscription
	stop      chan struct{}
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// Open validates the configuration, subscribes in the queue group and, with
// MonitorURL, starts the fan-out check.
func (w *QueueWorker) Open(ctx context.Context) error {
	switch {
	case w.Conn == nil:
		return errors.New("nats queue worker: no connection")
	case w.Subject == "":
		return errors.New("nats queue worker: subject is required")
	case w.Queue == "":
		return errors.New("nats queue worker: queue is required: without a queue group every worker charges every event")
	case w.Handler == nil:
		return errors.New("nats queue worker: handler is required")
	case w.DeadLetterSubject == "":
		return errors.New("nats queue worker: dead_letter_subject is required")
	case subjectsOverlap(w.Subject, w.DeadLetterSubject):
		return fmt.Errorf("nats queue worker: dead_letter_subject %q overlaps subject %q", w.DeadLetterSubject, w.Subject)
	}
	w.defaults()
	js, err := jsapi.New(w.Conn)
	if err != nil {
		return fmt.Errorf("nats queue worker: %w", err)
	}
	w.js = js
	w.stop = make(chan struct{})
	w.ctx, w.cancel = context.WithCancel(context.WithoutCancel(ctx))
	sub, err := w.Conn.QueueSubscribe(w.Subject, w.Queue, w.onMsg)
	if err != nil {
		return fmt.Errorf("nats queue worker: subscribe %s in %s: %w", w.Subject, w.Queue, err)
	}
	if err := w.Conn.Flush(); err != nil {
		sub.Unsubscribe()
		return fmt.Errorf("nats queue worker: subscribe %s in %s: %w", w.Subject, w.Queue, err)
	}
	w.sub = sub
	if w.MonitorURL != "" {
		w.checkFanOut(ctx)
		w.wg.Add(1)
		go w.checkLoop()
	}
	w.Logger.Info("nats queue worker started", "subject", w.Subject, "queue", w.Queue)
	return nil
}

func (w *QueueWorker) defaults() {
	if w.MaxAttempts <= 0 {
		w.MaxAttempts = DefaultMaxAttempts
	}
	if w.RetryDelay <= 0 {
		w.RetryDelay = DefaultRetryDelay
	}
	if w.CheckInterval <= 0 {
		w.CheckInterval = DefaultCheckInterval
	}
	if w.ShutdownTimeout <= 0 {
		w.ShutdownTimeout = DefaultShutdownTimeout
	}
	if w.Logger == nil {
		w.Logger = slog.New(slog.DiscardHandler)
	}
	if w.Now == nil {
		w.Now = time.Now
	}
}

// Close drains the subscription (the messages already received are still
// handled), waits up to ShutdownTimeout for the handler, then cancels it.
func (w *QueueWorker) Close() error {
	if w.stop == nil {
		return nil
	}
	var err error
	w.closeOnce.Do(func() {
		close(w.stop)
		closed := w.sub.StatusChanged(nats.SubscriptionClosed)
		err = w.sub.Drain()
		t := time.NewTimer(w.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-closed:
		case <-t.C:
			w.cancel()
			w.sub.Unsubscribe()
		}
		w.cancel()
		w.wg.Wait()
	})
	return err
}

// onMsg handles one message, retrying in process.
func (w *QueueWorker) onMsg(m *nats.Msg) {
	w.wg.Add(1)
	defer w.wg.Done()
	log := w.Logger.With("subject", m.Subject, "queue", w.Queue)
	for attempt := 1; ; attempt++ {
		res := process(w.ctx, w.Handler, m.Data)
		log := log.With("key", res.Key, "outcome", res.Outcome, "action", res.Action, "attempt", attempt)
		switch {
		case res.Action == billing.ActionAck:
			return
		case res.Action == billing.ActionDeadLetter:
			w.deadLetter(log, m, res, res.Reason, attempt)
			return
		case attempt >= w.MaxAttempts:
			w.deadLetter(log, m, res, fmt.Sprintf("max attempts (%d) exhausted: %s", w.MaxAttempts, res.Reason), attempt)
			return
		}
		delay := res.Delay
		if delay <= 0 {
			delay = w.RetryDelay
		}
		log.Info("nats retry", "delay", delay, "reason", res.Reason)
		if !w.wait(delay) {
			log.Warn("nats queue worker stopped during a retry wait; the event is left to the ledger's pending entries", "reason", res.Reason)
			return
		}
	}
}

// wait waits d, or returns false when the handler context is cancelled.
func (w *QueueWorker) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.ctx.Done():
		return false
	}
}

func (w *QueueWorker) deadLetter(log *slog.Logger, m *nats.Msg, res billing.Result, reason string, attempts int) {
	d := DeadLetter{Reason: reason, Outcome: res.Outcome, Key: res.Key, Subject: m.Subject,
		NumDelivered: uint64(attempts), Time: w.Now().UTC()}
	d.setBody(m.Data)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := publishDeadLetter(ctx, w.js, w.DeadLetterSubject, d)
	if errors.Is(err, jsapi.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		// No stream captures the subject: publish on Core NATS.
		err = w.publishCore(ctx, d)
	}
	if err != nil {
		log.Error("nats dead letter not published", "err", err, "reason", reason, "body", d.Body, "body_base64", d.BodyBase64)
		return
	}
	log.Warn("nats dead letter", "reason", reason, "dead_letter_subject", w.DeadLetterSubject)
}

func (w *QueueWorker) publishCore(ctx context.Context, d DeadLetter) error {
	body, err := jsonMarshal(d)
	if err != nil {
		return err
	}
	m := nats.NewMsg(w.DeadLetterSubject)
	m.Data = body
	m.Header.Set(ReasonHeader, clip(d.Reason, 1024))
	if err := w.Conn.PublishMsg(m); err != nil {
		return err
	}
	return flush(ctx, w.Conn)
}

// CheckFanOut runs CheckFanOut on the worker's subject, for tests and
// health checks.
func (w *QueueWorker) CheckFanOut(ctx context.Context) error {
	return CheckFanOut(ctx, w.HTTPClient, w.MonitorURL, w.Subject)
}

// checkFanOut logs the fan-out check's finding at WARN.
func (w *QueueWorker) checkFanOut(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := w.CheckFanOut(ctx)
	var fe *FanOutError
	switch {
	case errors.As(err, &fe):
		w.Logger.Warn("BILLING FAN-OUT: "+err.Error(), "subject", w.Subject, "receivers", len(fe.Receivers))
	case err != nil:
		w.Logger.Warn("nats fan-out check failed", "subject", w.Subject, "err", err)
	}
}

func (w *QueueWorker) checkLoop() {
	defer w.wg.Done()
	t := time.NewTicker(w.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.checkFanOut(w.ctx)
		}
	}
}
