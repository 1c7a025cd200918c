package chaos

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keybrake/keybrake/billing"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/sqlite"
	"github.com/keybrake/keybrake/stripesim"
)

const (
	namespace  = "chaos"
	eventMeta  = "chaos_event" // metadata key carrying the event's ID on every charge
	simSecret  = "sk_test_chaos_upstream"
	adminToken = "kbadm_chaos"
	period     = "2026-11"
)

// event is one billing event of a run.
type event struct {
	id       string
	body     []byte
	customer string
	amount   int64 // cents
	declined bool  // paid with a card that declines: no charge is the right outcome
}

// makeEvents returns n events from seed: amounts from $5 to $200, and about
// 2% paid with a declining card, so "lost" is told apart from "declined".
func makeEvents(seed uint64, n int) []event {
	rng := rand.New(rand.NewPCG(seed, 0x6576656e7473))
	out := make([]event, n)
	for i := range out {
		e := event{id: "e" + strconv.Itoa(i), customer: fmt.Sprintf("cust_%05d", i), amount: 500 + rng.Int64N(19501)}
		source := "tok_visa"
		if rng.Float64() < 0.02 {
			e.declined, source = true, "tok_chargeDeclined"
		}
		e.body, _ = json.Marshal(billing.Event{CustomerID: e.customer, BillingPeriod: period, Amount: e.amount, Currency: "usd",
			Source: source, Description: "chaos " + e.id, Metadata: map[string]string{eventMeta: e.id}})
		out[i] = e
	}
	return out
}

// eventIndex returns the index of the event whose ID is id, or -1.
func eventIndex(id string) int {
	if !strings.HasPrefix(id, "e") {
		return -1
	}
	i, err := strconv.Atoi(id[1:])
	if err != nil {
		return -1
	}
	return i
}

// clock is the ledger's clock: the wall clock plus what advance added, as
// the simulator's is.
type clock struct{ offset atomic.Int64 }

func (c *clock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// env is a run's own simulator, ledger and proxy.
type env struct {
	sim      *stripesim.Server
	simSrv   *httptest.Server
	ledger   *sqlite.Store
	store    *sqlite.Store
	proxy    *khttp.Server
	vaultKey string
}

func (e *env) Close() error {
	if e.proxy != nil {
		e.proxy.Close()
	}
	if e.store != nil {
		e.store.Close()
	}
	if e.ledger != nil {
		e.ledger.Close()
	}
	if e.simSrv != nil {
		e.simSrv.Close()
	}
	return nil
}

// run is one mode under one strategy.
type run struct {
	h        *harness
	mode     *Mode
	strategy Strategy
	name     string // unique per run, for topics and streams: "r7"
	dir      string
	events   []event
	faults   map[int]fault
	expect   []int32 // acknowledgements each event needs
	acks     []atomic.Int32
	env      *env
	clock    *clock
	charger  *injector
	proc     *billing.Processor
	rows     sync.Map // the Unsafe pre-flight table: content key → struct{}
	log      *slog.Logger

	deliveries atomic.Int64
	busy       atomic.Int64 // handlers running
}

func (h *harness) run(ctx context.Context, m *Mode, st Strategy, n, total int) (*Row, error) {
	start := time.Now()
	r := &run{h: h, mode: m, strategy: st, name: "r" + strconv.Itoa(n), clock: &clock{}, log: h.opts.Logger.With("mode", m.Name, "strategy", st)}
	r.dir = filepath.Join(h.dir, r.name)
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return nil, err
	}
	defer os.RemoveAll(r.dir)
	r.events = makeEvents(h.opts.Seed, h.opts.Events)
	r.faults = m.plan(h.opts.Seed, len(r.events), h.opts.Fraction)
	r.expect = make([]int32, len(r.events))
	r.acks = make([]atomic.Int32, len(r.events))
	for i := range r.expect {
		r.expect[i] = int32(max(1, r.faults[i].copies) * max(1, m.acks))
	}
	if err := r.setup(); err != nil {
		return nil, err
	}
	defer r.env.Close()

	ctx, cancel := context.WithTimeout(ctx, h.opts.RunTimeout)
	defer cancel()
	stopProgress := r.progress(n, total)
	err := m.drive(ctx, r)
	stopProgress()
	if err != nil {
		return nil, err
	}
	row := r.count()
	row.Seconds = time.Since(start).Seconds()
	if p := h.opts.Progress; p != nil {
		p(Progress{Mode: m.Name, Strategy: st, Run: n, Runs: total, Events: len(r.events), Settled: r.settled(),
			Deliveries: r.deliveries.Load(), Done: true, Row: row})
	}
	return row, nil
}

// setup starts the run's simulator, and the ledger and proxy its strategy
// needs.
func (r *run) setup() error {
	e := &env{}
	r.env = e
	var err error
	if e.sim, err = stripesim.New(stripesim.Options{}); err != nil {
		return err
	}
	e.simSrv = httptest.NewServer(e.sim)
	var next billing.Charger
	switch r.strategy {
	case Unsafe:
		next = &rawCharger{base: e.simSrv.URL, key: simSecret, client: r.h.client}
	case ContentKey, KeyLedger:
		next = &billing.StripeCharger{BaseURL: e.simSrv.URL, Key: simSecret, HTTPClient: r.h.client}
	case UnsafeCapped, UnsafeGuarded:
		if err := r.startProxy(); err != nil {
			return err
		}
		next = &rawCharger{base: e.proxy.URL(), key: e.vaultKey, client: r.h.client}
	case Full:
		if err := r.startProxy(); err != nil {
			return err
		}
		next = &billing.StripeCharger{BaseURL: e.proxy.URL(), Key: e.vaultKey, HTTPClient: r.h.client}
	}
	r.charger = &injector{next: next, r: r, calls: make([]atomic.Int32, len(r.events))}
	if r.strategy == KeyLedger || r.strategy == Full {
		if e.ledger, err = sqlite.Open(filepath.Join(r.dir, "ledger.db")); err != nil {
			return err
		}
		r.proc = &billing.Processor{Ledger: e.ledger, Charger: r.charger, Namespace: namespace, Owner: "chaos-" + r.name,
			Lease: ledgerLease, ExtendEvery: ledgerLease / 4, Now: r.clock.Now, OperatorDelay: time.Second,
			Backoff: func(int) time.Duration { return 50 * time.Millisecond }}
	}
	return nil
}

// startProxy starts keybrake in front of the simulator, with a vault key
// whose lifetime cap is the expected total × 1.10: the seeds'
// per-billing-period key.
func (r *run) startProxy() error {
	e := r.env
	var err error
	if e.store, err = sqlite.Open(filepath.Join(r.dir, "keybrake.db")); err != nil {
		return err
	}
	p := khttp.NewServer()
	p.Addr = "127.0.0.1:0"
	p.Store = e.store
	p.Upstream, _ = url.Parse(e.simSrv.URL)
	p.UpstreamKey = simSecret
	p.AdminToken = adminToken
	p.Simulated = true
	p.Logger = slog.New(slog.DiscardHandler)
	if err := p.Open(); err != nil {
		return err
	}
	e.proxy = p
	var cents int64
	for _, ev := range r.events {
		if !ev.declined {
			cents += ev.amount
		}
	}
	capCents := cents * 110 / 100
	body := fmt.Sprintf(`{"label":"chaos %s","total_usd_cap":%d.%02d}`, r.mode.Name, capCents/100, capCents%100)
	if r.strategy == UnsafeGuarded {
		// The guard alone: no cap. A day's window covers every run.
		body = fmt.Sprintf(`{"label":"chaos %s","guards":{"duplicate":{"window_seconds":86400,"match_metadata":%q}}}`, r.mode.Name, eventMeta)
	}
	req, _ := http.NewRequest("POST", p.URL()+"/vault/keys", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.h.client.Do(req)
	if err != nil {
		return fmt.Errorf("create vault key: %w", err)
	}
	defer resp.Body.Close()
	var key struct {
		VaultKey string `json:"vault_key"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&key); err != nil || key.VaultKey == "" {
		return fmt.Errorf("create vault key: status %d: %v", resp.StatusCode, err)
	}
	e.vaultKey = key.VaultKey
	return nil
}

// advance moves the simulator's and the ledger's clocks forward together.
func (r *run) advance(d time.Duration) {
	r.clock.offset.Add(int64(d))
	r.env.sim.Advance(d)
}

// verdict is what a worker tells its transport after one delivery.
type verdict struct {
	kind  verdictKind
	delay time.Duration // for retry
	event int           // the event's index, -1 if the body did not decode
}

type verdictKind int

const (
	ack   verdictKind = iota // done: FIN, Ack, reply
	retry                    // redeliver after delay
	crash                    // the worker died: no answer at all
)

// crashed is the panic of an injected crash; process recovers it.
type crashed struct{}

// process handles one delivery of body as the run's strategy does; tag is
// the delivery metadata the seed's unsafe key includes.
func (r *run) process(ctx context.Context, body []byte, tag string) (v verdict) {
	r.deliveries.Add(1)
	r.busy.Add(1)
	defer r.busy.Add(-1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ev, err := billing.DecodeEvent(body)
	if err != nil {
		return verdict{kind: ack, event: -1}
	}
	idx := eventIndex(ev.Metadata[eventMeta])
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(crashed); !ok {
				panic(p)
			}
			// The process is gone: nothing it started may go on (the
			// Processor's lease keeper stops with ctx).
			cancel()
			v = verdict{kind: crash, event: idx}
		}
		if v.kind == ack && idx >= 0 && idx < len(r.acks) {
			r.acks[idx].Add(1)
		}
	}()
	if r.proc != nil {
		res := r.proc.Process(ctx, body)
		if res.Action == billing.ActionRetry {
			return verdict{kind: retry, delay: res.Delay, event: idx}
		}
		return verdict{kind: ack, event: idx}
	}
	key := ev.Key(namespace)
	if r.strategy == Unsafe || r.strategy == UnsafeCapped || r.strategy == UnsafeGuarded {
		if r.mode.preflight {
			// The seed's pre-flight: INSERT … ON CONFLICT DO NOTHING, and
			// skip the event when the row was already there.
			if _, loaded := r.rows.LoadOrStore(key, struct{}{}); loaded {
				return verdict{kind: ack, event: idx}
			}
		} else {
			key = unsafeKey(r.mode, ev, tag)
		}
	}
	_, err = r.charger.Charge(ctx, billing.ChargeRequest{Key: key, Amount: ev.Amount, Currency: ev.Currency, Source: ev.Source,
		Description: ev.Description, Metadata: ev.Metadata})
	var ce *billing.ChargeError
	if errors.As(err, &ce) && (ce.Code == "keybrake_spend_cap_exceeded" || ce.Code == "keybrake_duplicate_charge") {
		// The seed's worker has no ledger to come back to the event: the
		// refusal is logged and the message acknowledged. A duplicate's
		// refusal means the event was charged before.
		return verdict{kind: ack, event: idx}
	}
	if err != nil && billing.ClassOf(err) == billing.ClassTransient {
		return verdict{kind: retry, delay: 50 * time.Millisecond, event: idx}
	}
	return verdict{kind: ack, event: idx}
}

// unsafeKey is the seed's key: business fields and a delivery tag, or none.
func unsafeKey(m *Mode, ev *billing.Event, tag string) string {
	if m.noKey {
		return ""
	}
	sum := sha256.Sum256([]byte(tag + ":" + ev.CustomerID + ":" + ev.BillingPeriod))
	return hex.EncodeToString(sum[:])[:32]
}

// settled counts the events acknowledged at least as often as they were
// published.
func (r *run) settled() int {
	n := 0
	for i := range r.acks {
		if r.acks[i].Load() >= r.expect[i] {
			n++
		}
	}
	return n
}

// settledTimes reports whether every event was acknowledged at least n
// times.
func (r *run) settledTimes(n int32) bool {
	for i := range r.acks {
		if r.acks[i].Load() < n {
			return false
		}
	}
	return true
}

// allSettled reports whether every event is settled.
func (r *run) allSettled() bool { return r.settled() == len(r.events) }

// waitFor polls cond every 20ms until it holds, ctx ends, or the run's
// deadline passes.
func (r *run) waitFor(ctx context.Context, what string, cond func() bool) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s (%d of %d events settled, %d deliveries): %w", what, r.settled(), len(r.events), r.deliveries.Load(), ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// quiet waits until cond has held on three checks in a row, so a
// redelivery on its way is not mistaken for the end.
func (r *run) quiet(ctx context.Context, what string, cond func() bool) error {
	streak := 0
	return r.waitFor(ctx, what, func() bool {
		if cond() && r.busy.Load() == 0 {
			streak++
		} else {
			streak = 0
		}
		return streak >= 3
	})
}

func (r *run) progress(n, total int) (stop func()) {
	p := r.h.opts.Progress
	if p == nil {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				p(Progress{Mode: r.mode.Name, Strategy: r.strategy, Run: n, Runs: total, Events: len(r.events),
					Settled: r.settled(), Deliveries: r.deliveries.Load()})
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// count reads the simulator's ground truth: the succeeded charges of each
// event, by the event ID every charge carries in its metadata.
func (r *run) count() *Row {
	per := make([]int, len(r.events))
	row := &Row{Mode: r.mode.Name, Transport: r.mode.Transport, Strategy: r.strategy, Events: len(r.events),
		Deliveries: r.deliveries.Load(), OverCapRefused: r.charger.overCap.Load()}
	for _, ev := range r.events {
		if !ev.declined {
			row.ExpectedCents += ev.amount
		}
	}
	for _, c := range r.env.sim.GroundTruth().Charges {
		if c.Status != "succeeded" {
			continue
		}
		i := eventIndex(c.Metadata[eventMeta])
		if i < 0 || i >= len(per) {
			continue
		}
		per[i]++
		row.Charges++
		row.ChargedCents += c.Amount
	}
	for i, ev := range r.events {
		if ev.declined {
			row.Declined++
			continue
		}
		switch {
		case per[i] == 0:
			row.Lost++
		case per[i] > 1:
			row.Duplicates += per[i] - 1
			row.DuplicatedEvents++
			row.OverchargedCents += int64(per[i]-1) * ev.amount
		}
	}
	return row
}

// injector is the Charger of every strategy: it makes the mode's faults
// happen around the real call (the worker dying before or after it, or the
// call being slow) and counts the proxy's over-cap refusals.
type injector struct {
	next    billing.Charger
	r       *run
	calls   []atomic.Int32
	overCap atomic.Int64
}

// Charge makes the selected event's faults happen around the real call.
func (in *injector) Charge(ctx context.Context, req billing.ChargeRequest) (billing.ChargeResult, error) {
	i := eventIndex(req.Metadata[eventMeta])
	if i < 0 || i >= len(in.calls) {
		return in.call(ctx, req)
	}
	n := int(in.calls[i].Add(1))
	f := in.r.faults[i]
	if n <= f.crashBefore {
		panic(crashed{})
	}
	if n <= f.slow {
		t := time.NewTimer(f.slowFor)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return billing.ChargeResult{}, ctx.Err()
		}
	}
	res, err := in.call(ctx, req)
	if n <= f.crashAfter {
		panic(crashed{})
	}
	return res, err
}

func (in *injector) call(ctx context.Context, req billing.ChargeRequest) (billing.ChargeResult, error) {
	res, err := in.next.Charge(ctx, req)
	var ce *billing.ChargeError
	if errors.As(err, &ce) && ce.Code == "keybrake_spend_cap_exceeded" {
		in.overCap.Add(1)
	}
	return res, err
}

// FindByMetadata passes the search through.
func (in *injector) FindByMetadata(ctx context.Context, key string) ([]billing.ChargeResult, error) {
	return in.next.FindByMetadata(ctx, key)
}

// rawCharger is the seeds' direct call: POST /v1/charges with the secret,
// an Idempotency-Key only when the key is not empty.
type rawCharger struct {
	base, key string
	client    *http.Client
}

func (c *rawCharger) Charge(ctx context.Context, req billing.ChargeRequest) (billing.ChargeResult, error) {
	form := url.Values{"amount": {strconv.FormatInt(req.Amount, 10)}, "currency": {req.Currency}, "source": {req.Source},
		"description": {req.Description}}
	for k, v := range req.Metadata {
		form.Set("metadata["+k+"]", v)
	}
	hr, err := http.NewRequestWithContext(ctx, "POST", c.base+"/v1/charges", strings.NewReader(form.Encode()))
	if err != nil {
		return billing.ChargeResult{}, err
	}
	hr.Header.Set("Authorization", "Bearer "+c.key)
	hr.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if req.Key != "" {
		hr.Header.Set("Idempotency-Key", req.Key)
	}
	resp, err := c.client.Do(hr)
	if err != nil {
		return billing.ChargeResult{}, err
	}
	defer resp.Body.Close()
	var out struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Error  struct {
			Type, Code, Message string
		} `json:"error"`
	}
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	json.Unmarshal(buf.Bytes(), &out)
	switch {
	case resp.StatusCode == 200:
		return billing.ChargeResult{ChargeID: out.ID, Status: out.Status, Amount: req.Amount, Currency: req.Currency}, nil
	case resp.StatusCode == 402:
		return billing.ChargeResult{}, &billing.ChargeError{Class: billing.ClassDeclined, Status: 402, Type: out.Error.Type, Code: out.Error.Code, Message: out.Error.Message}
	case resp.StatusCode == 409, resp.StatusCode == 429, resp.StatusCode >= 500:
		return billing.ChargeResult{}, &billing.ChargeError{Class: billing.ClassTransient, Status: resp.StatusCode, Type: out.Error.Type, Code: out.Error.Code, Message: out.Error.Message}
	}
	return billing.ChargeResult{}, &billing.ChargeError{Class: billing.ClassFailed, Status: resp.StatusCode, Type: out.Error.Type, Code: out.Error.Code, Message: out.Error.Message}
}

func (c *rawCharger) FindByMetadata(context.Context, string) ([]billing.ChargeResult, error) {
	return nil, nil
}
