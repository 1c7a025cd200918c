package billing_test

// The worker throughput harness of issue 16: the billing worker (Processor
// on a SQLite ledger behind the nsq and jetstream Workers) against a naive
// consumer making the same stripe-go call, on the same embedded broker and
// the same in-process simulator, in the same run.
//
//	KEYBRAKE_WORKER_BENCH=1 go test -run TestWorkerThroughput -v -timeout 30m ./billing/
//
// Environment: KEYBRAKE_WORKER_BENCH_EVENTS (events per phase, default
// 5000), KEYBRAKE_WORKER_BENCH_ROUNDS (default 3),
// KEYBRAKE_WORKER_BENCH_LEDGER=postgres for a PostgreSQL ledger (under
// scripts/pg run -- …) instead of SQLite, and
// KEYBRAKE_WORKER_BENCH_PROFILE=dir to write a CPU profile of each phase of
// the first round (dir/nsq-worker.pprof…; read with go tool pprof -top).
// Phases run interleaved, so a busy neighbour slows all of them alike; the
// ratio of a round is worker/raw within that round.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	jsapi "github.com/nats-io/nats.go/jetstream"
	gonsq "github.com/nsqio/go-nsq"
	stripego "github.com/stripe/stripe-go/v82"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/billing"
	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/jetstream"
	knsq "github.com/keybrake/keybrake/nsq"
	"github.com/keybrake/keybrake/stripesim"
)

const benchConcurrency = 16

func TestWorkerThroughput(t *testing.T) {
	if os.Getenv("KEYBRAKE_WORKER_BENCH") == "" {
		t.Skip("set KEYBRAKE_WORKER_BENCH=1 to measure the billing worker against a raw consumer")
	}
	n := envInt(t, "KEYBRAKE_WORKER_BENCH_EVENTS", 5000)
	rounds := envInt(t, "KEYBRAKE_WORKER_BENCH_ROUNDS", 3)
	h := newWorkerBench(t, n)

	phases := []struct {
		name string
		run  func(round int) time.Duration
	}{
		{"nsq-raw", h.nsqRaw},
		{"nsq-worker", h.nsqWorker},
		{"jetstream-raw", h.jsRaw},
		{"jetstream-worker", h.jsWorker},
	}
	rates := map[string][]float64{}
	// Warm-up: connections, the simulator's maps, the ledger's pages.
	for _, p := range phases {
		h.n = n / 10
		p.run(-1)
	}
	h.n = n
	for r := range rounds {
		for _, p := range phases {
			c0, f0, s0, p0 := h.tl.claim.Load(), h.tl.finish.Load(), h.tc.charge.Load(), h.tc.process.Load()
			stop := h.profile(r, p.name)
			d := p.run(r)
			stop()
			rate := float64(n) / d.Seconds()
			if strings.HasSuffix(p.name, "worker") {
				per := func(v int64) time.Duration { return time.Duration(v / int64(n)) }
				t.Logf("per event: process %s claim %s charge %s finish %s", per(h.tc.process.Load()-p0), per(h.tl.claim.Load()-c0), per(h.tc.charge.Load()-s0), per(h.tl.finish.Load()-f0))
			}
			rates[p.name] = append(rates[p.name], rate)
			t.Logf("round %d %-17s %6d events in %8s: %7.0f events/s", r, p.name, n, d.Round(time.Millisecond), rate)
		}
		t.Logf("round %d ratios: nsq %.2f×, jetstream %.2f×", r,
			rates["nsq-worker"][r]/rates["nsq-raw"][r], rates["jetstream-worker"][r]/rates["jetstream-raw"][r])
	}
	// Exactly once: one charge per event, whatever was redelivered.
	if got, want := len(h.sim.GroundTruth().Charges), h.published.Load(); int64(got) != want {
		t.Errorf("the simulator holds %d charges for %d events", got, want)
	}
	t.Logf("%d worker deliveries were not acknowledged and came back", h.retries.Load())
	t.Logf("concurrency %d, %d events per phase, %d rounds; min / median / max", benchConcurrency, n, rounds)
	for _, p := range phases {
		t.Logf("%-17s events/s %s", p.name, minMedMax(rates[p.name]))
	}
	for _, b := range []string{"nsq", "jetstream"} {
		var ratios []float64
		for r := range rounds {
			ratios = append(ratios, rates[b+"-worker"][r]/rates[b+"-raw"][r])
		}
		t.Logf("%-17s worker/raw %s", b, minMedMaxf(ratios, "%.2f×"))
	}
}

// workerBench is the shared setup: one nsqd, one NATS server with
// JetStream, one simulator, one SQLite ledger.
type workerBench struct {
	t      *testing.T
	n      int
	nsqd   string
	nsqPub *gonsq.Producer
	nc     *nats.Conn
	js     jsapi.JetStream
	simURL string
	proc   *billing.Processor
	stripe *stripego.Client
	tl     *timedLedger
	sim    *stripesim.Server
	// published counts the events published; retries the worker's
	// deliveries that were not acknowledged.
	published, retries atomic.Int64
	tc                 *timedCharger
	seq                atomic.Int64
}

func newWorkerBench(t *testing.T, n int) *workerBench {
	h := &workerBench{t: t, n: n}
	nd := kbtest.NSQD(t, nil)
	h.nsqd = nd.RealTCPAddr().String()
	var err error
	if h.nsqPub, err = gonsq.NewProducer(h.nsqd, gonsq.NewConfig()); err != nil {
		t.Fatal(err)
	}
	h.nsqPub.SetLogger(kbtest.QuietLogger{}, gonsq.LogLevelMax)
	t.Cleanup(h.nsqPub.Stop)

	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	if h.nc, err = nats.Connect(ns.ClientURL()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.nc.Close)
	if h.js, err = jsapi.New(h.nc); err != nil {
		t.Fatal(err)
	}
	if _, err := h.js.CreateStream(context.Background(), jsapi.StreamConfig{Name: "DEAD", Subjects: []string{"dead"}}); err != nil {
		t.Fatal(err)
	}

	h.sim, h.simURL = kbtest.Simulator(t, stripesim.Options{})
	var ledger keybrake.Ledger = kbtest.SQLite(t, "ledger.db")
	if os.Getenv("KEYBRAKE_WORKER_BENCH_LEDGER") == "postgres" {
		ledger = kbtest.Postgres(t)
	}
	h.tl = &timedLedger{Ledger: ledger}
	h.tc = &timedCharger{Charger: &billing.StripeCharger{BaseURL: h.simURL, Key: "sk_test_bench"}}
	h.proc = &billing.Processor{Ledger: h.tl, Namespace: "bench", Owner: "bench", Charger: h.tc}
	// The raw consumer's client: one stripe-go client for the run, with
	// as many idle connections per host as the worker's charger keeps, so
	// neither opens a connection per call (http.DefaultTransport keeps
	// two; KEYBRAKE_WORKER_BENCH_RAW_TRANSPORT=default gives the raw
	// consumer that instead).
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	hc := &http.Client{Timeout: 30 * time.Second, Transport: tr}
	if os.Getenv("KEYBRAKE_WORKER_BENCH_RAW_TRANSPORT") == "default" {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	h.stripe = stripego.NewClient("sk_test_bench", stripego.WithBackends(stripego.NewBackendsWithConfig(&stripego.BackendConfig{
		URL: stripego.String(h.simURL), MaxNetworkRetries: stripego.Int64(0),
		LeveledLogger: &stripego.LeveledLogger{Level: stripego.LevelNull}, HTTPClient: hc,
	})))
	return h
}

// bodies returns h.n new events, unique across the run.
func (h *workerBench) bodies() [][]byte {
	h.published.Add(int64(h.n))
	out := make([][]byte, h.n)
	for i := range out {
		out[i] = []byte(EventJSON(fmt.Sprintf("cus_bench_%d", h.seq.Add(1)), "2026-11", 1000+int64(i%100)))
	}
	return out
}

// rawCharge is the naive consumer's work: decode, one charge with an
// idempotency key from the event, nothing recorded.
func (h *workerBench) rawCharge(body []byte) error {
	var ev struct {
		Customer string `json:"customer_id"`
		Period   string `json:"billing_period"`
		Amount   int64  `json:"amount"`
		Currency string `json:"currency"`
		Source   string `json:"source"`
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		return err
	}
	p := &stripego.ChargeCreateParams{Amount: stripego.Int64(ev.Amount), Currency: stripego.String(ev.Currency),
		Source: &stripego.PaymentSourceSourceParams{Token: stripego.String(ev.Source)}}
	p.SetIdempotencyKey(ev.Customer + "/" + ev.Period)
	p.AddMetadata("customer_id", ev.Customer)
	_, err := h.stripe.V1Charges.Create(context.Background(), p)
	return err
}

// nsqConfig is both NSQ consumers' configuration: go-nsq's defaults, but
// with nsqd's shortest output buffer timeout. With the default of 250 ms,
// the last messages of a phase wait in nsqd's buffer for the flush tick,
// which quantizes a phase of a few hundred milliseconds to multiples of
// 250 ms; a steady stream never waits for it.
func nsqConfig() *gonsq.Config {
	cfg := gonsq.NewConfig()
	cfg.OutputBufferTimeout = 25 * time.Millisecond
	return cfg
}

func (h *workerBench) nsqTopic(name string, round int) string {
	topic := fmt.Sprintf("%s_%d_%d", name, round+1, h.seq.Add(1))
	if err := h.nsqPub.MultiPublish(topic, h.bodies()); err != nil {
		h.t.Fatal(err)
	}
	return topic
}

func (h *workerBench) nsqRaw(round int) time.Duration {
	topic := h.nsqTopic("raw", round)
	cfg := nsqConfig()
	cfg.MaxInFlight = benchConcurrency
	c, err := gonsq.NewConsumer(topic, "raw", cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	c.SetLogger(kbtest.QuietLogger{}, gonsq.LogLevelMax)
	done := counter(h.n)
	c.AddConcurrentHandlers(gonsq.HandlerFunc(func(m *gonsq.Message) error {
		if err := h.rawCharge(m.Body); err != nil {
			return err
		}
		done.add()
		return nil
	}), benchConcurrency)
	start := time.Now()
	if err := c.ConnectToNSQD(h.nsqd); err != nil {
		h.t.Fatal(err)
	}
	d := done.wait(h.t, start)
	c.Stop()
	<-c.StopChan
	return d
}

func (h *workerBench) nsqWorker(round int) time.Duration {
	topic := h.nsqTopic("worker", round)
	done := counter(h.n)
	w := &knsq.Worker{Topic: topic, Channel: "billing", NSQDAddrs: []string{h.nsqd}, Handler: h.proc, Concurrency: benchConcurrency,
		Config: nsqConfig(),
		OnResponse: func(r knsq.Response) {
			if r.Verb == knsq.VerbFinish {
				done.add()
			} else {
				h.retried(r.Result)
			}
		}}
	start := time.Now()
	if err := w.Open(); err != nil {
		h.t.Fatal(err)
	}
	d := done.wait(h.t, start)
	w.Close()
	return d
}

func (h *workerBench) jsStream(name string, round int) string {
	ctx := context.Background()
	stream := fmt.Sprintf("%s_%d_%d", name, round+1, h.seq.Add(1))
	if _, err := h.js.CreateStream(ctx, jsapi.StreamConfig{Name: stream, Subjects: []string{stream}}); err != nil {
		h.t.Fatal(err)
	}
	for _, b := range h.bodies() {
		if _, err := h.js.PublishAsync(stream, b); err != nil {
			h.t.Fatal(err)
		}
	}
	select {
	case <-h.js.PublishAsyncComplete():
	case <-time.After(kbtest.Wait):
		h.t.Fatal("jetstream publish did not complete")
	}
	return stream
}

func (h *workerBench) jsRaw(round int) time.Duration {
	ctx := context.Background()
	stream := h.jsStream("RAW", round)
	cons, err := h.js.CreateOrUpdateConsumer(ctx, stream, jsapi.ConsumerConfig{Durable: "raw", AckPolicy: jsapi.AckExplicitPolicy})
	if err != nil {
		h.t.Fatal(err)
	}
	done := counter(h.n)
	start := time.Now()
	it, err := cons.Messages(jsapi.PullMaxMessages(benchConcurrency))
	if err != nil {
		h.t.Fatal(err)
	}
	msgs := make(chan jsapi.Msg)
	go func() {
		defer close(msgs)
		for {
			m, err := it.Next()
			if err != nil {
				return
			}
			msgs <- m
		}
	}()
	for range benchConcurrency {
		go func() {
			for m := range msgs {
				if err := h.rawCharge(m.Data()); err != nil {
					m.Nak()
					continue
				}
				m.Ack()
				done.add()
			}
		}()
	}
	d := done.wait(h.t, start)
	it.Stop()
	return d
}

func (h *workerBench) jsWorker(round int) time.Duration {
	stream := h.jsStream("WORKER", round)
	done := counter(h.n)
	w := &jetstream.Worker{JS: h.js, Stream: stream, Durable: "billing", Handler: jetstream.HandlerFunc(func(ctx context.Context, body []byte) billing.Result {
		t0 := time.Now()
		res := h.proc.Process(ctx, body)
		h.tc.process.Add(int64(time.Since(t0)))
		if res.Action == billing.ActionAck {
			done.add()
		} else {
			h.retried(res)
		}
		return res
	}), Start: jetstream.StartPolicy{Deliver: jetstream.DeliverAll}, DeadLetterSubject: "dead", Concurrency: benchConcurrency}
	start := time.Now()
	if err := w.Open(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	d := done.wait(h.t, start)
	w.Close()
	return d
}

// retried counts a delivery the worker did not acknowledge; it comes back,
// and the ledger charges it once.
func (h *workerBench) retried(res billing.Result) {
	if h.retries.Add(1) <= 5 {
		h.t.Logf("not acknowledged (redelivered later): %s %s: %s", res.Outcome, res.Action, res.Reason)
	}
}

// profile writes a CPU profile of one phase of the first round when
// KEYBRAKE_WORKER_BENCH_PROFILE names a directory.
func (h *workerBench) profile(round int, phase string) (stop func()) {
	dir := os.Getenv("KEYBRAKE_WORKER_BENCH_PROFILE")
	if dir == "" || round != 0 {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, phase+".pprof"))
	if err != nil {
		h.t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		h.t.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// count signals when n events were handled.
type count struct {
	left atomic.Int64
	done chan struct{}
}

func counter(n int) *count {
	c := &count{done: make(chan struct{})}
	c.left.Store(int64(n))
	return c
}

func (c *count) add() {
	if c.left.Add(-1) == 0 {
		close(c.done)
	}
}

// wait returns the time from start until every event was handled.
func (c *count) wait(tb testing.TB, start time.Time) time.Duration {
	tb.Helper()
	select {
	case <-c.done:
		return time.Since(start)
	case <-time.After(5 * time.Minute):
		tb.Fatalf("%d events still unhandled after 5 minutes", c.left.Load())
		return 0
	}
}

func envInt(tb testing.TB, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v <= 0 {
		tb.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return v
}

func minMedMax(v []float64) string { return minMedMaxf(v, "%.0f") }

func minMedMaxf(v []float64, f string) string {
	s := slices.Clone(v)
	slices.Sort(s)
	return fmt.Sprintf(f+" / "+f+" / "+f, s[0], s[len(s)/2], s[len(s)-1])
}

// timedLedger and timedCharger add up where a worker's time goes.
type timedLedger struct {
	keybrake.Ledger
	claim, finish atomic.Int64
}

func (l *timedLedger) Claim(ctx context.Context, a keybrake.ClaimArgs) (*keybrake.ClaimResult, error) {
	t := time.Now()
	defer func() { l.claim.Add(int64(time.Since(t))) }()
	return l.Ledger.Claim(ctx, a)
}

func (l *timedLedger) Finish(ctx context.Context, a keybrake.FinishArgs) (*keybrake.LedgerEntry, error) {
	t := time.Now()
	defer func() { l.finish.Add(int64(time.Since(t))) }()
	return l.Ledger.Finish(ctx, a)
}

type timedCharger struct {
	billing.Charger
	charge, process atomic.Int64
}

func (c *timedCharger) Charge(ctx context.Context, r billing.ChargeRequest) (billing.ChargeResult, error) {
	t := time.Now()
	defer func() { c.charge.Add(int64(time.Since(t))) }()
	return c.Charger.Charge(ctx, r)
}
