package billing_test

import (
	"context"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/billing"
	"github.com/keybrake/keybrake/stripesim"
)

// deliverUntilFinal redelivers body to p, as a broker would, until the
// result is not a retry, and returns it.
func deliverUntilFinal(tb testing.TB, p *billing.Processor, body []byte) billing.Result {
	tb.Helper()
	for range 10 {
		res := p.Process(context.Background(), body)
		if res.Action != billing.ActionRetry {
			return res
		}
	}
	tb.Fatal("no final result after 10 deliveries")
	panic("unreachable")
}

// mustChargedOnce fails unless the simulator holds exactly one charge and
// the event's ledger entry is charged with it.
func mustChargedOnce(tb testing.TB, e *Env, body string) {
	tb.Helper()
	cs := e.MustCharges(tb, 1)
	if entry := e.MustEntry(tb, body); entry.State != keybrake.EntryCharged || entry.ChargeID != cs[0].ID {
		tb.Fatalf("ledger entry %+v, but the customer was charged %s (%d %s)", entry, cs[0].ID, cs[0].Amount, cs[0].Currency)
	}
}

// A worker's lease lapses while its Stripe call is still in flight (it was
// cut off from the ledger, or paused), and a redelivery takes the entry
// over and calls with the same key. keybrake answers the second call 409
// with type idempotency_error (the first is still upstream). The processor
// read the type before the status: a permanent failure, recorded "failed"
// and dead-lettered; the first call then charged the customer, and its
// Finish found the entry final. The ledger said failed over a $42 charge.
func TestAttackWorker_KeyInUseRecordedFailed(t *testing.T) {
	ctx := context.Background()
	e := MustEnv(t)
	base := MustProxy(t, e)
	e.Charger.BaseURL, e.Charger.Key = base, MustVaultKey(t, base, `{"label":"billing-2026-11","total_usd_cap":"100.00"}`)
	release, fired := make(chan struct{}), make(chan string, 1)
	if _, err := e.Sim.AddFault(stripesim.Fault{Path: "/v1/charges", Mode: stripesim.FaultLatency, Count: 1, Wait: release, Fired: fired}); err != nil {
		t.Fatal(err)
	}
	body := EventJSON("acct_1", "2026-11", 4200)
	w1 := e.Processor("w1")
	w1.ExtendEvery = time.Hour // its extensions never reach the ledger
	first := make(chan billing.Result, 1)
	go func() { first <- w1.Process(ctx, []byte(body)) }()
	select {
	case <-fired:
	case <-time.After(20 * time.Second):
		t.Fatal("the first call never reached Stripe")
	}
	e.Clock.Advance(2 * time.Minute) // w1's lease lapses

	res := e.Processor("w2").Process(ctx, []byte(body))
	if res.Action != billing.ActionRetry {
		t.Errorf("the takeover's call, refused while the first is upstream: %+v, want a retry", res)
	}
	close(release)
	<-first // charged, but its lease was taken: it cannot record that
	if final := deliverUntilFinal(t, e.Processor("w3"), []byte(body)); final.Action != billing.ActionAck {
		t.Errorf("redelivered: %+v, want the charge acknowledged", final)
	}
	mustChargedOnce(t, e, body)
}

// The worker's charge went through but its answer was lost; before the
// retry an operator gave the worker a new vault key (the old one was
// revoked, or its cap was spent: the 401 and 429 the docs tell an operator
// to fix). keybrake sees the same Idempotency-Key from another vault key,
// which Stripe answers with the first charge, and refuses to hand it over:
// 400 idempotency_error (whose message said, until 2026-12-01, "Nothing
// was charged. Retry with a new Idempotency-Key."). The processor recorded the event failed and
// dead-lettered it: a $42 charge the ledger says never happened, with a
// reason inviting a second one.
func TestAttackWorker_IdempotencyErrorAfterKeyRotationRecordedFailed(t *testing.T) {
	ctx := context.Background()
	e := MustEnv(t)
	base := MustProxy(t, e)
	e.Charger.BaseURL, e.Charger.Key = base, MustVaultKey(t, base, `{"label":"billing-2026-11","total_usd_cap":"100.00"}`)
	if _, err := e.Sim.AddFault(stripesim.Fault{Path: "/v1/charges", Mode: stripesim.FaultCutAfter, Count: 1}); err != nil {
		t.Fatal(err)
	}
	body := EventJSON("acct_1", "2026-11", 4200)
	MustResult(t, e.Processor("w1").Process(ctx, []byte(body)), billing.OutcomeTransient, billing.ActionRetry)
	e.MustCharges(t, 1)

	e.Charger.Key = MustVaultKey(t, base, `{"label":"billing-2026-11-rotated","total_usd_cap":"100.00"}`)
	final := deliverUntilFinal(t, e.Processor("w2"), []byte(body))
	if final.Action != billing.ActionAck || final.ChargeID == "" {
		t.Errorf("after the rotation: %+v, want the first charge acknowledged", final)
	}
	mustChargedOnce(t, e, body)
}

// A charge Stripe answers "pending" (a bank debit) is money on its way. The
// processor read every status but "succeeded" as a decline: the ledger
// said declined over a $42 debit. Worse, past Stripe's 24 hours the search
// by metadata skipped a pending charge, and the retry of an event whose
// first answer was lost created a second one: $42 charged twice. The
// simulator answers a charge on a bank account token (btok_us_verified)
// pending, as Stripe does.
func TestAttackWorker_PendingChargeReadAsDeclined(t *testing.T) {
	const bankDebit = `"source":"btok_us_verified"`
	ctx := context.Background()
	t.Run("Answered", func(t *testing.T) {
		e := MustEnv(t)
		p := e.Processor("w1")
		body := EventJSON("acct_1", "2026-11", 4200, bankDebit)
		MustResult(t, p.Process(ctx, []byte(body)), billing.OutcomeCharged, billing.ActionAck)
		mustChargedOnce(t, e, body)
	})
	t.Run("AnswerLostPastTheWindow", func(t *testing.T) {
		e := MustEnv(t)
		if _, err := e.Sim.AddFault(stripesim.Fault{Path: "/v1/charges", Mode: stripesim.FaultCutAfter, Count: 1}); err != nil {
			t.Fatal(err)
		}
		body := EventJSON("acct_1", "2026-11", 4200, bankDebit)
		p := e.Processor("w1")
		MustResult(t, p.Process(ctx, []byte(body)), billing.OutcomeTransient, billing.ActionRetry)
		e.Clock.Advance(25 * time.Hour)
		p = e.Processor("w2")
		res := p.Process(ctx, []byte(body))
		mustChargedOnce(t, e, body)
		MustResult(t, res, billing.OutcomeCharged, billing.ActionAck)
	})
}

// TestAttackWorker_DecomposedCustomerIDChargedTwice: a producer that
// re-published a bill after a round trip through a system writing Unicode
// decomposed (NFD, as macOS file names and some JavaScript do) sent
// "José" as J-o-s-e-U+0301; the key hashed other bytes and Stripe charged
// the bill a second time. A byte-order mark a CSV left on the ID did the
// same. Such IDs are now refused (dead-lettered), not charged.
func TestAttackWorker_DecomposedCustomerIDChargedTwice(t *testing.T) {
	ctx := context.Background()
	e := MustEnv(t)
	first := EventJSON("José", "2026-11", 4200)
	MustResult(t, e.Processor("w").Process(ctx, []byte(first)), billing.OutcomeCharged, billing.ActionAck)
	for _, again := range []string{EventJSON("Jose\u0301", "2026-11", 4200), EventJSON("\ufeffJosé", "2026-11", 4200)} {
		res := e.Processor("w").Process(ctx, []byte(again))
		if res.Action == billing.ActionAck && res.Outcome == billing.OutcomeCharged {
			t.Errorf("%q: %+v, a second charge for one bill", again, res)
		}
	}
	if n := len(e.Charges()); n != 1 {
		t.Fatalf("%d charges for one bill", n)
	}
}
