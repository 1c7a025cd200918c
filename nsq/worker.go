package nsq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	gonsq "github.com/nsqio/go-nsq"

	"github.com/keybrake/keybrake/billing"
)

// Defaults of Worker's zero fields.
const (
	DefaultMaxAttempts     = 10
	DefaultMsgTimeout      = 60 * time.Second
	DefaultMaxRequeueDelay = 15 * time.Minute
	DefaultShutdownTimeout = 30 * time.Second
)

// Worker consumes a topic's channel and hands every message body to Handler.
// It answers nsqd only from the Handler's billing.Result, never on its own:
//
//   - ActionAck: FIN (the ledger holds the outcome).
//   - ActionRetry: REQ after Result.Delay (or Backoff), without consumer-wide
//     backoff; once the message's Attempts reached MaxAttempts, a dead letter.
//   - ActionDeadLetter: publish a DeadLetter to DeadLetterTopic, then FIN; if
//     the publish fails, REQ. A message is never dropped.
//
// While Handler runs, the Worker TOUCHes the message every MsgTimeout/3, so a
// slow Stripe call never lets nsqd redeliver the message to another worker
// (up to nsqd's --max-msg-timeout, 15 minutes by default, after which nsqd
// requeues regardless and the ledger's lease keeps the second delivery off
// Stripe).
//
// Set the fields, then call Open; Close stops taking messages and waits for
// the in-flight ones.
type Worker struct {
	Topic   string // required
	Channel string // required

	// NSQDAddrs are nsqd TCP addresses to consume from directly;
	// LookupdAddrs are nsqlookupd HTTP addresses to discover them. Exactly
	// one of the two must be set.
	NSQDAddrs    []string
	LookupdAddrs []string

	Handler Handler // required; billing.Processor in production

	// MaxAttempts is the delivery count at which a message that still asks
	// for a retry goes to the dead-letter topic instead. 0 means
	// DefaultMaxAttempts.
	MaxAttempts uint16
	// DeadLetterTopic receives the dead letters; "" means Topic + ".dead".
	DeadLetterTopic string
	// Producer publishes the dead letters. nil means a producer per nsqd,
	// publishing to the nsqd that delivered the message.
	Producer DeadLetterPublisher

	// MsgTimeout is the message timeout the Worker asks nsqd for (the
	// IDENTIFY msg_timeout, at least 1s and at most nsqd's
	// --max-msg-timeout). 0 means DefaultMsgTimeout.
	MsgTimeout time.Duration
	// Backoff is the requeue delay of a retry whose Result.Delay is 0, from
	// the message's Attempts. nil means DefaultBackoff.
	Backoff func(attempts uint16) time.Duration
	// MaxRequeueDelay caps every requeue delay. 0 means
	// DefaultMaxRequeueDelay (nsqd clamps to its --max-req-timeout too).
	MaxRequeueDelay time.Duration
	// ShutdownTimeout is how long Close waits for in-flight handlers before
	// it cancels their context. 0 means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Concurrency is the number of messages handled at once; it is also the
	// consumer's max-in-flight, so no message waits untouched in a buffer.
	// 0 means 1.
	Concurrency int

	// Config, when set, is the base go-nsq configuration (TLS, auth,
	// lookupd poll interval…). The Worker copies it and overrides
	// MaxInFlight, MsgTimeout, MaxAttempts and MaxBackoffDuration.
	Config *gonsq.Config
	// Logger receives the Worker's and go-nsq's logs. nil discards them.
	Logger *slog.Logger
	// OnResponse, when set, is called after each message was answered. It
	// must not block.
	OnResponse func(Response)

	consumer *gonsq.Consumer
	ctx      context.Context
	cancel   context.CancelFunc
	inflight sync.WaitGroup
	closed   sync.Once
	closeErr error

	mu        sync.Mutex
	producers map[string]*gonsq.Producer

	acked, retried, deadLettered, failed atomic.Int64
}

// Verb is what the Worker told nsqd about a message.
type Verb string

// Verbs of Response.
const (
	VerbFinish     Verb = "FIN"         // acknowledged
	VerbRequeue    Verb = "REQ"         // requeued for a retry
	VerbDeadLetter Verb = "dead_letter" // published to the dead-letter topic, then FIN
)

// Response describes how the Worker answered one delivery.
type Response struct {
	Delivery Delivery
	Result   billing.Result
	Verb     Verb
	Delay    time.Duration // for VerbRequeue
	// Err is why a dead letter could not be published (the message was
	// requeued instead), or nil.
	Err error
}

// Delivery is NSQ's metadata of one delivery, given to the Handler through
// its context (see DeliveryFrom) for logs and tests. It must never feed an
// idempotency key: it changes on every redelivery.
type Delivery struct {
	ID       string
	Attempts uint16
	NSQD     string
	// Timestamp is when nsqd received the message (unix nanoseconds).
	Timestamp int64
}

type deliveryKey struct{}

// DeliveryFrom returns the Delivery of the message being handled with ctx.
func DeliveryFrom(ctx context.Context) (Delivery, bool) {
	d, ok := ctx.Value(deliveryKey{}).(Delivery)
	return d, ok
}

// WorkerStats counts the Worker's answers since Open.
type WorkerStats struct {
	Acked        int64 // FIN after ActionAck
	Retried      int64 // REQ after ActionRetry or a failed dead-letter publish
	DeadLettered int64 // dead letter published, then FIN
	PublishFails int64 // dead letters that could not be published
}

// Stats returns the Worker's counters.
func (w *Worker) Stats() WorkerStats {
	return WorkerStats{Acked: w.acked.Load(), Retried: w.retried.Load(), DeadLettered: w.deadLettered.Load(), PublishFails: w.failed.Load()}
}

// DefaultBackoff doubles from 1s with each attempt, up to 5 minutes.
func DefaultBackoff(attempts uint16) time.Duration {
	d := time.Second
	for i := uint16(1); i < attempts && d < 5*time.Minute; i++ {
		d *= 2
	}
	return min(d, 5*time.Minute)
}

// Open validates the Worker, fills in defaults, and starts consuming. It
// returns an error naming the field when the configuration is invalid, or
// when no nsqd or nsqlookupd could be reached.
func (w *Worker) Open() error {
	if err := w.validate(); err != nil {
		return err
	}
	w.setDefaults()
	if !gonsq.IsValidTopicName(w.DeadLetterTopic) {
		return fmt.Errorf("nsq worker: the default DeadLetterTopic %q is not a valid topic name; set DeadLetterTopic", w.DeadLetterTopic)
	}
	cfg := gonsq.NewConfig()
	if w.Config != nil {
		c := *w.Config
		cfg = &c
	}
	cfg.MaxInFlight = w.Concurrency
	cfg.MsgTimeout = w.MsgTimeout
	// The Worker decides what an exhausted message becomes (a dead letter);
	// go-nsq would silently FIN it.
	cfg.MaxAttempts = 0
	// A retry means one event's outcome is unknown, not that the consumer
	// should stop taking the others.
	cfg.MaxBackoffDuration = 0
	c, err := gonsq.NewConsumer(w.Topic, w.Channel, cfg)
	if err != nil {
		return fmt.Errorf("nsq consumer %s/%s: %w", w.Topic, w.Channel, err)
	}
	setConsumerLogger(c, w.Logger.With("component", "go-nsq"))
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.producers = map[string]*gonsq.Producer{}
	c.AddConcurrentHandlers(gonsq.HandlerFunc(w.handleMessage), w.Concurrency)
	w.consumer = c
	if len(w.NSQDAddrs) > 0 {
		err = c.ConnectToNSQDs(w.NSQDAddrs)
	} else {
		err = c.ConnectToNSQLookupds(w.LookupdAddrs)
	}
	if err != nil {
		w.Close()
		return fmt.Errorf("nsq connect: %w", err)
	}
	w.Logger.Info("nsq worker consuming", "topic", w.Topic, "channel", w.Channel, "nsqd", w.NSQDAddrs, "lookupd", w.LookupdAddrs,
		"dead_letter_topic", w.DeadLetterTopic, "max_attempts", w.MaxAttempts, "msg_timeout", w.MsgTimeout, "concurrency", w.Concurrency)
	return nil
}

func (w *Worker) validate() error {
	switch {
	case w.Handler == nil:
		return errors.New("nsq worker: Handler is required")
	case !gonsq.IsValidTopicName(w.Topic):
		return fmt.Errorf("nsq worker: invalid Topic %q", w.Topic)
	case !gonsq.IsValidChannelName(w.Channel):
		return fmt.Errorf("nsq worker: invalid Channel %q", w.Channel)
	case w.DeadLetterTopic != "" && !gonsq.IsValidTopicName(w.DeadLetterTopic):
		return fmt.Errorf("nsq worker: invalid DeadLetterTopic %q", w.DeadLetterTopic)
	case w.DeadLetterTopic != "" && w.DeadLetterTopic == w.Topic:
		return fmt.Errorf("nsq worker: DeadLetterTopic must differ from Topic %q", w.Topic)
	case len(w.NSQDAddrs) == 0 && len(w.LookupdAddrs) == 0:
		return errors.New("nsq worker: set NSQDAddrs or LookupdAddrs")
	case len(w.NSQDAddrs) > 0 && len(w.LookupdAddrs) > 0:
		return errors.New("nsq worker: set NSQDAddrs or LookupdAddrs, not both")
	case w.MsgTimeout != 0 && w.MsgTimeout < time.Second:
		return fmt.Errorf("nsq worker: MsgTimeout %s is below nsqd's minimum of 1s", w.MsgTimeout)
	case w.Concurrency < 0:
		return fmt.Errorf("nsq worker: negative Concurrency %d", w.Concurrency)
	case w.MaxRequeueDelay < 0 || w.ShutdownTimeout < 0:
		return errors.New("nsq worker: negative MaxRequeueDelay or ShutdownTimeout")
	}
	return nil
}

func (w *Worker) setDefaults() {
	if w.MaxAttempts == 0 {
		w.MaxAttempts = DefaultMaxAttempts
	}
	if w.DeadLetterTopic == "" {
		w.DeadLetterTopic = w.Topic + ".dead"
	}
	if w.MsgTimeout == 0 {
		w.MsgTimeout = DefaultMsgTimeout
	}
	if w.Backoff == nil {
		w.Backoff = DefaultBackoff
	}
	if w.MaxRequeueDelay == 0 {
		w.MaxRequeueDelay = DefaultMaxRequeueDelay
	}
	if w.ShutdownTimeout == 0 {
		w.ShutdownTimeout = DefaultShutdownTimeout
	}
	if w.Concurrency == 0 {
		w.Concurrency = 1
	}
	if w.Logger == nil {
		w.Logger = slog.New(slog.DiscardHandler)
	}
}

// Close stops taking new messages, waits for the in-flight handlers to
// return and their answers to reach nsqd, then stops the dead-letter
// producers. A handler still running after ShutdownTimeout has its context
// canceled; Close then still waits for it.
func (w *Worker) Close() error {
	if w.consumer == nil {
		return nil
	}
	w.closed.Do(func() {
		w.consumer.Stop()
		done := make(chan struct{})
		go func() {
			<-w.consumer.StopChan
			w.inflight.Wait()
			close(done)
		}()
		timer := time.NewTimer(w.ShutdownTimeout)
		defer timer.Stop()
		select {
		case <-done:
		case <-timer.C:
			w.Logger.Warn("nsq worker: handlers still running after the shutdown timeout; canceling them", "timeout", w.ShutdownTimeout)
			w.cancel()
			<-done
		}
		w.cancel()
		w.mu.Lock()
		for _, p := range w.producers {
			p.Stop()
		}
		w.producers = nil
		w.mu.Unlock()
		w.Logger.Info("nsq worker stopped", "acked", w.acked.Load(), "retried", w.retried.Load(), "dead_lettered", w.deadLettered.Load())
	})
	return w.closeErr
}
