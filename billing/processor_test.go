package billing_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/billing"
	"github.com/keybrake/keybrake/stripesim"
)

func TestProcess_FiveDeliveriesOneCharge(t *testing.T) {
	e := MustEnv(t)
	p := e.Processor("w1")
	body := []byte(EventJSON("acct_1", "2026-11", 4200))
	first := p.Process(context.Background(), body)
	MustResult(t, first, billing.OutcomeCharged, billing.ActionAck)
	for range 4 {
		res := p.Process(context.Background(), body)
		MustResult(t, res, billing.OutcomeAlreadyDone, billing.ActionAck)
		if res.ChargeID != first.ChargeID || res.Key != first.Key {
			t.Fatalf("redelivery = %+v, first %+v", res, first)
		}
	}
	cs := e.MustCharges(t, 1)
	entry := e.MustEntry(t, string(body))
	if cs[0].ID != first.ChargeID || cs[0].Amount != 4200 || cs[0].Metadata[billing.MetadataKey] != first.Key ||
		entry.State != keybrake.EntryCharged || entry.ChargeID != cs[0].ID || entry.Attempts != 1 {
		t.Fatalf("charge %+v, entry %+v, result %+v", cs[0], entry, first)
	}
}

func TestProcess_PaymentMethod(t *testing.T) {
	// A payment method goes through a PaymentIntent confirmed at once.
	e := MustEnv(t)
	body := []byte(EventJSON("acct_1", "2026-11", 4200, `"payment_method":"pm_card_visa"`, `"metadata":{"plan":"pro"}`))
	res := e.Processor("w1").Process(context.Background(), body)
	MustResult(t, res, billing.OutcomeCharged, billing.ActionAck)
	cs := e.MustCharges(t, 1)
	if cs[0].ID != res.ChargeID || cs[0].PaymentIntent == "" || cs[0].Metadata["plan"] != "pro" || cs[0].Metadata[billing.MetadataKey] != res.Key {
		t.Fatalf("charge = %+v, result %+v", cs[0], res)
	}
}

func TestProcess_CrashBetweenClaimAndCall(t *testing.T) {
	// Worker A claimed and died before calling Stripe. While its lease
	// lives nobody calls Stripe; after it, B takes over and charges once.
	e := MustEnv(t)
	body := EventJSON("acct_1", "2026-11", 4200)
	ev, _ := billing.DecodeEvent([]byte(body))
	_, err := e.Ledger.Claim(context.Background(), keybrake.ClaimArgs{
		Entry: &keybrake.LedgerEntry{Key: ev.Key("test"), Fingerprint: ev.Fingerprint("test"), Amount: ev.Amount, Currency: ev.Currency},
		Owner: "worker_a/dead", Now: e.Clock.Now(), Until: e.Clock.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	b := e.Processor("worker_b")
	e.Clock.Advance(30 * time.Second)
	res := b.Process(context.Background(), []byte(body))
	MustResult(t, res, billing.OutcomeTransient, billing.ActionRetry)
	if res.Delay != 5*time.Second {
		t.Fatalf("retry delay = %v, want 5s: the 30s left on the lease, capped so a finished call is noticed soon", res.Delay)
	}
	e.MustCharges(t, 0)

	e.Clock.Advance(30 * time.Second)
	res = b.Process(context.Background(), []byte(body))
	MustResult(t, res, billing.OutcomeCharged, billing.ActionAck)
	cs := e.MustCharges(t, 1)
	if entry := e.MustEntry(t, body); entry.ChargeID != cs[0].ID || entry.Attempts != 2 {
		t.Fatalf("entry = %+v", entry)
	}
}

func TestProcess_CrashAfterCharge(t *testing.T) {
	// Stripe charged, but the answer never arrived: the retry with the
	// same key gets the same charge, and the ledger records its ID.
	for _, mode := range []string{stripesim.FaultFailAfter, stripesim.FaultCutAfter} {
		t.Run(mode, func(t *testing.T) {
			e := MustEnv(t)
			if _, err := e.Sim.AddFault(stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: mode, Count: 1}); err != nil {
				t.Fatal(err)
			}
			p := e.Processor("w1")
			body := EventJSON("acct_1", "2026-11", 4200)
			res := p.Process(context.Background(), []byte(body))
			MustResult(t, res, billing.OutcomeTransient, billing.ActionRetry)
			cs := e.MustCharges(t, 1)
			if entry := e.MustEntry(t, body); entry.State != keybrake.EntryPending || entry.LeaseOwner != "" {
				t.Fatalf("entry after the lost answer = %+v", entry)
			}
			res = p.Process(context.Background(), []byte(body))
			MustResult(t, res, billing.OutcomeCharged, billing.ActionAck)
			e.MustCharges(t, 1)
			if entry := e.MustEntry(t, body); res.ChargeID != cs[0].ID || entry.ChargeID != cs[0].ID || entry.Attempts != 2 {
				t.Fatalf("result %+v, entry %+v, charge %s", res, entry, cs[0].ID)
			}
		})
	}
	t.Run("FinishFails", func(t *testing.T) {
		// The ledger goes down between Stripe's 2xx and Finish: retry; the
		// entry keeps its lease, so the next delivery waits for it, then
		// replays the key and records the original charge.
		e := MustEnv(t)
		flaky := &FlakyLedger{Ledger: e.Ledger}
		p := e.Processor("w1")
		p.Ledger = flaky
		body := EventJSON("acct_1", "2026-11", 4200)
		flaky.FailFinish(true)
		res := p.Process(context.Background(), []byte(body))
		MustResult(t, res, billing.OutcomeTransient, billing.ActionRetry)
		cs := e.MustCharges(t, 1)
		if res.ChargeID != cs[0].ID {
			t.Fatalf("result = %+v, charge %s", res, cs[0].ID)
		}
		flaky.FailFinish(false)
		MustResult(t, p.Process(context.Background(), []byte(body)), billing.OutcomeTransient, billing.ActionRetry)
		e.Clock.Advance(time.Minute)
		res = p.Process(context.Background(), []byte(body))
		MustResult(t, res, billing.OutcomeCharged, billing.ActionAck)
		e.MustCharges(t, 1)
		if entry := e.MustEntry(t, body); entry.State != keybrake.EntryCharged || entry.ChargeID != cs[0].ID {
			t.Fatalf("entry = %+v, charge %s", entry, cs[0].ID)
		}
	})
}

func TestProcess_Declined(t *testing.T) {
	e := MustEnv(t)
	p := e.Processor("w1")
	body := EventJSON("acct_1", "2026-11", 4200, `"source":"tok_chargeDeclinedInsufficientFunds"`)
	res := p.Process(context.Background(), []byte(body))
	MustResult(t, res, billing.OutcomeDeclined, billing.ActionAck)
	cs := e.MustCharges(t, 1)
	entry := e.MustEntry(t, body)
	if cs[0].Status != "failed" || entry.State != keybrake.EntryDeclined || entry.ChargeID != cs[0].ID ||
		!strings.Contains(entry.Reason, "insufficient_funds") {
		t.Fatalf("charge %+v, entry %+v", cs[0], entry)
	}
	MustResult(t, p.Process(context.Background(), []byte(body)), billing.OutcomeAlreadyDone, billing.ActionAck)
	e.MustCharges(t, 1)
}

func TestProcess_Mismatch(t *testing.T) {
	// The same bill (customer, period) with another amount: failed and
	// dead-lettered, never a second charge, the first entry untouched.
	ctx := context.Background()
	t.Run("AfterCharge", func(t *testing.T) {
		e := MustEnv(t)
		p := e.Processor("w1")
		first := EventJSON("acct_1", "2026-11", 4200)
		MustResult(t, p.Process(ctx, []byte(first)), billing.OutcomeCharged, billing.ActionAck)
		for range 2 {
			res := p.Process(ctx, []byte(EventJSON("acct_1", "2026-11", 9900)))
			MustResult(t, res, billing.OutcomeFailed, billing.ActionDeadLetter)
			if !strings.Contains(res.Reason, "9900") || !strings.Contains(res.Reason, "4200") {
				t.Fatalf("reason = %q", res.Reason)
			}
		}
		e.MustCharges(t, 1)
		entry := e.MustEntry(t, first)
		cs, _, err := e.Ledger.FindConflicts(ctx, keybrake.ConflictFilter{Key: entry.Key})
		if err != nil || len(cs) != 1 || cs[0].Amount != 9900 || cs[0].Deliveries != 2 || entry.State != keybrake.EntryCharged || entry.Amount != 4200 {
			t.Fatalf("entry %+v, conflicts %+v, %v", entry, cs, err)
		}
	})
	t.Run("WhilePending", func(t *testing.T) {
		e := MustEnv(t)
		if _, err := e.Sim.AddFault(stripesim.Fault{Path: "/v1/charges", Mode: stripesim.FaultFailBefore, Count: 1}); err != nil {
			t.Fatal(err)
		}
		p := e.Processor("w1")
		first := EventJSON("acct_1", "2026-11", 4200)
		MustResult(t, p.Process(ctx, []byte(first)), billing.OutcomeTransient, billing.ActionRetry)
		MustResult(t, p.Process(ctx, []byte(EventJSON("acct_1", "2026-11", 9900))), billing.OutcomeFailed, billing.ActionDeadLetter)
		e.MustCharges(t, 0)
		MustResult(t, p.Process(ctx, []byte(first)), billing.OutcomeCharged, billing.ActionAck)
		if cs := e.MustCharges(t, 1); cs[0].Amount != 4200 {
			t.Fatalf("charge = %+v", cs[0])
		}
	})
	t.Run("StripeIdempotencyError", func(t *testing.T) {
		// A key Stripe saw with other parameters (another namespace's
		// worker, a bug): 400 idempotency_error, and the key's charge is
		// of another amount: failed, dead-lettered, naming that charge.
		e := MustEnv(t)
		body := EventJSON("acct_1", "2026-11", 4200)
		ev, _ := billing.DecodeEvent([]byte(body))
		if _, err := e.Charger.Charge(ctx, billing.ChargeRequest{Key: ev.Key("test"), Amount: 100, Currency: "usd", Source: "tok_visa"}); err != nil {
			t.Fatal(err)
		}
		res := e.Processor("w1").Process(ctx, []byte(body))
		MustResult(t, res, billing.OutcomeFailed, billing.ActionDeadLetter)
		cs := e.MustCharges(t, 1)
		if entry := e.MustEntry(t, body); entry.State != keybrake.EntryFailed || !strings.Contains(entry.Reason, "idempotency_error") ||
			!strings.Contains(entry.Reason, cs[0].ID) {
			t.Fatalf("entry = %+v", entry)
		}
	})
}

func TestProcess_PastIdempotencyWindow(t *testing.T) {
	ctx := context.Background()
	// The first attempt charged but its answer was lost, and the message
	// came back 25 hours later, when Stripe has forgotten the key.
	lostAnswer := func(t *testing.T) (*Env, string) {
		e := MustEnv(t)
		if _, err := e.Sim.AddFault(stripesim.Fault{Path: "/v1/charges", Mode: stripesim.FaultCutAfter, Count: 1}); err != nil {
			t.Fatal(err)
		}
		body := EventJSON("acct_1", "2026-11", 4200)
		MustResult(t, e.Processor("w1").Process(ctx, []byte(body)), billing.OutcomeTransient, billing.ActionRetry)
		e.MustCharges(t, 1)
		e.Clock.Advance(25 * time.Hour)
		return e, body
	}
	t.Run("FoundByMetadata", func(t *testing.T) {
		e, body := lostAnswer(t)
		res := e.Processor("w2").Process(ctx, []byte(body))
		MustResult(t, res, billing.OutcomeCharged, billing.ActionAck)
		cs := e.MustCharges(t, 1)
		if res.ChargeID != cs[0].ID || e.MustEntry(t, body).ChargeID != cs[0].ID {
			t.Fatalf("result %+v, charge %s", res, cs[0].ID)
		}
	})
	t.Run("WithoutSearchChargesTwice", func(t *testing.T) {
		// The control: the same key alone is not enough past 24 hours.
		e, body := lostAnswer(t)
		p := e.Processor("w2")
		p.SearchAfter = 1000 * time.Hour
		MustResult(t, p.Process(ctx, []byte(body)), billing.OutcomeCharged, billing.ActionAck)
		e.MustCharges(t, 2)
	})
	t.Run("NothingFoundCharges", func(t *testing.T) {
		// The first attempt never reached Stripe: the search finds nothing
		// and the charge is created, once.
		e := MustEnv(t)
		if _, err := e.Sim.AddFault(stripesim.Fault{Path: "/v1/charges", Mode: stripesim.FaultFailBefore, Count: 1}); err != nil {
			t.Fatal(err)
		}
		body := EventJSON("acct_1", "2026-11", 4200)
		MustResult(t, e.Processor("w1").Process(ctx, []byte(body)), billing.OutcomeTransient, billing.ActionRetry)
		e.Clock.Advance(25 * time.Hour)
		MustResult(t, e.Processor("w2").Process(ctx, []byte(body)), billing.OutcomeCharged, billing.ActionAck)
		MustResult(t, e.Processor("w3").Process(ctx, []byte(body)), billing.OutcomeAlreadyDone, billing.ActionAck)
		e.MustCharges(t, 1)
	})
}

func TestProcess_Transient(t *testing.T) {
	ctx := context.Background()
	t.Run("BackoffGrows", func(t *testing.T) {
		e := MustEnv(t)
		if _, err := e.Sim.AddFault(stripesim.Fault{Path: "/v1/charges", Mode: stripesim.FaultFailBefore, Status: 503}); err != nil {
			t.Fatal(err)
		}
		p := e.Processor("w1")
		body := []byte(EventJSON("acct_1", "2026-11", 4200))
		var delays []time.Duration
		for range 4 {
			res := p.Process(ctx, body)
			MustResult(t, res, billing.OutcomeTransient, billing.ActionRetry)
			delays = append(delays, res.Delay)
		}
		if delays[0] != time.Second || delays[1] != 2*time.Second || delays[3] != 8*time.Second {
			t.Fatalf("delays = %v", delays)
		}
		if billing.DefaultBackoff(100) != billing.DefaultMaxDelay {
			t.Fatalf("DefaultBackoff(100) = %v", billing.DefaultBackoff(100))
		}
		e.MustCharges(t, 0)
	})
	t.Run("Unauthorized", func(t *testing.T) {
		// A revoked or wrong key is an operator's problem: nothing is
		// lost, the event is released and retried after a long delay.
		e := MustEnv(t)
		e.Charger.Key = "not_a_key"
		p := e.Processor("w1")
		body := EventJSON("acct_1", "2026-11", 4200)
		res := p.Process(ctx, []byte(body))
		MustResult(t, res, billing.OutcomeTransient, billing.ActionRetry)
		if res.Delay != billing.DefaultOperatorDelay || !strings.Contains(res.Reason, "401") {
			t.Fatalf("result = %+v", res)
		}
		if entry := e.MustEntry(t, body); entry.State != keybrake.EntryPending || entry.LeaseOwner != "" {
			t.Fatalf("entry = %+v", entry)
		}
	})
}

func TestProcess_Malformed(t *testing.T) {
	// Hostile and broken bodies are dead-lettered with the reason, and
	// neither the ledger nor Stripe is touched.
	e := MustEnv(t)
	p := e.Processor("w1")
	for name, tc := range map[string]struct{ body, reason string }{
		"Empty":        {``, "truncated or empty"},
		"NotJSON":      {`charge acct_1`, "not valid JSON"},
		"Array":        {`[1,2]`, "must be a JSON object"},
		"Oversized":    {`{"description":"` + strings.Repeat("x", billing.MaxEventBytes) + `"}`, "at most 65536"},
		"FloatAmount":  {`{"customer_id":"a","billing_period":"p","amount":42.5,"currency":"usd","source":"tok_visa"}`, "amount: amount must be an integer"},
		"Unknown":      {`{"customer_id":"a","billing_period":"p","amount":42,"currency":"usd","source":"tok_visa","attempts":3}`, "attempts: Unknown field"},
		"Duplicate":    {`{"customer_id":"a","billing_period":"p","amount":42,"amount":4200,"currency":"usd","source":"tok_visa"}`, "amount: Duplicate field"},
		"TrailingData": {EventJSON("acct_1", "2026-11", 4200) + `{}`, "data after"},
		"BadUTF8":      {"{\"customer_id\":\"a\xff\"}", "UTF-8"},
	} {
		t.Run(name, func(t *testing.T) {
			res := p.Process(context.Background(), []byte(tc.body))
			MustResult(t, res, billing.OutcomeMalformed, billing.ActionDeadLetter)
			if !strings.Contains(res.Reason, tc.reason) || res.Key != "" {
				t.Fatalf("reason = %q, want it to contain %q", res.Reason, tc.reason)
			}
		})
	}
	if es, _, err := e.Ledger.FindEntries(context.Background(), keybrake.EntryFilter{}); err != nil || len(es) != 0 {
		t.Fatalf("ledger = %+v, %v", es, err)
	}
	e.MustCharges(t, 0)
}

func TestProcess_Concurrent(t *testing.T) {
	// 20 deliveries of one event at once, on 20 workers: one charge.
	e := MustEnv(t)
	body := []byte(EventJSON("acct_1", "2026-11", 4200))
	const n = 20
	results := make([]billing.Result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = e.Processor("w").Process(context.Background(), body)
		}()
	}
	wg.Wait()
	cs := e.MustCharges(t, 1)
	charged := 0
	for _, r := range results {
		switch {
		case r.Outcome == billing.OutcomeCharged:
			charged++
			if r.ChargeID != cs[0].ID {
				t.Fatalf("charged result %+v, charge %s", r, cs[0].ID)
			}
		case r.Action == billing.ActionAck && r.Outcome != billing.OutcomeAlreadyDone,
			r.Action == billing.ActionDeadLetter:
			t.Fatalf("result = %+v", r)
		}
	}
	if charged != 1 {
		t.Fatalf("%d deliveries charged, want 1: %+v", charged, results)
	}
	// Whatever was told to retry finds the work done.
	MustResult(t, e.Processor("w").Process(context.Background(), body), billing.OutcomeAlreadyDone, billing.ActionAck)
}

func TestProcess_LeaseExtendedDuringSlowCall(t *testing.T) {
	// A Stripe call slower than the lease: the lease is extended while it
	// runs, so another worker never takes over mid-call.
	e := MustEnv(t)
	release := make(chan struct{})
	fired := make(chan string, 1)
	if _, err := e.Sim.AddFault(stripesim.Fault{Path: "/v1/charges", Mode: stripesim.FaultLatency, Count: 1, Wait: release, Fired: fired}); err != nil {
		t.Fatal(err)
	}
	flaky := &FlakyLedger{Ledger: e.Ledger, Extends: make(chan time.Time, 1)}
	a := e.Processor("slow")
	a.Ledger, a.ExtendEvery = flaky, time.Millisecond
	body := []byte(EventJSON("acct_1", "2026-11", 4200))
	done := make(chan billing.Result)
	go func() { done <- a.Process(context.Background(), body) }()
	<-fired

	// 50 s in, wait for an extension made at that time (until = +110 s).
	e.Clock.Advance(50 * time.Second)
	for until := range flaky.Extends {
		if !until.Before(T0.Add(110 * time.Second)) {
			break
		}
	}
	// 70 s in: the first lease is over, but the extended one holds.
	e.Clock.Advance(20 * time.Second)
	res := e.Processor("other").Process(context.Background(), body)
	MustResult(t, res, billing.OutcomeTransient, billing.ActionRetry)
	close(release)
	MustResult(t, <-done, billing.OutcomeCharged, billing.ActionAck)
	e.MustCharges(t, 1)
}
