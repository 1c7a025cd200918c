package jetstream_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keybrake/keybrake/billing"
	"github.com/keybrake/keybrake/jetstream"
)

const coreSubject = "billing.core"

// Seed failure mode 2: two workers subscribe to the billing subject without
// a queue group, so both get every event. CheckFanOut reports it from the
// server's /connz, the queue worker logs it at WARN, and the ledger still
// charges once per event.
func TestQueueWorker_FanOutDetectedOneCharge(t *testing.T) {
	e := MustEnv(t)
	ctx := context.Background()
	var recs []*Recorder
	for _, name := range []string{"plain-1", "plain-2"} {
		rec := NewRecorder(shortLease(e.Processor(name)))
		recs = append(recs, rec)
		nc := e.Conn(t, name)
		if _, err := nc.Subscribe(coreSubject, func(m *nats.Msg) { rec.Process(ctx, m.Data) }); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	queued := NewRecorder(shortLease(e.Processor("queue")))
	recs = append(recs, queued)
	w := &jetstream.QueueWorker{Conn: e.Conn(t, "queue-worker"), Subject: coreSubject, Queue: "billing", Handler: queued,
		DeadLetterSubject: deadSubj, MonitorURL: e.MonitorURL, Logger: e.Logger(), RetryDelay: 10 * time.Millisecond}
	if err := w.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })

	var fe *jetstream.FanOutError
	if err := w.CheckFanOut(ctx); !errors.As(err, &fe) || len(fe.Receivers) != 3 || !strings.Contains(err.Error(), "plain-1") {
		t.Fatalf("CheckFanOut = %v, want 3 receivers naming plain-1", err)
	}
	if log := e.Log.String(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, "BILLING FAN-OUT") {
		t.Fatalf("no fan-out warning logged:\n%s", log)
	}

	p := &jetstream.CorePublisher{Conn: e.Conn(t, "producer"), Subject: coreSubject, Namespace: namespace}
	bodies := []string{EventJSON("acct_1", "2026-11", 100), EventJSON("acct_2", "2026-11", 200)}
	for _, b := range bodies {
		if err := p.Publish(ctx, []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range recs {
		r.MustResults(t, 2) // every receiver got every event
	}
	WaitFor(t, "the queue worker to settle", func() bool {
		for _, b := range bodies {
			if e.MustEntry(t, b).State != "charged" {
				return false
			}
		}
		return true
	})
	e.MustChargesPerEvent(t, bodies...)
}

// Members of one queue group are one receiver: no fan-out.
func TestCheckFanOut_QueueGroupOK(t *testing.T) {
	e := MustEnv(t)
	for _, name := range []string{"a", "b"} {
		nc := e.Conn(t, name)
		if _, err := nc.QueueSubscribe("billing.>", "billing", func(*nats.Msg) {}); err != nil {
			t.Fatal(err)
		}
		nc.Flush()
	}
	if err := jetstream.CheckFanOut(context.Background(), nil, e.MonitorURL, coreSubject); err != nil {
		t.Fatalf("CheckFanOut = %v, want nil", err)
	}
	nc := e.Conn(t, "stray")
	nc.Subscribe("billing.*", func(*nats.Msg) {})
	nc.Flush()
	var fe *jetstream.FanOutError
	if err := jetstream.CheckFanOut(context.Background(), nil, e.MonitorURL, coreSubject); !errors.As(err, &fe) || len(fe.Receivers) != 2 {
		t.Fatalf("CheckFanOut = %v, want the stray wildcard subscriber beside the group", err)
	}
}

// shortLease makes p's lease one second, so an attempt that finds another
// receiver's claim retries after a second rather than a minute.
func shortLease(p *billing.Processor) *billing.Processor {
	p.Lease = time.Second
	return p
}
