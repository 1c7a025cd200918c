package jetstream_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	jsapi "github.com/nats-io/nats.go/jetstream"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/billing"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/jetstream"
	"github.com/keybrake/keybrake/sqlite"
	"github.com/keybrake/keybrake/stripesim"
)

const (
	namespace  = "jstest"
	stream     = "BILLING"
	subject    = "billing.events"
	deadStream = "BILLING_DEAD"
	deadSubj   = "billing.dead"
)

// T0 is where every ledger clock starts.
var T0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// Clock is the injected clock of the ledger.
type Clock = kbtest.Clock

// Env is an embedded NATS server with JetStream and HTTP monitoring, the
// Stripe simulator, the keybrake proxy in front of it with a SQLite store
// (also the billing ledger), and a vault key.
type Env struct {
	NATS       *server.Server
	MonitorURL string
	Sim        *stripesim.Server
	Proxy      *khttp.Server
	Store      *sqlite.Store
	VaultKey   string
	Clock      *Clock
	Log        *SyncBuffer
}

// MustEnv starts an Env and creates the billing and dead-letter streams;
// t.Cleanup stops it.
func MustEnv(tb testing.TB) *Env {
	tb.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: tb.TempDir(),
		HTTPHost: "127.0.0.1", HTTPPort: -1, NoLog: true, NoSigs: true})
	if err != nil {
		tb.Fatal(err)
	}
	ns.Start()
	tb.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		tb.Fatal("nats server not ready")
	}
	e := &Env{NATS: ns, MonitorURL: "http://" + ns.MonitorAddr().String(), Clock: kbtest.NewClock(T0), Log: &SyncBuffer{}}
	tb.Cleanup(func() {
		// A failure under load is hard to reproduce: the workers' log says
		// what they saw.
		if tb.Failed() {
			tb.Logf("worker log:\n%s", e.Log)
		}
	})

	var simURL string
	e.Sim, simURL = kbtest.Simulator(tb, stripesim.Options{})
	e.Proxy = kbtest.Proxy(tb, simURL, nil)
	e.Store = e.Proxy.Store.(*sqlite.Store)
	_, e.VaultKey = kbtest.VaultKey(tb, e.Proxy.URL(), `{"daily_usd_cap":100000,"label":"jetstream-test"}`)

	js := e.JS(tb)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jsapi.StreamConfig{Name: stream, Subjects: []string{subject}, Duplicates: time.Minute}); err != nil {
		tb.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jsapi.StreamConfig{Name: deadStream, Subjects: []string{deadSubj}, Duplicates: time.Minute}); err != nil {
		tb.Fatal(err)
	}
	return e
}

// Conn returns a new connection to the server, named name.
func (e *Env) Conn(tb testing.TB, name string) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(e.NATS.ClientURL(), nats.Name(name))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// JS returns a JetStream context on a new connection.
func (e *Env) JS(tb testing.TB) jsapi.JetStream {
	tb.Helper()
	js, err := jsapi.New(e.Conn(tb, "test"))
	if err != nil {
		tb.Fatal(err)
	}
	return js
}

// Processor returns the real billing processor: the SQLite ledger, the
// Stripe charger through the keybrake proxy with the vault key, the test
// clock, and fast retries.
func (e *Env) Processor(owner string) *billing.Processor {
	return &billing.Processor{
		Ledger:    e.Store,
		Charger:   &billing.StripeCharger{BaseURL: e.Proxy.URL(), Key: e.VaultKey},
		Namespace: namespace,
		Owner:     owner,
		Lease:     time.Minute,
		Now:       e.Clock.Now,
		Backoff:   func(int) time.Duration { return 20 * time.Millisecond },
	}
}

// Logger returns a logger writing to e.Log.
func (e *Env) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(e.Log, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Worker returns a Worker on the billing stream with the given durable and
// handler; adjust it before MustOpen.
func (e *Env) Worker(tb testing.TB, durable string, h jetstream.Handler) *jetstream.Worker {
	return &jetstream.Worker{
		JS: e.JS(tb), Stream: stream, Durable: durable, Subject: subject, Handler: h,
		Start: jetstream.StartPolicy{Deliver: jetstream.DeliverNew}, DeadLetterSubject: deadSubj,
		AckWait: 5 * time.Second, MaxDeliver: 5, FetchWait: time.Second, Logger: e.Logger(),
	}
}

// MustOpen opens w; t.Cleanup closes it.
func MustOpen(tb testing.TB, w *jetstream.Worker) *jetstream.Worker {
	tb.Helper()
	if err := w.Open(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { w.Close() })
	return w
}

// Publish publishes body through the keybrake Publisher.
func (e *Env) Publish(tb testing.TB, body string) *jsapi.PubAck {
	tb.Helper()
	p := &jetstream.Publisher{JS: e.JS(tb), Subject: subject, Namespace: namespace}
	ack, err := p.Publish(context.Background(), []byte(body))
	if err != nil {
		tb.Fatal(err)
	}
	return ack
}

// Charges returns the simulator's ground truth: every charge it created.
func (e *Env) Charges() []stripesim.Charge { return e.Sim.GroundTruth().Charges }

// MustChargesPerEvent fails unless the simulator holds exactly one charge
// per event body, and no other charge.
func (e *Env) MustChargesPerEvent(tb testing.TB, bodies ...string) {
	tb.Helper()
	charges := e.Charges()
	if len(charges) != len(bodies) {
		tb.Fatalf("simulator has %d charges, want %d (one per event): %+v", len(charges), len(bodies), charges)
	}
	for _, b := range bodies {
		entry := e.MustEntry(tb, b)
		if entry.State != keybrake.EntryCharged {
			tb.Fatalf("entry %s is %s, want charged", entry.Key, entry.State)
		}
		n := 0
		for _, c := range charges {
			if c.ID == entry.ChargeID {
				n++
			}
		}
		if n != 1 {
			tb.Fatalf("charge %s of %s found %d times in the simulator", entry.ChargeID, entry.Key, n)
		}
	}
}

// MustEntry returns the ledger entry of the event body.
func (e *Env) MustEntry(tb testing.TB, body string) *keybrake.LedgerEntry {
	tb.Helper()
	ev, err := billing.DecodeEvent([]byte(body))
	if err != nil {
		tb.Fatal(err)
	}
	entry, err := e.Store.FindEntry(context.Background(), ev.Key(namespace))
	if err != nil {
		tb.Fatalf("FindEntry: %v", err)
	}
	return entry
}

// ConsumerInfo returns the durable's info.
func (e *Env) ConsumerInfo(tb testing.TB, durable string) *jsapi.ConsumerInfo {
	tb.Helper()
	c, err := e.JS(tb).Consumer(context.Background(), stream, durable)
	if err != nil {
		tb.Fatal(err)
	}
	ci, err := c.Info(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return ci
}

// MustDeadLetters waits for n dead letters in the dead-letter stream and
// returns them.
func (e *Env) MustDeadLetters(tb testing.TB, n int) []jetstream.DeadLetter {
	tb.Helper()
	js := e.JS(tb)
	ctx := context.Background()
	st, err := js.Stream(ctx, deadStream)
	if err != nil {
		tb.Fatal(err)
	}
	WaitFor(tb, fmt.Sprintf("%d dead letters", n), func() bool {
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs >= uint64(n)
	})
	var out []jetstream.DeadLetter
	for seq := uint64(1); len(out) < n; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			tb.Fatal(err)
		}
		var d jetstream.DeadLetter
		if err := json.Unmarshal(m.Data, &d); err != nil {
			tb.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// EventJSON returns a valid event body.
func EventJSON(customer, period string, amount int64) string {
	return fmt.Sprintf(`{"customer_id":%q,"billing_period":%q,"amount":%d,"currency":"usd","source":"tok_visa"}`, customer, period, amount)
}

// Recorder wraps a Handler, recording every body it sees and sending every
// result on Results.
type Recorder struct {
	H       jetstream.Handler
	Results chan billing.Result
	mu      sync.Mutex
	bodies  []string
}

// NewRecorder returns a Recorder around h.
func NewRecorder(h jetstream.Handler) *Recorder {
	return &Recorder{H: h, Results: make(chan billing.Result, 1000)}
}

// Process implements jetstream.Handler.
func (r *Recorder) Process(ctx context.Context, body []byte) billing.Result {
	r.mu.Lock()
	r.bodies = append(r.bodies, string(body))
	r.mu.Unlock()
	res := r.H.Process(ctx, body)
	r.Results <- res
	return res
}

// Bodies returns the bodies seen so far.
func (r *Recorder) Bodies() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.bodies...)
}

// MustResults waits for n results.
func (r *Recorder) MustResults(tb testing.TB, n int) []billing.Result {
	tb.Helper()
	var out []billing.Result
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for len(out) < n {
		select {
		case res := <-r.Results:
			out = append(out, res)
		case <-deadline.C:
			tb.Fatalf("got %d results, want %d: %+v", len(out), n, out)
		}
	}
	return out
}

// WaitFor polls cond until it holds, failing after 20 seconds.
func WaitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
