package http_test

import (
	"context"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripesim"
)

// A hold's amount and currency stay those of its largest value: after an
// update lowers the intent's USD value by switching currency, the hold still
// says "1000 usd" while the intent is 1400 jpy. A currency-only update back
// to usd was priced from the hold's amount (1000 usd, nothing to raise),
// but Stripe keeps the intent's amount: it became 1400 usd.
func TestAttackHolds_CurrencySwitchBack(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":10,"allowed_endpoints":["*"]}`)
		pi := a.must(t, 200, "POST", "/v1/payment_intents", "amount=1000&currency=usd&payment_method=pm_card_visa")
		// 1400 jpy is $9.38: below the $10 held, nothing to raise.
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi), "amount=1400&currency=jpy")
		// Back to usd without an amount: Stripe keeps 1400, now cents.
		a.call(t, "POST", "/v1/payment_intents/"+id(pi), "currency=usd")
		a.browserConfirm(t, pi)
		a.wantMoneyComplete(t, 1000)
	})
}

// The same confusion through increment_authorization: the new total is
// priced in the hold's currency (jpy) while the intent is in usd.
func TestAttackHolds_IncrementInHoldCurrency(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":10,"allowed_endpoints":["*"]}`)
		// 1490 jpy is $9.98.
		pi := a.must(t, 200, "POST", "/v1/payment_intents", "amount=1490&currency=jpy&payment_method=pm_card_visa&capture_method=manual")
		// 900 usd is $9: nothing to raise, the hold stays "1490 jpy".
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi), "amount=900&currency=usd")
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi)+"/confirm", "")
		// 1400 "jpy" is $9.38 to keybrake; Stripe authorizes 1400 usd.
		a.call(t, "POST", "/v1/payment_intents/"+id(pi)+"/increment_authorization", "amount=1400")
		a.call(t, "POST", "/v1/payment_intents/"+id(pi)+"/capture", "")
		a.wantMoneyComplete(t, 1000)
	})
}

// An update of the amount alone is priced in the hold's currency too.
func TestAttackHolds_AmountInHoldCurrency(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":10,"allowed_endpoints":["*"]}`)
		pi := a.must(t, 200, "POST", "/v1/payment_intents", "amount=1490&currency=jpy&payment_method=pm_card_visa")
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi), "amount=100&currency=usd")
		// 1480 "jpy" is $9.92 to keybrake; the intent becomes 1480 usd.
		a.call(t, "POST", "/v1/payment_intents/"+id(pi), "amount=1480")
		a.browserConfirm(t, pi)
		a.wantMoneyComplete(t, 1000)
	})
}

// Object locks are per key: key B (a $5 cap) confirms an intent that key A
// made, priced by lookup at $5; while B's confirm is in flight, A raises the
// intent to $1000 under its own cap, and B's confirm moves $1000.
func TestAttackHolds_CrossKeyRaiseDuringConfirm(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":1000,"allowed_endpoints":["*"]}`)
		b := newAttacker(t, e, `{"total_usd_cap":5,"allowed_endpoints":["*"]}`)
		pi := a.must(t, 200, "POST", "/v1/payment_intents", "amount=500&currency=usd&payment_method=pm_card_visa")
		wait, fired := make(chan struct{}), make(chan string, 1)
		e.Sim.AddFault(stripesim.Fault{Method: "POST", Path: "/v1/payment_intents/" + id(pi) + "/confirm", Mode: stripesim.FaultLatency, Wait: wait, Fired: fired, Count: 1})
		done := make(chan int)
		go func() { s, _ := b.call(t, "POST", "/v1/payment_intents/"+id(pi)+"/confirm", ""); done <- s }()
		select {
		case <-fired:
		case <-time.After(10 * time.Second):
			t.Fatal("confirm never reached the simulator")
		}
		s, v := a.call(t, "POST", "/v1/payment_intents/"+id(pi), "amount=100000")
		t.Logf("A's raise during B's confirm: %d %v", s, v["error"])
		close(wait)
		t.Logf("B's confirm: %d", <-done)
		moved := e.movedCents()
		if spent := e.Spend(t, b.keyID); moved > 500 && spent.Total > 5*keybrake.MicrosPerUSD {
			t.Fatalf("key B ($5 cap) confirmed %d cents; B counts %s", moved, spent.Total)
		}
	})
}

// A create whose answer is lost stays uncertain and unlinked; the object is
// then confirmed through keybrake, whose reservation becomes the object's
// hold. The resolver later settles the create's reservation as held from
// Stripe's saved answer, but cannot link it (the object is held already):
// no sweep ever finds it, and it keeps the key's budget counted forever.
func TestAttackHolds_LostCreateOrphanHold(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":20,"allowed_endpoints":["*"]}`)
		e.Sim.AddFault(stripesim.Fault{Method: "POST", Path: "/v1/payment_intents", Mode: stripesim.FaultCutAfter, Count: 1})
		a.must(t, 502, "POST", "/v1/payment_intents", "amount=500&currency=usd&payment_method=pm_card_visa&capture_method=manual")
		pis := e.Sim.GroundTruth().PaymentIntents
		if len(pis) != 1 {
			t.Fatalf("%d intents upstream", len(pis))
		}
		pi := pis[0].ID
		a.must(t, 200, "POST", "/v1/payment_intents/"+pi+"/confirm", "")
		if _, err := e.Server.Resolve(context.Background()); err != nil {
			t.Fatal(err)
		}
		a.must(t, 200, "POST", "/v1/payment_intents/"+pi+"/capture", "")
		e.Clock.Advance(e.Server.HoldTTL + time.Hour)
		e.Sim.Advance(e.Server.HoldTTL + time.Hour)
		if _, err := e.Server.SweepHolds(context.Background()); err != nil {
			t.Fatal(err)
		}
		a.wantMoneyComplete(t, 2000)
		if sp := e.Spend(t, a.keyID); sp.Held != 0 {
			t.Fatalf("after capture and sweep: %s still held (total %s), for 500 cents moved", sp.Held, sp.Total)
		}
	})
}
