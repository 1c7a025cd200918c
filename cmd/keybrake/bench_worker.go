package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	jsapi "github.com/nats-io/nats.go/jetstream"
	gonsq "github.com/nsqio/go-nsq"

	"github.com/keybrake/keybrake/billing"
	"github.com/keybrake/keybrake/jetstream"
	"github.com/keybrake/keybrake/nsq"
)

// Consumers of a worker phase.
const (
	consumerWorker = "billing worker" // keybrake worker's transport and billing.Processor with a ledger
	consumerRaw    = "raw consumer"   // the broker's own client, the same Stripe call, no ledger
	consumerAck    = "ack-only"       // the broker's own client acknowledging at once: the broker's floor
)

// benchNamespace is the billing namespace of the bench's events.
const benchNamespace = "bench"

// WorkerSample is one worker phase of one run: one consumer draining
// Events prefilled events at one concurrency.
type WorkerSample struct {
	Run         int     `json:"run"`
	Transport   string  `json:"transport"`
	Consumer    string  `json:"consumer"`
	Concurrency int     `json:"concurrency"`
	Events      int     `json:"events"`
	Done        int     `json:"done"`
	Errors      int     `json:"errors"`
	FirstErr    string  `json:"first_error,omitempty"`
	Seconds     float64 `json:"seconds"`
	PerSecond   float64 `json:"events_per_s"`
}

// benchBroker is a broker process of the worker phases.
type benchBroker struct {
	transport string
	addr      string // nsqd TCP address, or the NATS URL
	child     *benchChild
}

func (b *bench) startBroker(ctx context.Context, transport string) (*benchBroker, error) {
	data := filepath.Join(b.dir, transport)
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	c, addr, err := startOnFreeAddr(ctx, "broker "+transport, func(addr string) []string {
		return []string{"broker", "--transport", transport, "--addr", addr, "--data", data}
	}, nil, func(addr string) string { return "tcp:" + addr })
	if err != nil {
		return nil, err
	}
	b.children = append(b.children, c)
	br := &benchBroker{transport: transport, addr: addr, child: c}
	if transport == "jetstream" {
		br.addr = "nats://" + addr
	}
	return br, nil
}

// runWorkers runs the worker phases of every selected broker: for each
// run and concurrency, each consumer in turn (the order rotating from run
// to run) drains its own topic of prefilled events.
func (b *bench) runWorkers(ctx context.Context, progress io.Writer) ([]WorkerSample, error) {
	var out []WorkerSample
	for _, transport := range []string{"nsq", "jetstream"} {
		if !b.cfg.Ops["worker-"+transport] {
			continue
		}
		br, err := b.startBroker(ctx, transport)
		if err != nil {
			return out, err
		}
		ledgerDSN := filepath.Join(b.dir, "ledger-"+transport+".db")
		if isPostgres(b.cfg.DB) {
			ledgerDSN = b.cfg.DB
		}
		ledger, closer, err := openLedger(ctx, ledgerDSN)
		if err != nil {
			return out, err
		}
		proc := &billing.Processor{Ledger: ledger, Charger: b.charger(), Namespace: benchNamespace, Owner: fmt.Sprintf("bench/%d", os.Getpid())}
		consumers := []string{consumerWorker, consumerRaw, consumerAck}
		for run := 1; run <= b.cfg.Runs; run++ {
			r := (run - 1) % len(consumers)
			order := append(append([]string(nil), consumers[r:]...), consumers[:r]...)
			for _, n := range b.cfg.Concurrency {
				for _, consumer := range order {
					topic := fmt.Sprintf("bench_%s_%d_r%dc%d", strings.ReplaceAll(strings.ReplaceAll(consumer, " ", "_"), "-", "_"), time.Now().UnixNano()%1e9, run, n)
					s, err := b.workerPhase(ctx, br, proc, consumer, topic, n)
					s.Run = run
					if err != nil {
						closer.Close()
						return out, fmt.Errorf("%s %s, run %d, concurrency %d: %w", transport, consumer, run, n, err)
					}
					fmt.Fprintf(progress, "bench: run %d/%d %-9s %-14s %3d: %6.0f events/s (%d events in %.2fs, %d errors)\n",
						run, b.cfg.Runs, transport, consumer, n, s.PerSecond, s.Done, s.Seconds, s.Errors)
					out = append(out, s)
				}
			}
		}
		if err := closer.Close(); err != nil {
			return out, err
		}
	}
	return out, nil
}

// charger is the Stripe call of both consumers: keybrake worker's
// StripeCharger with the client keybrake worker builds, direct to the
// simulator.
func (b *bench) charger() *billing.StripeCharger {
	return &billing.StripeCharger{BaseURL: b.simURL, Key: simulatorSecret, HTTPClient: &http.Client{Timeout: 30 * time.Second}}
}

// benchEvents returns n events of their own customers, so no phase
// replays another's idempotency keys.
func benchEvents(topic string, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i], _ = json.Marshal(billing.Event{CustomerID: fmt.Sprintf("%s-%d", topic, i), BillingPeriod: "2026-11", Amount: 100,
			Currency: "usd", Source: "tok_visa", Metadata: map[string]string{"bench": topic}})
	}
	return out
}

// counter counts a phase's finished events and closes done at the last.
// A phase is timed from its first message to its last, so connecting and
// the broker's first delivery are left out for every consumer alike.
type counter struct {
	want        int64
	n, errs     atomic.Int64
	first, last atomic.Int64 // UnixNano
	firstErr    atomic.Value
	done        chan struct{}
}

func newCounter(want int) *counter { return &counter{want: int64(want), done: make(chan struct{})} }

// begin marks a message's arrival.
func (c *counter) begin() { c.first.CompareAndSwap(0, time.Now().UnixNano()) }

func (c *counter) ok() {
	if c.n.Add(1) == c.want {
		c.last.Store(time.Now().UnixNano())
		close(c.done)
	}
}

// elapsed is the time from the first message to the last.
func (c *counter) elapsed() time.Duration {
	if c.first.Load() == 0 || c.last.Load() == 0 {
		return 0
	}
	return time.Duration(c.last.Load() - c.first.Load())
}

func (c *counter) fail(err string) {
	c.errs.Add(1)
	c.firstErr.CompareAndSwap(nil, err)
}

// countingHandler counts the billing worker's acknowledged events.
type countingHandler struct {
	h billingHandler
	c *counter
}

func (h countingHandler) Process(ctx context.Context, body []byte) billing.Result {
	h.c.begin()
	res := h.h.Process(ctx, body)
	if res.Action == billing.ActionAck {
		h.c.ok()
	} else {
		h.c.fail(res.Action.String() + ": " + res.Reason)
	}
	return res
}

// rawHandle is the raw consumer's work on one message: decode the event
// and make the billing worker's Stripe call (the same key, the same
// metadata), no ledger.
func rawHandle(ctx context.Context, ch *billing.StripeCharger, body []byte) error {
	var ev billing.Event
	if err := json.Unmarshal(body, &ev); err != nil {
		return err
	}
	_, err := ch.Charge(ctx, billing.ChargeRequest{Key: ev.Key(benchNamespace), Amount: ev.Amount, Currency: ev.Currency,
		StripeCustomer: ev.StripeCustomer, Source: ev.Source, Description: ev.Description, Metadata: ev.Metadata})
	return err
}

// workerPhase prefills topic with --events events, then times consumer
// draining them at concurrency n.
func (b *bench) workerPhase(ctx context.Context, br *benchBroker, proc *billing.Processor, consumer, topic string, n int) (WorkerSample, error) {
	s := WorkerSample{Transport: br.transport, Consumer: consumer, Concurrency: n, Events: b.cfg.Events}
	events := benchEvents(topic, b.cfg.Events)
	stream := strings.ToUpper(topic)
	if err := publishBench(ctx, br, stream, topic, events); err != nil {
		return s, fmt.Errorf("publish: %w", err)
	}
	cnt := newCounter(len(events))
	var handle func(ctx context.Context, body []byte) error
	switch consumer {
	case consumerRaw:
		ch := b.charger()
		handle = func(ctx context.Context, body []byte) error { return rawHandle(ctx, ch, body) }
	case consumerAck:
		handle = func(context.Context, []byte) error { return nil }
	}
	start := time.Now()
	var stop io.Closer
	var err error
	switch {
	case consumer == consumerWorker:
		stop, err = consumeWorker(ctx, br, stream, topic, n, countingHandler{proc, cnt})
	case br.transport == "nsq":
		stop, err = consumeRawNSQ(br, topic, n, cnt, handle)
	default:
		stop, err = consumeRawJetStream(ctx, br, stream, n, cnt, handle)
	}
	if err != nil {
		return s, err
	}
	limit := time.Duration(len(events))*50*time.Millisecond + 30*time.Second
	select {
	case <-cnt.done:
	case <-time.After(limit):
	case <-ctx.Done():
	}
	elapsed := time.Since(start)
	cerr := stop.Close()
	s.Done, s.Errors, s.Seconds = int(cnt.n.Load()), int(cnt.errs.Load()), cnt.elapsed().Seconds()
	s.FirstErr, _ = cnt.firstErr.Load().(string)
	if s.Seconds > 0 {
		s.PerSecond = float64(s.Done) / s.Seconds
	}
	if s.Done < len(events) {
		return s, fmt.Errorf("%d of %d events done after %s (%d errors, first: %s)", s.Done, len(events), elapsed.Round(time.Millisecond), s.Errors, s.FirstErr)
	}
	return s, cerr
}

// publishBench publishes events to topic (nsq) or to a new stream capturing
// the subject topic (jetstream).
func publishBench(ctx context.Context, br *benchBroker, stream, topic string, events [][]byte) error {
	quiet := slog.New(slog.DiscardHandler)
	if br.transport == "nsq" {
		p, err := nsq.NewPublisher([]string{br.addr}, nil, quiet)
		if err != nil {
			return err
		}
		defer p.Close()
		for i := 0; i < len(events); i += 500 {
			if err := p.MultiPublish(topic, events[i:min(i+500, len(events))]); err != nil {
				return err
			}
		}
		return nil
	}
	nc, err := nats.Connect(br.addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jsapi.New(nc)
	if err != nil {
		return err
	}
	for _, st := range []jsapi.StreamConfig{{Name: stream, Subjects: []string{topic}}, {Name: stream + "_DEAD", Subjects: []string{topic + ".dead"}}} {
		if _, err := js.CreateStream(ctx, st); err != nil {
			return fmt.Errorf("stream %s: %w", st.Name, err)
		}
	}
	pub := &jetstream.Publisher{JS: js, Subject: topic, Namespace: benchNamespace}
	for _, e := range events {
		if _, err := pub.Publish(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// consumeWorker starts keybrake worker's consumer: its transport, parsed
// from the flags keybrake worker takes, handing every message to h.
func consumeWorker(ctx context.Context, br *benchBroker, stream, topic string, n int, h billingHandler) (io.Closer, error) {
	fs := flag.NewFlagSet("bench-worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	env := Env{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
	chosen := transportFlags(fs, env, false)
	args := []string{"--transport", "nsq", "--nsqd", br.addr}
	if br.transport == "jetstream" {
		args = []string{"--transport", "jetstream", "--nats-url", br.addr, "--stream", stream, "--deliver-policy", "all"}
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	_, opts, err := chosen()
	if err != nil {
		return nil, err
	}
	return opts.consume(ctx, consumeConfig{Topic: topic, Channel: "bench", DeadLetterTopic: topic + ".dead", MaxAttempts: 10,
		Concurrency: n, AckTimeout: 60 * time.Second, Handler: h, Logger: slog.New(slog.DiscardHandler)})
}

// consumeRawNSQ is a plain go-nsq consumer: n concurrent handlers, n in
// flight, FIN when the handler returns nil. Its configuration is go-nsq's
// default, as the billing worker's is: nsqd's 250 ms output buffer timeout
// (one flush wait at a phase's start) is in every nsq phase alike.
func consumeRawNSQ(br *benchBroker, topic string, n int, cnt *counter, handle func(context.Context, []byte) error) (io.Closer, error) {
	cfg := gonsq.NewConfig()
	cfg.MaxInFlight = n
	c, err := gonsq.NewConsumer(topic, "raw", cfg)
	if err != nil {
		return nil, err
	}
	c.SetLogger(nil, gonsq.LogLevelError)
	c.AddConcurrentHandlers(gonsq.HandlerFunc(func(m *gonsq.Message) error {
		cnt.begin()
		if err := handle(context.Background(), m.Body); err != nil {
			cnt.fail(err.Error())
			return err
		}
		cnt.ok()
		return nil
	}), n)
	if err := c.ConnectToNSQD(br.addr); err != nil {
		return nil, err
	}
	return closerFunc(func() error {
		c.Stop()
		<-c.StopChan
		return nil
	}), nil
}

// consumeRawJetStream is a plain nats.go JetStream consumer: Consume
// hands messages to n goroutines, each acknowledging after its handler.
func consumeRawJetStream(ctx context.Context, br *benchBroker, stream string, n int, cnt *counter, handle func(context.Context, []byte) error) (io.Closer, error) {
	nc, err := nats.Connect(br.addr)
	if err != nil {
		return nil, err
	}
	js, err := jsapi.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jsapi.ConsumerConfig{Durable: "raw", AckPolicy: jsapi.AckExplicitPolicy, AckWait: time.Minute})
	if err != nil {
		nc.Close()
		return nil, err
	}
	it, err := cons.Messages(jsapi.PullMaxMessages(max(n, 16)))
	if err != nil {
		nc.Close()
		return nil, err
	}
	msgs, quit := make(chan jsapi.Msg), make(chan struct{})
	go func() {
		for {
			m, err := it.Next()
			if err != nil {
				return // stopped
			}
			select {
			case msgs <- m:
			case <-quit:
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-quit:
					return
				case m := <-msgs:
					cnt.begin()
					if err := handle(ctx, m.Data()); err != nil {
						cnt.fail(err.Error())
						_ = m.Nak()
						continue
					}
					if err := m.Ack(); err != nil {
						cnt.fail(err.Error())
						continue
					}
					cnt.ok()
				}
			}
		}()
	}
	return closerFunc(func() error {
		it.Stop()
		close(quit)
		wg.Wait()
		nc.Close()
		return nil
	}), nil
}
