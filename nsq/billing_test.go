package nsq_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsqio/nsq/nsqd"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/billing"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/nsq"
	"github.com/keybrake/keybrake/sqlite"
	"github.com/keybrake/keybrake/stripesim"
)

const (
	namespace  = "test"
	adminToken = "kbadm_test_token"
)

// BillingEnv is the whole exactly-once path: an nsqd, the keybrake proxy on
// 127.0.0.1:0 in front of the simulator, a vault key, and the worker's
// SQLite ledger.
type BillingEnv struct {
	NSQD     *NSQD
	Sim      *stripesim.Server
	Proxy    *khttp.Server
	Ledger   *sqlite.Store
	VaultKey string
}

// MustBilling starts a BillingEnv; mod adjusts nsqd's options.
func MustBilling(tb testing.TB, mod func(*nsqd.Options)) *BillingEnv {
	tb.Helper()
	e := &BillingEnv{NSQD: MustNSQD(tb, mod)}
	sim, err := stripesim.New(stripesim.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	simSrv := httptest.NewServer(sim)
	tb.Cleanup(simSrv.Close)
	e.Sim = sim

	store, err := sqlite.Open(filepath.Join(tb.TempDir(), "keybrake.db"))
	if err != nil {
		tb.Fatal(err)
	}
	s := khttp.NewServer()
	s.Addr = "127.0.0.1:0"
	s.Store = store
	s.Upstream, _ = url.Parse(simSrv.URL)
	s.UpstreamKey = "sk_test_upstream"
	s.AdminToken = adminToken
	s.Simulated = true
	s.Logger = slog.New(slog.DiscardHandler)
	if err := s.Open(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		s.Close()
		store.Close()
	})
	e.Proxy = s

	req, _ := http.NewRequest("POST", s.URL()+"/vault/keys", strings.NewReader(`{"daily_usd_cap":1000,"label":"billing"}`))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var key struct {
		VaultKey string `json:"vault_key"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&key); err != nil || key.VaultKey == "" {
		tb.Fatalf("create vault key: %d %v", resp.StatusCode, err)
	}
	e.VaultKey = key.VaultKey

	if e.Ledger, err = sqlite.Open(filepath.Join(tb.TempDir(), "ledger.db")); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Ledger.Close() })
	return e
}

// Processor returns a Processor charging through the proxy with the vault
// key, retrying after 10ms.
func (e *BillingEnv) Processor() *billing.Processor {
	return &billing.Processor{
		Ledger:    e.Ledger,
		Charger:   &billing.StripeCharger{BaseURL: e.Proxy.URL(), Key: e.VaultKey},
		Namespace: namespace,
		Owner:     "test",
		Backoff:   func(int) time.Duration { return 10 * time.Millisecond },
	}
}

// Worker opens a Worker on topic "billing" with h (the real Processor if
// nil); mod adjusts it first.
func (e *BillingEnv) Worker(tb testing.TB, h nsq.Handler, mod func(*nsq.Worker)) (*nsq.Worker, <-chan nsq.Response) {
	tb.Helper()
	if h == nil {
		h = e.Processor()
	}
	hook, resp := Responses()
	w := &nsq.Worker{Topic: "billing", NSQDAddrs: []string{e.NSQD.TCP}, Handler: h, OnResponse: hook, MsgTimeout: time.Second}
	if mod != nil {
		mod(w)
	}
	return MustOpen(tb, w), resp
}

// Charges counts the simulator's charges with key in their metadata.
func (e *BillingEnv) Charges(key string) (succeeded, failed int) {
	for _, c := range e.Sim.GroundTruth().Charges {
		if c.Metadata[billing.MetadataKey] != key {
			continue
		}
		switch c.Status {
		case "succeeded":
			succeeded++
		case "failed":
			failed++
		}
	}
	return succeeded, failed
}

// MustEntry returns the ledger entry of key.
func (e *BillingEnv) MustEntry(tb testing.TB, key string) *keybrake.LedgerEntry {
	tb.Helper()
	en, err := e.Ledger.FindEntry(context.Background(), key)
	if err != nil {
		tb.Fatal(err)
	}
	return en
}

// event returns a billing event's body and its key.
func event(tb testing.TB, customer, source string, amount int) (body, key string) {
	tb.Helper()
	b, _ := json.Marshal(map[string]any{"customer_id": customer, "billing_period": "2026-11", "amount": amount, "currency": "usd", "source": source})
	ev, err := billing.DecodeEvent(b)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b), ev.Key(namespace)
}

// Cutter is a TCP proxy whose connections the test can cut, as a crash or a
// network partition would.
type Cutter struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

// MustCutter proxies a loopback port to target.
func MustCutter(tb testing.TB, target string) *Cutter {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	c := &Cutter{ln: ln, target: target}
	go c.serve()
	tb.Cleanup(c.Cut)
	return c
}

// Addr is the proxy's address.
func (c *Cutter) Addr() string { return c.ln.Addr().String() }

func (c *Cutter) serve() {
	for {
		in, err := c.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", c.target)
		if err != nil {
			in.Close()
			continue
		}
		c.mu.Lock()
		c.conns = append(c.conns, in, out)
		c.mu.Unlock()
		go func() { io.Copy(out, in); out.Close() }()
		go func() { io.Copy(in, out); in.Close() }()
	}
}

// Cut closes the listener and every connection.
func (c *Cutter) Cut() {
	c.ln.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
}

func TestWorkerBilling(t *testing.T) {
	// A worker charges, then dies before FIN: nsqd redelivers (Attempts 2)
	// and the second delivery finds the ledger's outcome, calling Stripe
	// never again.
	t.Run("CrashAfterChargeBeforeFIN", func(t *testing.T) {
		e := MustBilling(t, nil)
		body, key := event(t, "acct_crash", "tok_visa", 4200)
		cut := MustCutter(t, e.NSQD.TCP)
		charged, dead := make(chan billing.Result, 1), make(chan struct{})
		defer close(dead)
		proc := e.Processor()
		e.Worker(t, nsq.HandlerFunc(func(ctx context.Context, b []byte) billing.Result {
			charged <- proc.Process(ctx, b)
			<-dead // the process is gone: no FIN, no TOUCH that reaches nsqd
			return billing.Result{}
		}), func(w *nsq.Worker) { w.NSQDAddrs = []string{cut.Addr()}; w.ShutdownTimeout = time.Millisecond })
		MustPublish(t, e.NSQD.TCP, "billing", body)
		if r := Receive(t, charged); r.Outcome != billing.OutcomeCharged {
			t.Fatalf("first delivery: %+v", r)
		}
		cut.Cut()

		_, resp := e.Worker(t, nil, nil)
		r := Receive(t, resp)
		if r.Delivery.Attempts != 2 || r.Result.Outcome != billing.OutcomeAlreadyDone || r.Verb != nsq.VerbFinish {
			t.Fatalf("redelivery: attempts %d, %+v", r.Delivery.Attempts, r)
		}
		if ok, _ := e.Charges(key); ok != 1 {
			t.Fatalf("%d charges, want 1", ok)
		}
		if en := e.MustEntry(t, key); en.State != keybrake.EntryCharged || en.ChargeID != r.Result.ChargeID {
			t.Fatalf("ledger %+v", en)
		}
	})

	// Stripe charges but the answer is lost (500 after processing); the
	// worker requeues and is restarted; the new worker, on a new
	// connection, sends the same key and gets the same charge.
	t.Run("ConsumerRestart", func(t *testing.T) {
		e := MustBilling(t, nil)
		body, key := event(t, "acct_restart", "tok_visa", 1999)
		if _, err := e.Sim.AddFault(stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultFailAfter, Nth: 1}); err != nil {
			t.Fatal(err)
		}
		proc := e.Processor()
		proc.Backoff = func(int) time.Duration { return 500 * time.Millisecond }
		// The requeue delay outlasts the restart, so the redelivery reaches
		// the new worker.
		w1, resp1 := e.Worker(t, proc, func(w *nsq.Worker) { w.MaxRequeueDelay = time.Minute })
		MustPublish(t, e.NSQD.TCP, "billing", body)
		if r := Receive(t, resp1); r.Verb != nsq.VerbRequeue || r.Delay != 500*time.Millisecond || r.Result.Outcome != billing.OutcomeTransient {
			t.Fatalf("first delivery: %+v", r)
		}
		if err := w1.Close(); err != nil {
			t.Fatal(err)
		}
		_, resp2 := e.Worker(t, nil, nil)
		r := Receive(t, resp2)
		if r.Delivery.Attempts != 2 || r.Result.Outcome != billing.OutcomeCharged || r.Verb != nsq.VerbFinish || r.Result.Key != key {
			t.Fatalf("after restart: attempts %d, %+v", r.Delivery.Attempts, r)
		}
		if ok, _ := e.Charges(key); ok != 1 {
			t.Fatalf("%d charges, want 1", ok)
		}
	})

	// Stripe answers after 2.5s, nsqd's message timeout is 1s: TOUCH keeps
	// the message, nsqd never redelivers it.
	t.Run("StripeSlowerThanMsgTimeout", func(t *testing.T) {
		e := MustBilling(t, func(o *nsqd.Options) { o.MsgTimeout = time.Second })
		body, key := event(t, "acct_slow", "tok_visa", 500)
		if _, err := e.Sim.AddFault(stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultLatency, Latency: 2500 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		_, resp := e.Worker(t, nil, func(w *nsq.Worker) { w.Concurrency = 2 })
		MustPublish(t, e.NSQD.TCP, "billing", body)
		r := Receive(t, resp)
		if r.Delivery.Attempts != 1 || r.Result.Outcome != billing.OutcomeCharged || r.Verb != nsq.VerbFinish {
			t.Fatalf("attempts %d, %+v", r.Delivery.Attempts, r)
		}
		if c := e.NSQD.Channel("billing", "billing"); c.TimeoutCount != 0 || c.RequeueCount != 0 {
			t.Fatalf("nsqd timed out %d, requeued %d", c.TimeoutCount, c.RequeueCount)
		}
		if ok, _ := e.Charges(key); ok != 1 {
			t.Fatalf("%d charges, want 1", ok)
		}
	})

	// A worker claimed the entry and died before calling Stripe: its lease
	// expired; the next delivery takes the entry over and charges once.
	t.Run("KilledBetweenClaimAndStripe", func(t *testing.T) {
		e := MustBilling(t, nil)
		body, key := event(t, "acct_claimed", "tok_visa", 700)
		ev, _ := billing.DecodeEvent([]byte(body))
		now := time.Now()
		claim, err := e.Ledger.Claim(context.Background(), keybrake.ClaimArgs{
			Entry: &keybrake.LedgerEntry{Key: key, Fingerprint: ev.Fingerprint(namespace), Amount: ev.Amount, Currency: ev.Currency},
			Owner: "dead-worker/1", Now: now.Add(-2 * time.Minute), Until: now.Add(-time.Minute),
		})
		if err != nil || !claim.Claimed {
			t.Fatalf("claim: %+v, %v", claim, err)
		}
		_, resp := e.Worker(t, nil, nil)
		MustPublish(t, e.NSQD.TCP, "billing", body)
		if r := Receive(t, resp); r.Result.Outcome != billing.OutcomeCharged || r.Verb != nsq.VerbFinish {
			t.Fatalf("%+v", r)
		}
		if ok, _ := e.Charges(key); ok != 1 {
			t.Fatalf("%d charges, want 1", ok)
		}
		if en := e.MustEntry(t, key); en.State != keybrake.EntryCharged || en.Attempts != 2 {
			t.Fatalf("ledger %+v", en)
		}
	})

	t.Run("DeclineAckedAndRecorded", func(t *testing.T) {
		e := MustBilling(t, nil)
		body, key := event(t, "acct_declined", "tok_chargeDeclined", 900)
		_, resp := e.Worker(t, nil, nil)
		MustPublish(t, e.NSQD.TCP, "billing", body)
		if r := Receive(t, resp); r.Result.Outcome != billing.OutcomeDeclined || r.Verb != nsq.VerbFinish {
			t.Fatalf("%+v", r)
		}
		if ok, failed := e.Charges(key); ok != 0 || failed != 1 {
			t.Fatalf("%d succeeded and %d failed charges, want 0 and 1", ok, failed)
		}
		if en := e.MustEntry(t, key); en.State != keybrake.EntryDeclined || en.Reason == "" {
			t.Fatalf("ledger %+v", en)
		}
	})

	t.Run("PublishedTwiceChargedOnce", func(t *testing.T) {
		e := MustBilling(t, nil)
		body, key := event(t, "acct_twice", "tok_visa", 1500)
		_, resp := e.Worker(t, nil, nil)
		MustPublish(t, e.NSQD.TCP, "billing", body, body)
		outcomes := map[billing.Outcome]int{}
		for range 2 {
			r := Receive(t, resp)
			if r.Verb != nsq.VerbFinish {
				t.Fatalf("%+v", r)
			}
			outcomes[r.Result.Outcome]++
		}
		if outcomes[billing.OutcomeCharged] != 1 || outcomes[billing.OutcomeAlreadyDone] != 1 {
			t.Fatalf("outcomes %v", outcomes)
		}
		if ok, _ := e.Charges(key); ok != 1 {
			t.Fatalf("%d charges, want 1", ok)
		}
	})

	t.Run("PoisonDeadLettered", func(t *testing.T) {
		e := MustBilling(t, nil)
		dead := Subscribe(t, e.NSQD.TCP, "billing.dead")
		e.Worker(t, nil, nil)
		for _, tc := range []struct{ body, reason string }{
			{`{"customer_id":"acct_1",`, "malformed event"},
			{`{"customer_id":"acct_1","billing_period":"2026-11","amount":100,"currency":"usd","source":"tok_visa","amout":1}`, "amout"},
		} {
			MustPublish(t, e.NSQD.TCP, "billing", tc.body)
			d := MustDeadLetter(t, dead)
			if !strings.Contains(d.Reason, tc.reason) || d.Outcome != billing.OutcomeMalformed || d.Body != tc.body || d.Attempts != 1 {
				t.Fatalf("dead letter %+v, want reason with %q", d, tc.reason)
			}
		}
		if n := len(e.Sim.GroundTruth().Charges); n != 0 {
			t.Fatalf("%d charges", n)
		}
	})

	t.Run("ConflictDeadLettered", func(t *testing.T) {
		e := MustBilling(t, nil)
		dead := Subscribe(t, e.NSQD.TCP, "billing.dead")
		first, key := event(t, "acct_conflict", "tok_visa", 1000)
		second, _ := event(t, "acct_conflict", "tok_visa", 10000)
		_, resp := e.Worker(t, nil, nil)
		MustPublish(t, e.NSQD.TCP, "billing", first)
		if r := Receive(t, resp); r.Result.Outcome != billing.OutcomeCharged {
			t.Fatalf("%+v", r)
		}
		MustPublish(t, e.NSQD.TCP, "billing", second)
		d := MustDeadLetter(t, dead)
		if d.Outcome != billing.OutcomeFailed || d.Key != key || d.Body != second {
			t.Fatalf("dead letter %+v", d)
		}
		if ok, _ := e.Charges(key); ok != 1 {
			t.Fatalf("%d charges, want 1", ok)
		}
	})

	t.Run("RetryExhaustedDeadLettered", func(t *testing.T) {
		e := MustBilling(t, nil)
		dead := Subscribe(t, e.NSQD.TCP, "billing.dead")
		body, key := event(t, "acct_down", "tok_visa", 300)
		if _, err := e.Sim.AddFault(stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultFailBefore, Status: 503}); err != nil {
			t.Fatal(err)
		}
		e.Worker(t, nil, func(w *nsq.Worker) { w.MaxAttempts = 3 })
		MustPublish(t, e.NSQD.TCP, "billing", body)
		d := MustDeadLetter(t, dead)
		if d.Attempts != 3 || d.Key != key || d.Outcome != billing.OutcomeTransient || !strings.HasPrefix(d.Reason, "gave up after 3 attempts: ") {
			t.Fatalf("dead letter %+v", d)
		}
		if n := len(e.Sim.GroundTruth().Charges); n != 0 {
			t.Fatalf("%d charges", n)
		}
		if en := e.MustEntry(t, key); en.State != keybrake.EntryPending || en.LeaseOwner != "" {
			t.Fatalf("ledger %+v, want pending and released", en)
		}
	})
}
