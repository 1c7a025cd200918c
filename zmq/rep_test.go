package zmq_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/keybrake/keybrake/zmq"
)

// reqClient returns a lazy-pirate client with a short reply timeout: a
// timeout only causes a resend, which is what the tests are about.
func reqClient(tb testing.TB, endpoint string) *zmq.ReqClient {
	c := &zmq.ReqClient{Endpoint: endpoint, Timeout: 300 * time.Millisecond, MaxAttempts: 60, MaxDelay: 20 * time.Millisecond}
	tb.Cleanup(func() { c.Close() })
	return c
}

func TestRep(t *testing.T) {
	t.Run("Charged", func(t *testing.T) {
		e := MustEnv(t)
		w := MustOpen(t, &zmq.RepWorker{Endpoint: "tcp://127.0.0.1:0", Handler: e.Processor(nil), Namespace: namespace, Logger: e.Logger})
		c := reqClient(t, w.Addr())
		env := MustEnvelope(t, Event("acct_1"))
		rep := MustFinal(t, Go(func() (*zmq.Reply, error) { return c.Send(Ctx(t), env) }), zmq.StatusCharged)
		if rep.Key != env.Key || rep.ChargeID == "" {
			t.Fatalf("reply %+v", rep)
		}
		e.MustOneCharge(t, env.Key, rep.ChargeID)

		// The same envelope again, on the same socket: the same charge.
		again := MustFinal(t, Go(func() (*zmq.Reply, error) { return c.Send(Ctx(t), env) }), zmq.StatusCharged)
		if again.ChargeID != rep.ChargeID || again.Outcome != "already_done" {
			t.Fatalf("second reply %+v, want the first charge %s", again, rep.ChargeID)
		}
		e.MustOneCharge(t, env.Key, rep.ChargeID)
	})

	// Failure mode 1 of the seed: the worker charges, dies before replying;
	// the lazy-pirate client destroys its socket, creates a new one and
	// resends to the restarted worker. The key is in the envelope, not
	// derived from the socket, so the resend finds the charge.
	t.Run("WorkerDiesBeforeReplyNewSocketOneCharge", func(t *testing.T) {
		e := MustEnv(t)
		crash := NewCrash(e.Processor(nil))
		w1 := MustOpen(t, &zmq.RepWorker{Endpoint: "tcp://127.0.0.1:0", Handler: crash, Namespace: namespace, Logger: e.Logger})
		c := reqClient(t, w1.Addr())
		env := MustEnvelope(t, Event("acct_1"))
		out := Go(func() (*zmq.Reply, error) { return c.Send(Ctx(t), env) })

		first := Receive(t, crash.Charged, "the first charge")
		if first.ChargeID == "" {
			t.Fatalf("first attempt %+v, want a charge", first)
		}
		w1.Close() // killed with the reply unsent
		MustOpen(t, &zmq.RepWorker{Endpoint: w1.Addr(), Handler: e.Processor(nil), Namespace: namespace, Logger: e.Logger})

		rep := MustFinal(t, out, zmq.StatusCharged)
		if rep.ChargeID != first.ChargeID {
			t.Fatalf("reply charge %s, want the first charge %s", rep.ChargeID, first.ChargeID)
		}
		if c.Sockets() < 2 {
			t.Fatalf("client used %d socket(s), want a recreated one", c.Sockets())
		}
		e.MustOneCharge(t, env.Key, first.ChargeID)
	})

	// The worker dies between the ledger claim and the Stripe call: its
	// lease stays behind. The resend is told to retry while the lease is
	// live; once it expires, the next worker charges with the same key.
	t.Run("WorkerDiesBetweenClaimAndStripeOneCharge", func(t *testing.T) {
		e := MustEnv(t)
		stuck := &StuckCharger{Charger: e.Charger(), Entered: make(chan struct{})}
		w1 := MustOpen(t, &zmq.RepWorker{Endpoint: "tcp://127.0.0.1:0", Handler: e.Processor(stuck), Namespace: namespace, Logger: e.Logger})
		c := reqClient(t, w1.Addr())
		env := MustEnvelope(t, Event("acct_1"))
		out := Go(func() (*zmq.Reply, error) { return c.Send(Ctx(t), env) })

		Receive(t, stuck.Entered, "the claim")
		w1.Close()
		if n := len(e.Charges(env.Key)); n != 0 {
			t.Fatalf("%d charges before the Stripe call", n)
		}
		e.Clock.Advance(lease + time.Second) // the dead worker's lease expires
		MustOpen(t, &zmq.RepWorker{Endpoint: w1.Addr(), Handler: e.Processor(nil), Namespace: namespace, Logger: e.Logger})

		rep := MustFinal(t, out, zmq.StatusCharged)
		e.MustOneCharge(t, env.Key, rep.ChargeID)
	})

	t.Run("Declined", func(t *testing.T) {
		e := MustEnv(t)
		w := MustOpen(t, &zmq.RepWorker{Endpoint: "tcp://127.0.0.1:0", Handler: e.Processor(nil), Namespace: namespace, Logger: e.Logger})
		c := reqClient(t, w.Addr())
		ev := Event("acct_declined")
		ev.Source = "tok_chargeDeclined"
		env := MustEnvelope(t, ev)
		for range 2 {
			rep := MustFinal(t, Go(func() (*zmq.Reply, error) { return c.Send(Ctx(t), env) }), zmq.StatusDeclined)
			if rep.Key != env.Key || rep.Reason == "" {
				t.Fatalf("reply %+v", rep)
			}
		}
		for _, ch := range e.Charges(env.Key) {
			if ch.Status == "succeeded" {
				t.Fatalf("a declined event was charged: %+v", ch)
			}
		}
	})

	// Refusals are precise, final, and charge nothing; the raw socket is
	// pyzmq's view of the wire.
	t.Run("Refusals", func(t *testing.T) {
		e := MustEnv(t)
		w := MustOpen(t, &zmq.RepWorker{Endpoint: "tcp://127.0.0.1:0", Handler: e.Processor(nil), Namespace: namespace, Logger: e.Logger})
		good := MustEnvelope(t, Event("acct_1"))
		for _, tc := range refusals(t, good) {
			t.Run(tc.name, func(t *testing.T) {
				rep := rawRequest(t, w.Addr(), tc.msg)
				tc.check(t, rep)
			})
		}
		if n := len(e.Sim.GroundTruth().Charges); n != 0 {
			t.Fatalf("%d charges after refusals", n)
		}
	})
}

// rawRequest sends msg on a fresh REQ socket and returns the decoded reply.
func rawRequest(tb testing.TB, endpoint string, msg []byte) *zmq.Reply {
	tb.Helper()
	s := zmq4.NewReq(context.Background(), zmq4.WithTimeout(wait))
	defer s.Close()
	if err := s.Dial(endpoint); err != nil {
		tb.Fatal(err)
	}
	if err := s.Send(zmq4.NewMsg(msg)); err != nil {
		tb.Fatal(err)
	}
	return recvReply(tb, s)
}
