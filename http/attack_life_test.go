package http_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	stripego "github.com/stripe/stripe-go/v82"
)

// Red-team of objects' lifecycles, races and idempotency (branch rt-life).

// payment_intents.confirm takes amount_to_confirm (Stripe API 2026-04-22,
// secret keys only): the intent is confirmed at that amount instead of its
// own, a surcharge added for one. keybrake settled a confirm against the
// intent's hold without reading it, and priced an intent it did not hold
// at its looked-up amount: a $25 key held $10 and confirmed $1,000.00,
// which the answer then counted in full (ALARM) after it had moved.
func TestAttackLife_AmountToConfirm(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":25,"allowed_endpoints":["*"]}`)
		held := a.must(t, 200, "POST", "/v1/payment_intents", "amount=1000&currency=usd&payment_method=pm_card_visa")
		a.must(t, 429, "POST", "/v1/payment_intents/"+id(held)+"/confirm", "amount_to_confirm=100000")
		// An intent made outside keybrake: nothing held, priced by lookup.
		outside, err := e.Direct().V1PaymentIntents.Create(t.Context(), &stripego.PaymentIntentCreateParams{
			Amount: stripego.Int64(500), Currency: stripego.String("usd"), PaymentMethod: stripego.String("pm_card_visa")})
		if err != nil {
			t.Fatal(err)
		}
		a.must(t, 429, "POST", "/v1/payment_intents/"+outside.ID+"/confirm", "amount_to_confirm=100000")
		a.wantMoneyComplete(t, 2500)
		// Within the cap it is a raise like any other, counted first.
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(held)+"/confirm", "amount_to_confirm=1500")
		if got := a.e.Spend(t, a.keyID).Total; got != 15_000_000 {
			t.Fatalf("counted %s after confirming $15.00 of a $10.00 hold", got)
		}
		a.wantMoneyComplete(t, 2500)
	})
}

// A per-request cap bounds one payment. Raising an intent's hold checked
// the difference against it, not the intent's new amount: a key capped at
// $50 a request made a $40.00 intent, raised it $49.00 at a time to
// $1,000.00 (update or increment_authorization), and confirmed it as one
// payment twenty times its per-request cap.
func TestAttackLife_PerRequestCapByRaises(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"per_request_usd_cap":50,"total_usd_cap":5000,"allowed_endpoints":["*"]}`)
		pi := a.must(t, 200, "POST", "/v1/payment_intents", "amount=4000&currency=usd&payment_method=pm_card_visa")
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi), "amount=5000")
		v := a.must(t, 429, "POST", "/v1/payment_intents/"+id(pi), "amount=8900")
		if msg := fmt.Sprint(v["error"]); !strings.Contains(msg, "per-request cap") || !strings.Contains(msg, "$89") {
			t.Fatalf("refusal %v", msg)
		}
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi)+"/confirm", "capture_method=manual")
		a.must(t, 429, "POST", "/v1/payment_intents/"+id(pi)+"/increment_authorization", "amount=5100")
		a.must(t, 429, "POST", "/v1/payment_intents/"+id(pi)+"/capture", "amount_to_capture=9900")
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi)+"/capture", "")
		for _, p := range e.Sim.GroundTruth().PaymentIntents {
			if p.AmountReceived > 5000 {
				t.Fatalf("one payment of %d cents on a key capped at $50 a request", p.AmountReceived)
			}
		}
	})
}

// A velocity limit counted reservations, and a capture, confirm, update or
// increment of an intent the key holds makes none (it acts on the
// intent's hold): a key limited to one payment_intents.capture an hour
// captured every authorization it held, and one limited to one confirm an
// hour confirmed every intent it had made. Such a request counts, when it
// arrives, in the limits that name it but not the operation that made the
// hold (which counted the movement then).
func TestAttackLife_VelocityOnHeldObjects(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"],"guards":{"velocity":[
			{"name":"one_capture","per":"key","operations":["payment_intents.capture"],"limit":1,"window_seconds":3600},
			{"name":"one_confirm","per":"key","operations":["payment_intents.confirm"],"limit":1,"window_seconds":3600}]}}`)
		var pis []string
		for range 3 {
			pi := a.must(t, 200, "POST", "/v1/payment_intents", "amount=500&currency=usd&payment_method=pm_card_visa&capture_method=manual")
			pis = append(pis, id(pi))
		}
		a.must(t, 200, "POST", "/v1/payment_intents/"+pis[0]+"/confirm", "")
		a.must(t, 429, "POST", "/v1/payment_intents/"+pis[1]+"/confirm", "")
		a.must(t, 200, "POST", "/v1/payment_intents/"+pis[0]+"/capture", "")
		auth := a.must(t, 200, "POST", "/v1/payment_intents", "amount=500&currency=usd&payment_method=pm_card_visa&capture_method=manual&confirm=true")
		a.must(t, 429, "POST", "/v1/payment_intents/"+id(auth)+"/capture", "")
		if n, _ := capturedCents(e); n != 1 {
			t.Fatalf("%d captures under a limit of one an hour", n)
		}
		// A limit that also names the operation that made the hold counted
		// the movement then: authorizing and capturing is one payment.
		b := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"],"guards":{"velocity":[
			{"name":"one_payment","per":"key","operations":["payment_intents.create","payment_intents.capture"],"limit":1,"window_seconds":3600}]}}`)
		auth = b.must(t, 200, "POST", "/v1/payment_intents", "amount=500&currency=usd&payment_method=pm_card_visa&capture_method=manual&confirm=true")
		b.must(t, 200, "POST", "/v1/payment_intents/"+id(auth)+"/capture", "")
		b.must(t, 429, "POST", "/v1/payment_intents", "amount=500&currency=usd&payment_method=pm_card_visa")
	})
}

// The breaker's spend-rate rule suspends a key whose spend in its window
// runs far above its usual rate. It was decided when a reservation was
// made, never when a hold was raised: a key that spent $10 an hour made
// small intents and raised them at once to $900.00 in a minute, and the
// breaker tripped at its next reservation, after the raised intents had
// been confirmed.
func TestAttackLife_BreakerOnRaises(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":5000,"allowed_endpoints":["*"],"guards":{"breaker":{"spend_multiple":10,"spend_window_seconds":3600,"baseline_seconds":39600}}}`)
		a.must(t, 200, "POST", "/v1/payment_intents", "amount=10000&currency=usd&payment_method=pm_card_visa&confirm=true")
		e.Clock.Advance(5 * time.Hour)
		pi := a.must(t, 200, "POST", "/v1/payment_intents", "amount=100&currency=usd&payment_method=pm_card_visa")
		v := a.must(t, http.StatusForbidden, "POST", "/v1/payment_intents/"+id(pi), "amount=90000")
		if msg := fmt.Sprint(v["error"]); !strings.Contains(msg, "spend_rate") {
			t.Fatalf("refusal %v", msg)
		}
		a.must(t, http.StatusForbidden, "POST", "/v1/payment_intents/"+id(pi)+"/confirm", "") // suspended
		if _, cents := e.SucceededCents("usd"); cents != 10000 {
			t.Fatalf("%d cents moved after the breaker should have tripped", cents)
		}
	})
}
