package zmq_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/keybrake/keybrake/billing"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/sqlite"
	"github.com/keybrake/keybrake/stripesim"
	"github.com/keybrake/keybrake/zmq"
)

// wait bounds every wait of the tests: long enough for a loaded CI machine,
// short enough to fail fast. Nothing is asserted about how long anything
// took.
const wait = 20 * time.Second

// namespace is the billing namespace of every test.
const namespace = "zmqtest"

// lease is the Processor's lease; tests that kill a worker holding one move
// the clock past it.
const lease = time.Minute

// Clock is an injected clock shared by the ledger, the proxy and the
// simulator.
type Clock = kbtest.Clock

// Env is the billing stack behind every ZeroMQ test: the Stripe simulator,
// the keybrake proxy in front of it on 127.0.0.1:0 with a SQLite store, a
// vault key, and a SQLite ledger shared by every worker's Processor.
type Env struct {
	Sim      *stripesim.Server
	Proxy    *khttp.Server
	Ledger   *sqlite.Store
	Clock    *Clock
	VaultKey string
	Logger   *slog.Logger
}

// MustEnv starts an Env; t.Cleanup closes it.
func MustEnv(tb testing.TB) *Env {
	tb.Helper()
	clock := kbtest.NewClock(kbtest.T0)
	sim, simURL := kbtest.Simulator(tb, stripesim.Options{Now: clock.Now})
	logger := kbtest.Logger()
	p := kbtest.Proxy(tb, simURL, func(p *khttp.Server) {
		p.Now = clock.Now
		p.Logger = logger
	})
	e := &Env{Sim: sim, Proxy: p, Ledger: kbtest.SQLite(tb, "ledger.db"), Clock: clock, Logger: logger}
	_, e.VaultKey = kbtest.VaultKey(tb, p.URL(), `{"total_usd_cap":100000,"label":"zmq-test"}`)
	return e
}

// Charger returns the Charger every worker uses: stripe-go through the
// keybrake proxy with the vault key.
func (e *Env) Charger() billing.Charger {
	return &billing.StripeCharger{BaseURL: e.Proxy.URL(), Key: e.VaultKey}
}

// Processor returns a new Processor on the shared ledger, as a new worker
// process would have. charger nil means e.Charger().
func (e *Env) Processor(charger billing.Charger) *billing.Processor {
	if charger == nil {
		charger = e.Charger()
	}
	return &billing.Processor{
		Ledger:    e.Ledger,
		Charger:   charger,
		Namespace: namespace,
		Owner:     "zmq-test",
		Lease:     lease,
		Now:       e.Clock.Now,
		Logger:    e.Logger,
		Backoff:   func(int) time.Duration { return 10 * time.Millisecond },
	}
}

// Charges returns the simulator's charges created under key, whatever their
// status.
func (e *Env) Charges(key string) []stripesim.Charge {
	var out []stripesim.Charge
	for _, c := range e.Sim.GroundTruth().Charges {
		if c.Metadata[billing.MetadataKey] == key {
			out = append(out, c)
		}
	}
	return out
}

// MustOneCharge fails unless exactly one succeeded charge exists for key,
// with id chargeID, and no other charge for it.
func (e *Env) MustOneCharge(tb testing.TB, key, chargeID string) {
	tb.Helper()
	cs := e.Charges(key)
	if len(cs) != 1 || cs[0].Status != "succeeded" || cs[0].ID != chargeID {
		tb.Fatalf("charges for %s: %+v, want exactly one succeeded charge %s", key, cs, chargeID)
	}
}

// Event returns a valid billing event for customer.
func Event(customer string) *billing.Event {
	return &billing.Event{CustomerID: customer, BillingPeriod: "2026-11", Amount: 4200, Currency: "usd", Source: "tok_visa"}
}

// MustEnvelope returns ev's envelope.
func MustEnvelope(tb testing.TB, ev *billing.Event) *zmq.Envelope {
	tb.Helper()
	env, err := zmq.NewEnvelope(namespace, ev)
	if err != nil {
		tb.Fatal(err)
	}
	return env
}

// Opener is a worker or producer.
type Opener interface {
	Open() error
	Close() error
}

// MustOpen opens o; t.Cleanup closes it.
func MustOpen[T Opener](tb testing.TB, o T) T {
	tb.Helper()
	if err := o.Open(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { o.Close() })
	return o
}

// Crash wraps a Handler: while armed, the next Process charges through the
// real Processor, reports its result on Charged, and then never returns
// (until the worker is closed, which cancels its context): the worker died
// after charging and before replying or acking.
type Crash struct {
	H       zmq.Handler
	Charged chan billing.Result
	armed   sync.Once
}

// NewCrash returns an armed Crash around h.
func NewCrash(h zmq.Handler) *Crash {
	return &Crash{H: h, Charged: make(chan billing.Result, 1)}
}

// Process implements zmq.Handler.
func (c *Crash) Process(ctx context.Context, body []byte) billing.Result {
	res := c.H.Process(ctx, body)
	first := false
	c.armed.Do(func() { first = true })
	if first {
		c.Charged <- res
		<-ctx.Done()
	}
	return res
}

// StuckCharger is a Charger whose first Charge never reaches Stripe: it
// reports on Entered and blocks until its context ends, as a worker killed
// between the ledger claim and the Stripe call. Later calls go through.
type StuckCharger struct {
	billing.Charger
	Entered chan struct{}
	once    sync.Once
}

// Charge implements billing.Charger.
func (s *StuckCharger) Charge(ctx context.Context, req billing.ChargeRequest) (billing.ChargeResult, error) {
	first := false
	s.once.Do(func() { first = true })
	if first {
		close(s.Entered)
		<-ctx.Done()
		return billing.ChargeResult{}, ctx.Err()
	}
	return s.Charger.Charge(ctx, req)
}

// Receive waits for a value on ch.
func Receive[T any](tb testing.TB, ch <-chan T, what string) T {
	tb.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(wait):
		tb.Fatalf("timed out waiting for %s", what)
	}
	panic("unreachable")
}

// Outcome is the result of a client's Send.
type Outcome struct {
	Reply *zmq.Reply
	Err   error
}

// Go runs send in a goroutine and returns the channel of its outcome.
func Go(send func() (*zmq.Reply, error)) <-chan Outcome {
	ch := make(chan Outcome, 1)
	go func() {
		r, err := send()
		ch <- Outcome{r, err}
	}()
	return ch
}

// MustFinal waits for a send's outcome and fails unless it is a reply with
// status.
func MustFinal(tb testing.TB, ch <-chan Outcome, status zmq.Status) *zmq.Reply {
	tb.Helper()
	o := Receive(tb, ch, "the reply")
	if o.Err != nil {
		tb.Fatalf("send: %v", o.Err)
	}
	if o.Reply.Status != status {
		tb.Fatalf("reply %+v, want status %s", o.Reply, status)
	}
	return o.Reply
}

// Ctx returns a context bounded by wait.
func Ctx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	tb.Cleanup(cancel)
	return ctx
}
