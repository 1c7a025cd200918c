package http_test

import (
	"testing"
	"time"
)

// A raise counted in the day its hold was made, and a hold lives
// --hold-ttl (24 h) of elapsed time, not one calendar day: across a 23-hour
// day (the spring-forward Sunday, 2026-03-08 in New York) a hold made late
// on Saturday is still live early on Monday. An attacker with a $10 daily
// cap held $1 at 23:30 on Saturday and $1 at 23:50 on Sunday, then on
// Monday just after midnight spent Monday's own $10 and raised both holds
// to $10 (each raise checked against, and counted in, its hold's own day,
// which had room) and confirmed them: $30 moved on Monday under a $10 daily
// cap. A hold raised on a later day now moves there whole
// (keybrake.RaiseBuckets): both raises are refused by Monday's cap, and
// Monday moves its $10 and the two $1 holds, confirmed as they were made.
func TestAttackWindows_RaiseAcrossSpringForward(t *testing.T) {
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
			a.must(t, 429, "POST", "/v1/payment_intents/"+id(pi), "amount=1000")
			a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi)+"/confirm", "")
		}
		if moved := e.movedCents() - before; moved != 1000+2*100 {
			t.Fatalf("moved %d cents on Monday under a $10 daily cap; want Monday's $10 and the two $1 holds", moved)
		}
		a.wantMoneyComplete(t, 1200)
	})
}
