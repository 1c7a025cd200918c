package zmq_test

import (
	"context"
	"fmt"
	"github.com/keybrake/keybrake/internal/kbtest"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/keybrake/keybrake/zmq"
)

// dealerClient returns a DEALER client with a short reply timeout.
func dealerClient(tb testing.TB, endpoint string) *zmq.DealerClient {
	c := &zmq.DealerClient{Endpoint: endpoint, Timeout: 300 * time.Millisecond, MaxAttempts: 60, MaxDelay: 20 * time.Millisecond, Logger: kbtest.Logger()}
	tb.Cleanup(func() { c.Close() })
	return c
}

// routerWorker opens a RouterWorker on endpoint.
func routerWorker(tb testing.TB, e *Env, endpoint string, h zmq.Handler, concurrency int) *zmq.RouterWorker {
	tb.Helper()
	return MustOpen(tb, &zmq.RouterWorker{Endpoint: endpoint, Handler: h, Namespace: namespace, Concurrency: concurrency, Logger: e.Logger})
}

func TestRouter(t *testing.T) {
	// Many envelopes at once over one DEALER, replies matched by key.
	t.Run("ConcurrentRepliesMatchedByKey", func(t *testing.T) {
		e := MustEnv(t)
		w := routerWorker(t, e, "tcp://127.0.0.1:0", e.Processor(nil), 4)
		c := dealerClient(t, w.Addr())
		const n = 8
		envs := make([]*zmq.Envelope, n)
		outs := make([]<-chan Outcome, n)
		for i := range envs {
			envs[i] = MustEnvelope(t, Event(fmt.Sprintf("acct_%d", i)))
			outs[i] = Go(func() (*zmq.Reply, error) { return c.Send(Ctx(t), envs[i]) })
		}
		for i, out := range outs {
			rep := MustFinal(t, out, zmq.StatusCharged)
			if rep.Key != envs[i].Key {
				t.Fatalf("envelope %d got the reply of %s", i, rep.Key)
			}
			e.MustOneCharge(t, envs[i].Key, rep.ChargeID)
		}
	})

	// Failure mode 3 of the seed: the reply is lost (the worker died after
	// charging); the DEALER reconnects with a new random identity and
	// resends. The identity never reaches the key: one charge.
	t.Run("ReconnectWithNewIdentityOneCharge", func(t *testing.T) {
		e := MustEnv(t)
		crash := NewCrash(e.Processor(nil))
		w1 := routerWorker(t, e, "tcp://127.0.0.1:0", crash, 1)
		c := dealerClient(t, w1.Addr())
		env := MustEnvelope(t, Event("acct_1"))
		out := Go(func() (*zmq.Reply, error) { return c.Send(Ctx(t), env) })

		first := Receive(t, crash.Charged, "the first charge")
		w1.Close()
		w2 := routerWorker(t, e, w1.Addr(), e.Processor(nil), 1)

		rep := MustFinal(t, out, zmq.StatusCharged)
		if rep.ChargeID != first.ChargeID {
			t.Fatalf("reply charge %s, want the first charge %s", rep.ChargeID, first.ChargeID)
		}
		if c.Sockets() < 2 {
			t.Fatalf("client used %d socket(s), want a new identity", c.Sockets())
		}
		// Another client process, with yet another identity: the same charge.
		again := MustFinal(t, Go(func() (*zmq.Reply, error) { return dealerClient(t, w2.Addr()).Send(Ctx(t), env) }), zmq.StatusCharged)
		if again.ChargeID != first.ChargeID {
			t.Fatalf("second client got charge %s, want %s", again.ChargeID, first.ChargeID)
		}
		e.MustOneCharge(t, env.Key, first.ChargeID)
	})

	// A client that sets a fixed identity changes nothing either: the key
	// is the content's, whoever sends it.
	t.Run("FixedIdentityAndReqClientSameCharge", func(t *testing.T) {
		e := MustEnv(t)
		w := routerWorker(t, e, "tcp://127.0.0.1:0", e.Processor(nil), 2)
		env := MustEnvelope(t, Event("acct_1"))
		rep := MustFinal(t, Go(func() (*zmq.Reply, error) { return dealerClient(t, w.Addr()).Send(Ctx(t), env) }), zmq.StatusCharged)
		for _, id := range []string{"stable-billing-client-1", "billing-pod-abc123"} {
			got := rawDealer(t, w.Addr(), zmq4.SocketIdentity(id), env.Marshal())
			if got.Status != zmq.StatusCharged || got.ChargeID != rep.ChargeID {
				t.Fatalf("identity %s: %+v, want charge %s", id, got, rep.ChargeID)
			}
		}
		viaReq := MustFinal(t, Go(func() (*zmq.Reply, error) { return reqClient(t, w.Addr()).Send(Ctx(t), env) }), zmq.StatusCharged)
		if viaReq.ChargeID != rep.ChargeID {
			t.Fatalf("REQ client got charge %s, want %s", viaReq.ChargeID, rep.ChargeID)
		}
		e.MustOneCharge(t, env.Key, rep.ChargeID)
	})

	t.Run("WorkerDiesBetweenClaimAndStripeOneCharge", func(t *testing.T) {
		e := MustEnv(t)
		stuck := &StuckCharger{Charger: e.Charger(), Entered: make(chan struct{})}
		w1 := routerWorker(t, e, "tcp://127.0.0.1:0", e.Processor(stuck), 1)
		c := dealerClient(t, w1.Addr())
		env := MustEnvelope(t, Event("acct_1"))
		out := Go(func() (*zmq.Reply, error) { return c.Send(Ctx(t), env) })

		Receive(t, stuck.Entered, "the claim")
		w1.Close()
		e.Clock.Advance(lease + time.Second)
		routerWorker(t, e, w1.Addr(), e.Processor(nil), 1)

		rep := MustFinal(t, out, zmq.StatusCharged)
		e.MustOneCharge(t, env.Key, rep.ChargeID)
	})

	t.Run("Declined", func(t *testing.T) {
		e := MustEnv(t)
		w := routerWorker(t, e, "tcp://127.0.0.1:0", e.Processor(nil), 1)
		ev := Event("acct_declined")
		ev.Source = "tok_chargeDeclinedStolenCard"
		env := MustEnvelope(t, ev)
		MustFinal(t, Go(func() (*zmq.Reply, error) { return dealerClient(t, w.Addr()).Send(Ctx(t), env) }), zmq.StatusDeclined)
	})

	t.Run("Refusals", func(t *testing.T) {
		e := MustEnv(t)
		w := routerWorker(t, e, "tcp://127.0.0.1:0", e.Processor(nil), 1)
		for _, tc := range refusals(t, MustEnvelope(t, Event("acct_1"))) {
			t.Run(tc.name, func(t *testing.T) {
				tc.check(t, rawDealer(t, w.Addr(), nil, tc.msg))
			})
		}
		if n := len(e.Sim.GroundTruth().Charges); n != 0 {
			t.Fatalf("%d charges after refusals", n)
		}
	})
}

// rawDealer sends msg in REQ framing on a fresh DEALER socket (with id when
// set) and returns the decoded reply.
func rawDealer(tb testing.TB, endpoint string, id zmq4.SocketIdentity, msg []byte) *zmq.Reply {
	tb.Helper()
	opts := []zmq4.Option{zmq4.WithTimeout(wait)}
	if len(id) != 0 {
		opts = append(opts, zmq4.WithID(id))
	}
	s := zmq4.NewDealer(context.Background(), opts...)
	defer s.Close()
	if err := s.Dial(endpoint); err != nil {
		tb.Fatal(err)
	}
	if err := s.SendMulti(zmq4.NewMsgFrom([]byte{}, msg)); err != nil {
		tb.Fatal(err)
	}
	return recvReply(tb, s)
}
