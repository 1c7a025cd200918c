package http_test

import (
	"context"
	"testing"
	"time"

	"github.com/keybrake/keybrake/stripesim"
)

// The hold sweeper leases an expired hold's object for UpstreamTimeout plus
// a margin, then retrieves it, ends it, and retrieves it again: up to three
// upstream calls, each up to UpstreamTimeout, under one lease. An
// authorization is ended by a refund, which Stripe applies to a captured
// charge too. The key holder waits for the sweeper to retrieve the expired
// authorization (still uncaptured), lets the lease run out while the
// sweeper's refund is on its way, and captures through keybrake, which
// finds the object unlocked: the capture settles the $10.00 hold, and the
// sweeper's refund then takes back the captured $10.00, a refund made with
// the real key that no cap counts. The sweeper now renews its lock, and
// checks the hold is still what it leased, before ending an object.
func TestAttackHolds_SweepRefundsCaptureAfterLeaseExpired(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":20,"allowed_endpoints":["*"]}`)
		ch := a.must(t, 200, "POST", "/v1/charges", "amount=1000&currency=usd&source=tok_visa&capture=false")
		e.Clock.Advance(e.Server.HoldTTL + time.Minute)
		e.Sim.Advance(e.Server.HoldTTL + time.Minute)
		waitGet, firedGet := make(chan struct{}), make(chan string, 1)
		e.Sim.AddFault(stripesim.Fault{Method: "GET", Path: "/v1/charges/" + id(ch), Mode: stripesim.FaultLatency, Wait: waitGet, Fired: firedGet, Count: 1})
		waitRefund, firedRefund := make(chan struct{}), make(chan string, 1)
		e.Sim.AddFault(stripesim.Fault{Method: "POST", Path: "/v1/refunds", Mode: stripesim.FaultLatency, Wait: waitRefund, Fired: firedRefund, Count: 1})
		swept := make(chan error, 1)
		go func() { _, err := e.Server.SweepHolds(context.Background()); swept <- err }()
		// The sweeper's retrieval is slow: its lease runs out meanwhile.
		sweepStep(t, firedGet, "the sweeper's retrieval")
		e.Clock.Advance(e.Server.UpstreamTimeout + time.Minute)
		close(waitGet)
		// The charge was still uncaptured: the sweeper ends it with a
		// refund, and while the refund is upstream the key holder captures.
		sweepStep(t, firedRefund, "the sweeper's refund")
		s, v := a.call(t, "POST", "/v1/charges/"+id(ch)+"/capture", "")
		t.Logf("capture during the sweeper's refund: %d %v", s, v["error"])
		close(waitRefund)
		if err := <-swept; err != nil {
			t.Fatal(err)
		}
		wantNoUncountedRefund(t, e, a)
	})
}

func sweepStep(t *testing.T, fired <-chan string, what string) {
	t.Helper()
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never reached the simulator", what)
	}
}

// wantNoUncountedRefund fails if the simulator refunded captured money:
// keybrake's sweeper only ever releases authorizations.
func wantNoUncountedRefund(t *testing.T, e *Env, a *attacker) {
	t.Helper()
	m := e.Sim.Moved().Total
	if m.Captured["usd"] > 0 && m.Refunded["usd"] > 0 {
		t.Fatalf("captured %d cents and the sweeper refunded %d cents of it (key counts %s)", m.Captured["usd"], m.Refunded["usd"], e.Spend(t, a.keyID).Total)
	}
	a.wantMoneyComplete(t, 2000)
}
