package http_test

import (
	"testing"
	"time"
)

// A raise counts in the day its hold was made (docs/money-model.md, "What a
// cap does not cover"), and a hold lives --hold-ttl (24 h) of elapsed time,
// not one calendar day: across a 23-hour day (the spring-forward Sunday,
// 2026-03-08 in New York) a hold made late on Saturday is still live early
// on Monday. An attacker with a $10 daily cap holds $1 at 23:30 on Saturday
// and $1 at 23:50 on Sunday, then on Monday just after midnight spends
// Monday's own $10 and raises both holds to $10 (each raise checked against,
// and counted in, its hold's own day, which has room) and confirms them:
// $30 moves on Monday. This test pins that bound, three daily caps on the day
// after a 23-hour day, two on any other day with the default TTL; a longer
// --hold-ttl widens it by one daily cap per calendar day the TTL spans.
func TestAttackWindows_RaiseAcrossSpringForwardBound(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		ny, err := time.LoadLocation("America/New_York")
		if err != nil {
			t.Fatal(err)
		}
		a := newAttacker(t, e, `{"daily_usd_cap":10,"timezone":"America/New_York","allowed_endpoints":["*"]}`)
		e.Clock.Set(time.Date(2026, 3, 7, 23, 30, 0, 0, ny))
		pi1 := a.must(t, 200, "POST", "/v1/payment_intents", "amount=100&currency=usd&payment_method=pm_card_visa")
		e.Clock.Set(time.Date(2026, 3, 8, 23, 50, 0, 0, ny))
		pi2 := a.must(t, 200, "POST", "/v1/payment_intents", "amount=100&currency=usd&payment_method=pm_card_visa")
		e.Clock.Set(time.Date(2026, 3, 9, 0, 10, 0, 0, ny)) // pi1 is 23 h 40 min old: still held
		before := e.movedCents()
		a.must(t, 200, "POST", "/v1/payment_intents", "amount=1000&currency=usd&payment_method=pm_card_visa&confirm=true")
		a.must(t, 429, "POST", "/v1/payment_intents", "amount=100&currency=usd&payment_method=pm_card_visa&confirm=true") // Monday's cap is spent
		for _, pi := range []map[string]any{pi1, pi2} {
			a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi), "amount=1000")
			a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi)+"/confirm", "")
		}
		moved := e.movedCents() - before
		if moved > 3*1000 {
			t.Fatalf("moved %d cents on Monday under a $10 daily cap; the documented bound is 3000", moved)
		}
		t.Logf("moved %d cents on Monday 2026-03-09 under a $10 daily cap", moved)
		a.wantMoneyComplete(t, 3000)
	})
}
