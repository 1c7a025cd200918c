package jetstream_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jsapi "github.com/nats-io/nats.go/jetstream"

	"github.com/keybrake/keybrake/billing"
	"github.com/keybrake/keybrake/jetstream"
	"github.com/keybrake/keybrake/stripesim"
)

// Seed failure mode 1: AckWait (1s) expires during a slow Stripe call
// (2.5s). InProgress keeps the message: one delivery, one charge, even with
// a second worker on the durable waiting for a redelivery.
func TestWorker_AckWaitShorterThanStripeCall(t *testing.T) {
	e := MustEnv(t)
	if _, err := e.Sim.AddFault(stripesim.Fault{Path: "/v1/charges", Mode: stripesim.FaultLatency, Latency: 2500 * time.Millisecond, Count: 1}); err != nil {
		t.Fatal(err)
	}
	rec := NewRecorder(e.Processor("w"))
	for range 2 {
		w := e.Worker(t, "billing", rec)
		w.AckWait = time.Second
		MustOpen(t, w)
	}
	body := EventJSON("acct_1", "2026-11", 4200)
	e.Publish(t, body)

	res := rec.MustResults(t, 1)[0]
	if res.Outcome != billing.OutcomeCharged || res.Action != billing.ActionAck {
		t.Fatalf("result = %+v, want charged and ack", res)
	}
	WaitFor(t, "the ack", func() bool { return e.ConsumerInfo(t, "billing").AckFloor.Stream == 1 })
	ci := e.ConsumerInfo(t, "billing")
	if ci.Delivered.Consumer != 1 || ci.NumRedelivered != 0 {
		t.Fatalf("delivered %d times (redelivered %d), want once", ci.Delivered.Consumer, ci.NumRedelivered)
	}
	if n := len(rec.Bodies()); n != 1 {
		t.Fatalf("handler saw the event %d times, want 1", n)
	}
	e.MustChargesPerEvent(t, body)
}

// A transient 5xx: NakWithDelay, then the redelivery charges with the same
// key.
func TestWorker_Transient5xxThenSuccess(t *testing.T) {
	e := MustEnv(t)
	if _, err := e.Sim.AddFault(stripesim.Fault{Path: "/v1/charges", Mode: stripesim.FaultFailBefore, Status: 500, Count: 1}); err != nil {
		t.Fatal(err)
	}
	rec := NewRecorder(e.Processor("w"))
	MustOpen(t, e.Worker(t, "billing", rec))
	body := EventJSON("acct_1", "2026-11", 4200)
	e.Publish(t, body)

	rs := rec.MustResults(t, 2)
	if rs[0].Action != billing.ActionRetry || rs[1].Outcome != billing.OutcomeCharged || rs[1].Action != billing.ActionAck {
		t.Fatalf("results = %+v, want retry then charged", rs)
	}
	WaitFor(t, "the ack", func() bool { return e.ConsumerInfo(t, "billing").AckFloor.Stream == 1 })
	if ci := e.ConsumerInfo(t, "billing"); ci.Delivered.Consumer != 2 {
		t.Fatalf("delivered %d times, want 2", ci.Delivered.Consumer)
	}
	e.MustChargesPerEvent(t, body)
}

// A poison message goes to the dead-letter stream with its reason, and is
// terminated, not redelivered.
func TestWorker_PoisonMessageDeadLettered(t *testing.T) {
	e := MustEnv(t)
	rec := NewRecorder(e.Processor("w"))
	MustOpen(t, e.Worker(t, "billing", rec))
	if _, err := e.JS(t).Publish(context.Background(), subject, []byte(`{"customer_id":"acct_1","amount":"12.5"}`)); err != nil {
		t.Fatal(err)
	}
	dl := e.MustDeadLetters(t, 1)[0]
	if !strings.Contains(dl.Reason, "malformed") || dl.Outcome != billing.OutcomeMalformed {
		t.Fatalf("dead letter reason %q outcome %q, want malformed", dl.Reason, dl.Outcome)
	}
	if dl.Subject != subject || dl.Stream != stream || dl.StreamSeq != 1 || dl.NumDelivered != 1 || dl.Body != `{"customer_id":"acct_1","amount":"12.5"}` {
		t.Fatalf("dead letter = %+v", dl)
	}
	WaitFor(t, "the term", func() bool { return e.ConsumerInfo(t, "billing").AckFloor.Stream == 1 })
	if n := len(rec.Bodies()); n != 1 {
		t.Fatalf("handler saw the poison message %d times, want 1", n)
	}
	if n := len(e.Charges()); n != 0 {
		t.Fatalf("%d charges, want none", n)
	}
}

// A message that keeps failing lands in the dead-letter stream on its last
// delivery, with the reason; the ledger keeps its pending entry.
func TestWorker_MaxDeliverExhaustedDeadLettered(t *testing.T) {
	e := MustEnv(t)
	if _, err := e.Sim.AddFault(stripesim.Fault{Path: "/v1/charges", Mode: stripesim.FaultFailBefore, Status: 503}); err != nil {
		t.Fatal(err)
	}
	rec := NewRecorder(e.Processor("w"))
	w := e.Worker(t, "billing", rec)
	w.MaxDeliver = 3
	MustOpen(t, w)
	body := EventJSON("acct_1", "2026-11", 4200)
	e.Publish(t, body)

	dl := e.MustDeadLetters(t, 1)[0]
	if !strings.Contains(dl.Reason, "max deliveries (3) exhausted") || dl.NumDelivered != 3 || dl.Key == "" || dl.Body != body {
		t.Fatalf("dead letter = %+v", dl)
	}
	if n := len(rec.Bodies()); n != 3 {
		t.Fatalf("handler ran %d times, want 3", n)
	}
	if n := len(e.Charges()); n != 0 {
		t.Fatalf("%d charges, want none", n)
	}
	if entry := e.MustEntry(t, body); entry.State != "pending" {
		t.Fatalf("entry %s, want pending for the reconciler", entry.State)
	}
}

// A message the server gives up on without any answer from a worker (each
// delivery's worker died) is dead-lettered from the MaxDeliver advisory.
func TestWorker_MaxDeliverAdvisoryDeadLettered(t *testing.T) {
	e := MustEnv(t)
	js := e.JS(t)
	ctx := context.Background()
	cons, err := js.CreateConsumer(ctx, stream, jsapi.ConsumerConfig{Durable: "billing", AckPolicy: jsapi.AckExplicitPolicy,
		FilterSubject: subject, MaxDeliver: 2, AckWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	body := EventJSON("acct_1", "2026-11", 4200)
	e.Publish(t, body)
	for range 2 { // two deliveries that never got an answer from a handler
		m, err := cons.Next(jsapi.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Nak(); err != nil {
			t.Fatal(err)
		}
	}
	rec := NewRecorder(e.Processor("w"))
	w := e.Worker(t, "billing", rec)
	w.MaxDeliver = 2
	MustOpen(t, w)

	dl := e.MustDeadLetters(t, 1)[0]
	if !strings.Contains(dl.Reason, "max deliveries (2) exhausted without an answer") || dl.StreamSeq != 1 || dl.Body != body || dl.Subject != subject {
		t.Fatalf("dead letter = %+v", dl)
	}
	if n := len(rec.Bodies()); n != 0 {
		t.Fatalf("handler saw the exhausted message %d times", n)
	}
}

// Seed failure mode 3: the durable is deleted and recreated. A worker
// resumes from the recorded ack floor even when told DeliverAll, and the
// handler never sees acknowledged history again; a durable without floor
// or policy refuses to start.
func TestWorker_DurableRecreatedResumesFromAckFloor(t *testing.T) {
	e := MustEnv(t)
	ctx := context.Background()
	js := e.JS(t)
	history := []string{EventJSON("acct_h1", "2026-10", 100), EventJSON("acct_h2", "2026-10", 100)}
	for _, b := range history {
		// Billed by an earlier system; the new durable starts after them.
		e.Publish(t, b)
	}

	first := NewRecorder(e.Processor("w1"))
	w1 := MustOpen(t, e.Worker(t, "billing", first))
	acked := []string{EventJSON("acct_1", "2026-11", 100), EventJSON("acct_2", "2026-11", 200), EventJSON("acct_3", "2026-11", 300)}
	for _, b := range acked {
		e.Publish(t, b)
	}
	first.MustResults(t, 3)
	WaitFor(t, "the floor recorded at 5", func() bool {
		f, err := w1.Floor(ctx)
		return err == nil && f.StreamSeq == 5
	})
	w1.Close()

	if err := js.DeleteConsumer(ctx, stream, "billing"); err != nil {
		t.Fatal(err)
	}
	fresh := []string{EventJSON("acct_4", "2026-11", 400), EventJSON("acct_5", "2026-11", 500)}
	for _, b := range fresh {
		e.Publish(t, b)
	}

	t.Run("ErrNoStartPolicy", func(t *testing.T) {
		w := e.Worker(t, "other", NewRecorder(e.Processor("x")))
		w.Start = jetstream.StartPolicy{}
		err := w.Open(ctx)
		if !errors.Is(err, jetstream.ErrNoStartPolicy) || !strings.Contains(err.Error(), "deliver_policy") {
			t.Fatalf("Open = %v, want ErrNoStartPolicy naming deliver_policy", err)
		}
		if _, err := js.Consumer(ctx, stream, "other"); !errors.Is(err, jsapi.ErrConsumerNotFound) {
			t.Fatalf("a refused worker created its durable: %v", err)
		}
	})

	t.Run("OKFromFloorDespiteDeliverAll", func(t *testing.T) {
		second := NewRecorder(e.Processor("w2"))
		w := e.Worker(t, "billing", second)
		w.Start = jetstream.StartPolicy{Deliver: jetstream.DeliverAll} // the seed's mistake
		MustOpen(t, w)
		second.MustResults(t, 2)
		WaitFor(t, "the floor at 7", func() bool {
			f, err := w.Floor(ctx)
			return err == nil && f.StreamSeq == 7
		})
		got := second.Bodies()
		slices.Sort(got)
		want := slices.Clone(fresh)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("recreated durable handled %q, want only %q", got, want)
		}
		if ci := e.ConsumerInfo(t, "billing"); ci.Delivered.Stream != 7 || ci.NumPending != 0 {
			t.Fatalf("consumer delivered up to %d with %d pending", ci.Delivered.Stream, ci.NumPending)
		}
		e.MustChargesPerEvent(t, append(acked, fresh...)...)
	})
}

// A durable deleted under a running worker is recreated from the floor
// by the worker itself.
func TestWorker_DurableDeletedWhileRunning(t *testing.T) {
	e := MustEnv(t)
	ctx := context.Background()
	rec := NewRecorder(e.Processor("w"))
	w := MustOpen(t, e.Worker(t, "billing", rec))
	a := EventJSON("acct_1", "2026-11", 100)
	e.Publish(t, a)
	rec.MustResults(t, 1)
	WaitFor(t, "the floor at 1", func() bool {
		f, err := w.Floor(ctx)
		return err == nil && f.StreamSeq == 1
	})
	if err := e.JS(t).DeleteConsumer(ctx, stream, "billing"); err != nil {
		t.Fatal(err)
	}
	b := EventJSON("acct_2", "2026-11", 200)
	e.Publish(t, b)
	rec.MustResults(t, 1)
	if got := rec.Bodies(); !slices.Equal(got, []string{a, b}) {
		t.Fatalf("handled %q, want each event once", got)
	}
	e.MustChargesPerEvent(t, a, b)
}

// A durable deleted while the worker has no pull request pending (its only
// handler busy, or between two pulls): the next pull finds no consumer to
// answer it and fails at once with "no responders", neither "consumer
// deleted" nor a timeout. The worker took it for a passing fetch error and
// retried every second forever, so no event was billed again until a
// restart (the flake of TestWorker_DurableDeletedWhileRunning under load,
// when the delete fell between two pulls). The worker now asks the server
// whether the durable still exists after any failed pull, and recreates it
// from the ack floor: the event in flight during the delete comes back (the
// ledger answers already_done) and the one published after it is charged.
func TestWorker_DurableDeletedWhileNoPullPending(t *testing.T) {
	e := MustEnv(t)
	ctx := context.Background()
	a, x, b := EventJSON("acct_1", "2026-11", 100), EventJSON("acct_2", "2026-11", 200), EventJSON("acct_3", "2026-11", 300)
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	p := e.Processor("w")
	rec := NewRecorder(jetstream.HandlerFunc(func(ctx context.Context, body []byte) billing.Result {
		if string(body) == x {
			once.Do(func() { close(reached); <-release })
		}
		return p.Process(ctx, body)
	}))
	w := e.Worker(t, "billing", rec)
	w.Concurrency = 1 // while its handler runs, the worker has no pull pending
	MustOpen(t, w)
	e.Publish(t, a)
	rec.MustResults(t, 1)
	WaitFor(t, "the floor at 1", func() bool {
		f, err := w.Floor(ctx)
		return err == nil && f.StreamSeq == 1
	})
	e.Publish(t, x)
	select {
	case <-reached:
	case <-time.After(20 * time.Second):
		t.Fatal("the worker never handled the second event")
	}
	opened := len(e.Log.String())
	if err := e.JS(t).DeleteConsumer(ctx, stream, "billing"); err != nil {
		t.Fatal(err)
	}
	e.Publish(t, b)
	close(release) // x is charged; its ack goes nowhere

	rs := rec.MustResults(t, 3)
	if rs[0].Outcome != billing.OutcomeCharged || rs[1].Outcome != billing.OutcomeAlreadyDone || rs[2].Outcome != billing.OutcomeCharged {
		t.Fatalf("results = %+v, want x charged, x already done, b charged", rs)
	}
	if got := rec.Bodies(); !slices.Equal(got, []string{a, x, x, b}) {
		t.Fatalf("handled %q, want a, x, x again from the floor, b", got)
	}
	// Recreated from the floor: from the start policy (DeliverNew), b,
	// published before the recreate, would never be billed.
	if log := e.Log.String()[opened:]; !strings.Contains(log, "recreating it from the recorded ack floor") || strings.Contains(log, "explicit start policy") {
		t.Fatalf("the durable was not recreated from the ack floor:\n%s", log)
	}
	e.MustChargesPerEvent(t, a, x, b)
}

// Seed failure mode 2, JetStream flavour: two durables on one subject each
// get every event; CheckDurables reports it, and the ledger still charges
// once per event.
func TestWorker_TwoDurablesOneCharge(t *testing.T) {
	e := MustEnv(t)
	// A short lease: the durable that finds the other's claim retries after it.
	pa, pb := e.Processor("a"), e.Processor("b")
	pa.Lease, pb.Lease = time.Second, time.Second
	a, b := NewRecorder(pa), NewRecorder(pb)
	MustOpen(t, e.Worker(t, "billing-a", a))
	MustOpen(t, e.Worker(t, "billing-b", b))
	var dup *jetstream.DuplicateConsumersError
	if err := jetstream.CheckDurables(context.Background(), e.JS(t), stream, "billing-a", subject); !errors.As(err, &dup) || !slices.Equal(dup.Consumers, []string{"billing-b"}) {
		t.Fatalf("CheckDurables = %v, want billing-b reported", err)
	}
	if !strings.Contains(e.Log.String(), "DUPLICATE BILLING CONSUMERS") {
		t.Fatalf("no warning logged:\n%s", e.Log)
	}
	bodies := []string{EventJSON("acct_1", "2026-11", 100), EventJSON("acct_2", "2026-11", 200), EventJSON("acct_3", "2026-11", 300)}
	for _, body := range bodies {
		e.Publish(t, body)
	}
	WaitFor(t, "both durables acked everything", func() bool {
		return e.ConsumerInfo(t, "billing-a").AckFloor.Stream == 3 && e.ConsumerInfo(t, "billing-b").AckFloor.Stream == 3
	})
	e.MustChargesPerEvent(t, bodies...)
}

// A producer publishing twice: the stream's duplicate window drops the
// second copy (Nats-Msg-Id is the content key); past the window (a copy
// with another message ID), the ledger charges once.
func TestPublisher_DuplicatePublish(t *testing.T) {
	e := MustEnv(t)
	body := EventJSON("acct_1", "2026-11", 4200)
	e.Publish(t, body)
	p := &jetstream.Publisher{JS: e.JS(t), Subject: subject, Namespace: namespace}
	ack, err := p.Publish(context.Background(), []byte(body))
	if !errors.Is(err, jetstream.ErrDuplicate) || ack == nil || !ack.Duplicate {
		t.Fatalf("second publish = %+v, %v; want ErrDuplicate", ack, err)
	}
	if _, err := p.Publish(context.Background(), []byte(`{"customer_id":1}`)); err == nil {
		t.Fatal("a malformed event was published")
	}
	// Outside the duplicate window: the same event under another message ID.
	if _, err := e.JS(t).Publish(context.Background(), subject, []byte(body), jsapi.WithMsgID("after-the-window")); err != nil {
		t.Fatal(err)
	}
	info, err := e.JS(t).Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 2 {
		t.Fatalf("stream holds %d messages, want 2 (one deduplicated)", n)
	}
	rec := NewRecorder(e.Processor("w"))
	w := e.Worker(t, "billing", rec)
	w.Start = jetstream.StartPolicy{Deliver: jetstream.DeliverAll}
	MustOpen(t, w)
	rs := rec.MustResults(t, 2)
	if rs[0].Outcome != billing.OutcomeCharged || rs[1].Outcome != billing.OutcomeAlreadyDone {
		t.Fatalf("results = %+v, want charged then already done", rs)
	}
	e.MustChargesPerEvent(t, body)
}

// dyingCharger stands for a worker killed after its ledger claim and before
// its Stripe call: it reports the call and never returns until released.
type dyingCharger struct {
	billing.Charger
	called  chan struct{}
	release chan struct{}
}

func (d *dyingCharger) Charge(ctx context.Context, req billing.ChargeRequest) (billing.ChargeResult, error) {
	close(d.called)
	<-d.release
	return billing.ChargeResult{}, errors.New("killed")
}

// A worker killed between the ledger claim and the Stripe call: its
// connection goes, the message comes back after AckWait, and once the
// lease is expired the next worker charges with the same key: one charge.
func TestWorker_KilledBetweenClaimAndStripeCall(t *testing.T) {
	e := MustEnv(t)
	dying := &dyingCharger{called: make(chan struct{}), release: make(chan struct{})}
	pa := e.Processor("doomed")
	dying.Charger, pa.Charger = pa.Charger, dying
	pa.ExtendEvery = time.Hour // a dead worker extends nothing
	wa := e.Worker(t, "billing", pa)
	wa.AckWait = time.Second
	wa.ShutdownTimeout = time.Millisecond
	MustOpen(t, wa)
	body := EventJSON("acct_1", "2026-11", 4200)
	e.Publish(t, body)
	select {
	case <-dying.called:
	case <-time.After(20 * time.Second):
		t.Fatal("the doomed worker never reached Stripe")
	}
	wa.JS.Conn().Close() // kill -9: no ack, no nak, no InProgress
	e.Clock.Advance(2 * time.Minute)

	rec := NewRecorder(e.Processor("survivor"))
	wb := e.Worker(t, "billing", rec)
	wb.AckWait = time.Second
	MustOpen(t, wb)
	res := rec.MustResults(t, 1)[0]
	close(dying.release)
	if res.Outcome != billing.OutcomeCharged {
		t.Fatalf("survivor result = %+v, want charged", res)
	}
	if entry := e.MustEntry(t, body); entry.Attempts != 2 {
		t.Fatalf("entry attempts = %d, want 2 (the claim, then the takeover)", entry.Attempts)
	}
	e.MustChargesPerEvent(t, body)
}
