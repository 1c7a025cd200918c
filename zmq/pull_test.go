package zmq_test

import (
	"context"
	"github.com/keybrake/keybrake/internal/kbtest"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/keybrake/keybrake/billing"
	"github.com/keybrake/keybrake/zmq"
)

// producer opens a Producer that binds its ack socket on a free port; the
// envelope endpoint is set once the worker is up.
func producer(tb testing.TB, ackEndpoint string) *zmq.Producer {
	tb.Helper()
	return MustOpen(tb, &zmq.Producer{Endpoint: "tcp://127.0.0.1:1", AckEndpoint: ackEndpoint,
		AckTimeout: 300 * time.Millisecond, MaxAttempts: 60, MaxDelay: 20 * time.Millisecond, Logger: kbtest.Logger()})
}

// pullWorker opens a PullWorker binding endpoint and acking to p.
func pullWorker(tb testing.TB, e *Env, endpoint string, p *zmq.Producer, h zmq.Handler) *zmq.PullWorker {
	tb.Helper()
	return MustOpen(tb, &zmq.PullWorker{Endpoint: endpoint, AckEndpoint: p.AckAddr(), Handler: h, Namespace: namespace, Logger: e.Logger})
}

func TestPull(t *testing.T) {
	t.Run("Charged", func(t *testing.T) {
		e := MustEnv(t)
		p := producer(t, "tcp://127.0.0.1:0")
		w := pullWorker(t, e, "tcp://127.0.0.1:0", p, e.Processor(nil))
		p.Endpoint = w.Addr()
		env := MustEnvelope(t, Event("acct_1"))
		rep := MustFinal(t, Go(func() (*zmq.Reply, error) { return p.Send(Ctx(t), env) }), zmq.StatusCharged)
		e.MustOneCharge(t, env.Key, rep.ChargeID)
	})

	// Failure mode 2 of the seed: the worker charges and restarts before
	// acking; its ack counter would restart at zero. The producer resends on
	// ack timeout and the restarted worker acks the same charge by key.
	t.Run("WorkerRestartsBeforeAckOneCharge", func(t *testing.T) {
		e := MustEnv(t)
		p := producer(t, "tcp://127.0.0.1:0")
		crash := NewCrash(e.Processor(nil))
		w1 := pullWorker(t, e, "tcp://127.0.0.1:0", p, crash)
		p.Endpoint = w1.Addr()
		env := MustEnvelope(t, Event("acct_1"))
		out := Go(func() (*zmq.Reply, error) { return p.Send(Ctx(t), env) })

		first := Receive(t, crash.Charged, "the first charge")
		w1.Close() // killed with the ack unsent
		pullWorker(t, e, w1.Addr(), p, e.Processor(nil))

		rep := MustFinal(t, out, zmq.StatusCharged)
		if rep.ChargeID != first.ChargeID {
			t.Fatalf("ack charge %s, want the first charge %s", rep.ChargeID, first.ChargeID)
		}
		e.MustOneCharge(t, env.Key, first.ChargeID)
	})

	// The producer restarts while its envelope is in flight; the worker's
	// ack for it goes to the new producer process, which never sent it, and
	// which resends it from its outbox along with a new event. Counting acks
	// would pair them wrongly; matching by key cannot.
	t.Run("ProducerRestartsAcksMatchedByKey", func(t *testing.T) {
		e := MustEnv(t)
		p1 := producer(t, "tcp://127.0.0.1:0")
		hold := make(chan struct{})
		charged := make(chan string, 4)
		h := zmq.HandlerFunc(func(ctx context.Context, body []byte) billing.Result {
			res := e.Processor(nil).Process(ctx, body)
			charged <- res.ChargeID
			<-hold // the ack waits until the first producer is gone
			return res
		})
		w := pullWorker(t, e, "tcp://127.0.0.1:0", p1, h)
		p1.Endpoint = w.Addr()
		a := MustEnvelope(t, Event("acct_a"))
		out1 := Go(func() (*zmq.Reply, error) { return p1.Send(Ctx(t), a) })
		chargeA := Receive(t, charged, "the charge of a")

		p1.Close()
		if o := Receive(t, out1, "the first producer's send"); o.Err == nil {
			t.Fatalf("the closed producer got %+v", o.Reply)
		}
		p2 := producer(t, p1.AckAddr())
		p2.Endpoint = w.Addr()
		close(hold)

		b := MustEnvelope(t, Event("acct_b"))
		outB := Go(func() (*zmq.Reply, error) { return p2.Send(Ctx(t), b) })
		outA := Go(func() (*zmq.Reply, error) { return p2.Send(Ctx(t), a) })
		repB := MustFinal(t, outB, zmq.StatusCharged)
		repA := MustFinal(t, outA, zmq.StatusCharged)
		if repA.Key != a.Key || repA.ChargeID != chargeA || repB.Key != b.Key || repB.ChargeID == chargeA {
			t.Fatalf("a: %+v (first charge %s), b: %+v", repA, chargeA, repB)
		}
		e.MustOneCharge(t, a.Key, chargeA)
		e.MustOneCharge(t, b.Key, repB.ChargeID)
	})

	t.Run("WorkerDiesBetweenClaimAndStripeOneCharge", func(t *testing.T) {
		e := MustEnv(t)
		p := producer(t, "tcp://127.0.0.1:0")
		stuck := &StuckCharger{Charger: e.Charger(), Entered: make(chan struct{})}
		w1 := pullWorker(t, e, "tcp://127.0.0.1:0", p, e.Processor(stuck))
		p.Endpoint = w1.Addr()
		env := MustEnvelope(t, Event("acct_1"))
		out := Go(func() (*zmq.Reply, error) { return p.Send(Ctx(t), env) })

		Receive(t, stuck.Entered, "the claim")
		w1.Close()
		e.Clock.Advance(lease + time.Second)
		pullWorker(t, e, w1.Addr(), p, e.Processor(nil))

		rep := MustFinal(t, out, zmq.StatusCharged)
		e.MustOneCharge(t, env.Key, rep.ChargeID)
	})

	t.Run("Declined", func(t *testing.T) {
		e := MustEnv(t)
		p := producer(t, "tcp://127.0.0.1:0")
		w := pullWorker(t, e, "tcp://127.0.0.1:0", p, e.Processor(nil))
		p.Endpoint = w.Addr()
		ev := Event("acct_declined")
		ev.Source = "tok_chargeDeclinedInsufficientFunds"
		env := MustEnvelope(t, ev)
		MustFinal(t, Go(func() (*zmq.Reply, error) { return p.Send(Ctx(t), env) }), zmq.StatusDeclined)
	})

	// Refusals come back as acks carrying the envelope's key when it has
	// one; the raw PUSH socket is pyzmq's view of the wire.
	t.Run("Refusals", func(t *testing.T) {
		e := MustEnv(t)
		acks := zmq4.NewPull(context.Background())
		t.Cleanup(func() { acks.Close() })
		if err := acks.Listen("tcp://127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		w := MustOpen(t, &zmq.PullWorker{Endpoint: "tcp://127.0.0.1:0", AckEndpoint: "tcp://" + acks.Addr().String(),
			Handler: e.Processor(nil), Namespace: namespace, Logger: e.Logger})
		push := zmq4.NewPush(context.Background(), zmq4.WithTimeout(wait))
		t.Cleanup(func() { push.Close() })
		if err := push.Dial(w.Addr()); err != nil {
			t.Fatal(err)
		}
		for _, tc := range refusals(t, MustEnvelope(t, Event("acct_1"))) {
			t.Run(tc.name, func(t *testing.T) {
				if err := push.Send(zmq4.NewMsg(tc.msg)); err != nil {
					t.Fatal(err)
				}
				tc.check(t, recvReply(t, acks))
			})
		}
		if n := len(e.Sim.GroundTruth().Charges); n != 0 {
			t.Fatalf("%d charges after refusals", n)
		}
	})
}

// recvReply receives one reply from s.
func recvReply(tb testing.TB, s zmq4.Socket) *zmq.Reply {
	tb.Helper()
	type result struct {
		m   zmq4.Msg
		err error
	}
	ch := make(chan result, 1)
	go func() {
		m, err := s.Recv()
		ch <- result{m, err}
	}()
	r := Receive(tb, ch, "a reply")
	if r.err != nil {
		tb.Fatal(r.err)
	}
	rep, err := zmq.DecodeReply(r.m.Frames[len(r.m.Frames)-1])
	if err != nil {
		tb.Fatal(err)
	}
	return rep
}
