package http_test

import (
	"testing"
)

// An uncapped key forwarded an amount in a currency with no exchange rate
// untracked: with no cap there is nothing to count it against. But the
// key's guards count its reservations too, and an untracked request makes
// none, so a key limited to one charge a day by a velocity limit (or
// guarded against duplicates, or by a breaker) made as many gbp charges as
// it liked. A guarded key must refuse an amount it cannot count.
func TestAttackRedteam_UntrackedCurrencySkipsGuards(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"allowed_endpoints":["*"],"guards":{"velocity":[{"name":"one_a_day","per":"key","operations":["charges.create"],"limit":1,"window_seconds":86400}]}}`)
		a.must(t, 200, "POST", "/v1/charges", "amount=5000&currency=usd&source=tok_visa")
		for range 3 {
			a.call(t, "POST", "/v1/charges", "amount=5000&currency=gbp&source=tok_visa")
		}
		if n := len(e.Sim.GroundTruth().Charges); n != 1 {
			t.Fatalf("a key limited to one charge a day made %d", n)
		}
	})
}
