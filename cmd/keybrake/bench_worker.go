package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	jsapi "github.com/nats-io/nats.go/jetstream"
	gonsq "github.com/nsqio/go-nsq"

	"github.com/keybrake/keybrake"
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
	Run         int       `json:"run"`
	Transport   string    `json:"transport"`
	Consumer    string    `json:"consumer"`
	Concurrency int       `json:"concurrency"`
	Events      int       `json:"events"`
	Done        int       `json:"done"`
	Errors      int       `json:"errors"`
	FirstErr    string    `json:"first_error,omitempty"`
	Seconds     float64   `json:"seconds"`
	PerSecond   float64   `json:"events_per_s"`
	CPU         *PhaseCPU `json:"cpu,omitempty"` // Linux: every process's CPU time per event
}

// benchBroker is a broker process of the worker phases.
type benchBroker struct {
	transport string
	addr      string // nsqd TCP address, or the NATS URL
	httpAddr  string // nsqd's HTTP address, for /stats
	child     *benchChild
}

func (b *bench) startBroker(ctx context.Context, transport string) (*benchBroker, error) {
	data := filepath.Join(b.dir, transport)
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	c, addr, err := startOnFreeAddr(ctx, "broker "+transport, "", func(addr string) []string {
		return []string{"broker", "--transport", transport, "--addr", addr, "--data", data}
	}, nil, func(addr string) string { return "tcp:" + addr })
	if err != nil {
		return nil, err
	}
	b.addChild(c)
	br := &benchBroker{transport: transport, addr: addr, child: c}
	if transport == "jetstream" {
		br.addr = "nats://" + addr
		return br, nil
	}
	// keybrake broker logs nsqd's HTTP address, on a port of its own choosing.
	deadline := time.Now().Add(10 * time.Second)
	for br.httpAddr == "" {
		if m := nsqdHTTP.FindStringSubmatch(c.out.String()); m != nil {
			br.httpAddr = m[1]
		} else if time.Now().After(deadline) {
			return nil, fmt.Errorf("broker nsq did not log its HTTP address:\n%s", c.out.String())
		} else {
			time.Sleep(5 * time.Millisecond)
		}
	}
	return br, nil
}

// nsqdHTTP finds nsqd's HTTP address in keybrake broker's log.
var nsqdHTTP = regexp.MustCompile(`nsqd listening.* http=(\S+)`)

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
		if b.cfg.WorkerVia == "keybrake" && b.workerKey == "" {
			if _, b.workerKey, err = b.createKey(ctx, "bench-worker"); err != nil {
				return out, fmt.Errorf("create the worker's key: %w", err)
			}
		}
		consumers := []string{consumerWorker, consumerRaw, consumerAck}
		for run := 1; run <= b.cfg.Runs; run++ {
			r := (run - 1) % len(consumers)
			order := append(append([]string(nil), consumers[r:]...), consumers[:r]...)
			for _, n := range b.cfg.Concurrency {
				for _, consumer := range order {
					topic := fmt.Sprintf("bench_%s_%d_r%dc%d", strings.ReplaceAll(strings.ReplaceAll(consumer, " ", "_"), "-", "_"), time.Now().UnixNano()%1e9, run, n)
					s, err := b.workerPhase(ctx, br, consumer, topic, n)
					s.Run = run
					if err != nil {
						return out, fmt.Errorf("%s %s, run %d, concurrency %d: %w", transport, consumer, run, n, err)
					}
					fmt.Fprintf(progress, "bench: run %d/%d %-9s %-14s %3d: %6.0f events/s (%d events in %.2fs, %d errors)\n",
						run, b.cfg.Runs, transport, consumer, n, s.PerSecond, s.Done, s.Seconds, s.Errors)
					out = append(out, s)
				}
			}
		}
	}
	return out, nil
}

// charger is the Stripe call of both consumers: keybrake worker's
// StripeCharger with the client keybrake worker builds, direct to the
// simulator.
func (b *bench) charger() *billing.StripeCharger {
	base, key := b.workerUpstream()
	return &billing.StripeCharger{BaseURL: base, Key: key, HTTPClient: &http.Client{Timeout: 30 * time.Second}}
}

// workerUpstream is where both consumers charge: the simulator with its
// secret, or with --worker-via keybrake the first replica with the
// worker key (a key of its own, so the hot key's spend check stays exact).
func (b *bench) workerUpstream() (base, key string) {
	if b.cfg.WorkerVia == "keybrake" {
		return b.proxyURLs[0], b.workerKey
	}
	return b.simURL, simulatorSecret
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

// counter counts a raw consumer's failed events.
type counter struct {
	errs     atomic.Int64
	firstErr atomic.Value
}

func (c *counter) fail(err string) {
	c.errs.Add(1)
	c.firstErr.CompareAndSwap(nil, err)
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
// from its start until the broker has every event acknowledged, and checks
// the simulator's ground truth: each event charged exactly once (none by
// the ack-only consumer).
func (b *bench) workerPhase(ctx context.Context, br *benchBroker, consumer, topic string, n int) (WorkerSample, error) {
	s := WorkerSample{Transport: br.transport, Consumer: consumer, Concurrency: n, Events: b.cfg.Events}
	events := benchEvents(topic, b.cfg.Events)
	stream := strings.ToUpper(topic)
	if err := publishBench(ctx, br, stream, topic, events); err != nil {
		return s, fmt.Errorf("publish: %w", err)
	}
	before, err := b.capturedCents(ctx)
	if err != nil {
		return s, err
	}
	cnt := &counter{}
	var handle func(ctx context.Context, body []byte) error
	switch consumer {
	case consumerRaw:
		ch := b.charger()
		handle = func(ctx context.Context, body []byte) error { return rawHandle(ctx, ch, body) }
	case consumerAck:
		handle = func(context.Context, []byte) error { return nil }
	}
	b.workerLog = &tailBuffer{max: 4 << 10}
	cpu := b.cpu.mark()
	start := time.Now()
	var stop io.Closer
	group := "raw" // the NSQ channel or JetStream durable
	switch {
	case consumer == consumerWorker:
		group = "bench"
		stop, err = b.startWorker(ctx, br, stream, topic, group, n)
	case br.transport == "nsq":
		stop, err = consumeRawNSQ(br, topic, group, n, cnt, handle)
	default:
		stop, err = consumeRawJetStream(ctx, br, stream, group, n, cnt, handle)
	}
	if err != nil {
		return s, err
	}
	derr := br.waitDrained(ctx, stream, topic, group, len(events), time.Duration(len(events))*50*time.Millisecond+30*time.Second)
	elapsed := time.Since(start)
	cpuEnd := b.cpu.since(cpu, len(events))
	cerr := stop.Close()
	s.Seconds, s.Errors = elapsed.Seconds(), int(cnt.errs.Load())
	s.FirstErr, _ = cnt.firstErr.Load().(string)
	if derr != nil {
		return s, fmt.Errorf("%w (%d errors, first: %s)", derr, s.Errors, s.FirstErr)
	}
	s.Done = len(events)
	s.PerSecond = float64(s.Done) / s.Seconds
	s.CPU = cpuEnd
	after, err := b.capturedCents(ctx)
	if err != nil {
		return s, err
	}
	want := int64(100 * len(events))
	if consumer == consumerAck {
		want = 0
	}
	if after-before != want {
		s.Errors++
		msg := fmt.Sprintf("the simulator captured $%s for %d events of $1.00", keybrake.Micros((after-before)*10_000), len(events))
		if s.FirstErr != "" {
			msg += "; first failure: " + s.FirstErr
		}
		if consumer == consumerWorker {
			msg += "; the worker's log ends:\n" + b.workerLog.String()
		}
		s.FirstErr = msg
	}
	return s, cerr
}

// startWorker starts `keybrake worker` in this process: WorkerMain, from
// the flags an operator would give it, straight to the simulator.
func (b *bench) startWorker(ctx context.Context, br *benchBroker, stream, topic, channel string, n int) (io.Closer, error) {
	m := NewWorkerMain(Env{Stdout: io.Discard, Stderr: b.workerLog, Getenv: func(string) string { return "" }})
	ledger := filepath.Join(b.dir, "ledger-"+br.transport+".db")
	if isPostgres(b.cfg.DB) {
		ledger = b.cfg.DB
	}
	base, key := b.workerUpstream()
	args := []string{"--topic", topic, "--channel", channel, "--upstream", base, "--vault-key", key,
		"--ledger", ledger, "--namespace", benchNamespace, "--concurrency", fmt.Sprint(n), "--log-level", "warn"}
	if br.transport == "nsq" {
		args = append(args, "--transport", "nsq", "--nsqd", br.addr)
	} else {
		args = append(args, "--transport", "jetstream", "--nats-url", br.addr, "--stream", stream, "--deliver-policy", "all")
	}
	if err := m.ParseFlags(args); err != nil {
		return nil, err
	}
	if err := m.Run(ctx); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// waitDrained polls the broker until every one of the events published to
// topic has been acknowledged on group (the NSQ channel or JetStream
// durable), or limit passes.
func (br *benchBroker) waitDrained(ctx context.Context, stream, topic, group string, events int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	var js jsapi.JetStream
	if br.transport == "jetstream" {
		nc, err := nats.Connect(br.addr)
		if err != nil {
			return err
		}
		defer nc.Close()
		if js, err = jsapi.New(nc); err != nil {
			return err
		}
	}
	for {
		var done bool
		var err error
		if js != nil {
			done, err = jetstreamDrained(ctx, js, stream, group, events)
		} else {
			done, err = br.nsqDrained(topic, group, events)
		}
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not every event acknowledged after %s", limit)
		}
	}
}

// nsqDrained asks nsqd's /stats whether the channel's consumers have
// finished (FIN) the events and the channel holds none: not queued, in
// flight or deferred. The channel's own counters alone are not enough:
// nsqd has shown a channel with every message counted, none queued and
// none in flight before its consumer had received one.
func (br *benchBroker) nsqDrained(topic, channel string, events int) (bool, error) {
	resp, err := http.Get("http://" + br.httpAddr + "/stats?format=json&topic=" + topic + "&channel=" + channel)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	var st struct {
		Topics []struct {
			Name     string `json:"topic_name"`
			Channels []struct {
				Name     string `json:"channel_name"`
				Depth    int64  `json:"depth"`
				InFlight int    `json:"in_flight_count"`
				Deferred int    `json:"deferred_count"`
				Clients  []struct {
					Finished uint64 `json:"finish_count"`
				} `json:"clients"`
			} `json:"channels"`
		} `json:"topics"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return false, fmt.Errorf("nsqd stats: %w", err)
	}
	for _, t := range st.Topics {
		for _, c := range t.Channels {
			if t.Name != topic || c.Name != channel {
				continue
			}
			var finished uint64
			for _, cl := range c.Clients {
				finished += cl.Finished
			}
			return finished >= uint64(events) && c.Depth == 0 && c.InFlight == 0 && c.Deferred == 0, nil
		}
	}
	return false, nil
}

// jetstreamDrained asks the server whether the durable's ack floor has
// reached the last event and nothing is pending.
func jetstreamDrained(ctx context.Context, js jsapi.JetStream, stream, durable string, events int) (bool, error) {
	c, err := js.Consumer(ctx, stream, durable)
	if errors.Is(err, jsapi.ErrConsumerNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return false, err
	}
	return info.AckFloor.Stream >= uint64(events) && info.NumAckPending == 0 && info.NumPending == 0, nil
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

// consumeRawNSQ is a plain go-nsq consumer: n concurrent handlers, n in
// flight, FIN after the handler, failed or not (a failure is counted). Its configuration is go-nsq's
// default, as the billing worker's is: nsqd's 250 ms output buffer timeout
// (one flush wait at a phase's start) is in every nsq phase alike.
func consumeRawNSQ(br *benchBroker, topic, channel string, n int, cnt *counter, handle func(context.Context, []byte) error) (io.Closer, error) {
	cfg := gonsq.NewConfig()
	cfg.MaxInFlight = n
	c, err := gonsq.NewConsumer(topic, channel, cfg)
	if err != nil {
		return nil, err
	}
	c.SetLogger(nil, gonsq.LogLevelError)
	c.AddConcurrentHandlers(gonsq.HandlerFunc(func(m *gonsq.Message) error {
		if err := handle(context.Background(), m.Body); err != nil {
			cnt.fail(err.Error()) // and FIN: the naive consumer does not retry
		}
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

// consumeRawJetStream is a plain nats.go JetStream consumer: one goroutine
// pulls (Messages) and hands messages to n goroutines, each acknowledging
// after its handler, failed or not.
func consumeRawJetStream(ctx context.Context, br *benchBroker, stream, durable string, n int, cnt *counter, handle func(context.Context, []byte) error) (io.Closer, error) {
	nc, err := nats.Connect(br.addr)
	if err != nil {
		return nil, err
	}
	js, err := jsapi.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jsapi.ConsumerConfig{Durable: durable, AckPolicy: jsapi.AckExplicitPolicy, AckWait: time.Minute})
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
			if errors.Is(err, jsapi.ErrMsgIteratorClosed) {
				return
			}
			if err != nil { // a missed heartbeat on a busy machine: the iterator pulls again
				select {
				case <-quit:
					return
				case <-time.After(10 * time.Millisecond):
					continue
				}
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
					if err := handle(ctx, m.Data()); err != nil {
						cnt.fail(err.Error()) // and Ack: the naive consumer does not retry
					}
					if err := m.Ack(); err != nil {
						cnt.fail(err.Error())
					}
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
