package stripesim_test

import (
	"context"
	"strings"
	"testing"
	"time"

	stripe "github.com/stripe/stripe-go/v82"

	"github.com/keybrake/keybrake/stripesim"
)

var visa2000 = form("amount", "2000", "currency", "usd", "source", "tok_visa", "metadata[order]", "1")

func TestIdempotency(t *testing.T) {
	t.Run("OKReplay", func(t *testing.T) {
		e := MustEnv(t)
		first := e.do(t, "POST", "/v1/charges", visa2000, "Idempotency-Key", "k1")
		wantStatus(t, first, 200)
		second := e.do(t, "POST", "/v1/charges", visa2000, "Idempotency-Key", "k1")
		wantStatus(t, second, 200)
		if string(first.body) != string(second.body) || second.header.Get("Idempotent-Replayed") != "true" ||
			first.header.Get("Idempotent-Replayed") != "" || second.header.Get("Idempotency-Key") != "k1" ||
			!strings.HasPrefix(second.header.Get("Request-Id"), "req_") {
			t.Fatalf("replay: headers %v, body %s vs %s", second.header, second.body, first.body)
		}
		if n := len(e.sim.GroundTruth().Charges); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})

	t.Run("OKReplaySDK", func(t *testing.T) {
		e := MustEnv(t)
		params := func() *stripe.ChargeCreateParams {
			p := &stripe.ChargeCreateParams{Amount: stripe.Int64(2000), Currency: stripe.String("usd"),
				Source: &stripe.PaymentSourceSourceParams{Token: stripe.String("tok_visa")}}
			p.SetIdempotencyKey("sdk-key")
			return p
		}
		a, err := e.sdk().V1Charges.Create(context.Background(), params())
		if err != nil {
			t.Fatal(err)
		}
		b, err := e.sdk().V1Charges.Create(context.Background(), params())
		if err != nil || a.ID != b.ID {
			t.Fatalf("replay = %v, %v; want %s", b, err, a.ID)
		}
	})

	t.Run("OKParameterOrder", func(t *testing.T) {
		e := MustEnv(t)
		wantStatus(t, e.do(t, "POST", "/v1/charges", "amount=2000&currency=usd&source=tok_visa", "Idempotency-Key", "k"), 200)
		r := e.do(t, "POST", "/v1/charges", "source=tok_visa&currency=usd&amount=2000", "Idempotency-Key", "k")
		if r.status != 200 || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("reordered replay: %d %v", r.status, r.header)
		}
	})

	t.Run("OKDeclineSaved", func(t *testing.T) {
		e := MustEnv(t)
		body := form("amount", "2000", "currency", "usd", "source", "tok_chargeDeclined")
		first := e.do(t, "POST", "/v1/charges", body, "Idempotency-Key", "d")
		wantStatus(t, first, 402)
		second := e.do(t, "POST", "/v1/charges", body, "Idempotency-Key", "d")
		if second.status != 402 || string(second.body) != string(first.body) || second.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("decline replay: %d %s", second.status, second.body)
		}
		if n := len(e.sim.GroundTruth().Charges); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})

	t.Run("OKValidationErrorNotSaved", func(t *testing.T) {
		e := MustEnv(t)
		wantStatus(t, e.do(t, "POST", "/v1/charges", form("amount", "2000", "currency", "usd", "source", "tok_visa", "foo", "1"),
			"Idempotency-Key", "v"), 400)
		// The key was not consumed: the corrected request is a new one.
		r := e.do(t, "POST", "/v1/charges", visa2000, "Idempotency-Key", "v")
		if r.status != 200 || r.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("after 400: %d %v", r.status, r.header)
		}
	})

	t.Run("OKScopedByKeyAndAccount", func(t *testing.T) {
		e := MustEnv(t)
		wantStatus(t, e.do(t, "POST", "/v1/charges", visa2000, "Idempotency-Key", "s"), 200)
		for _, h := range [][]string{
			{"Idempotency-Key", "s", "Stripe-Account", "acct_2"},
			{"Idempotency-Key", "s", "Authorization", "Bearer sk_test_another"},
		} {
			r := e.do(t, "POST", "/v1/charges", visa2000, h...)
			if r.status != 200 || r.header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("%v: %d %v", h, r.status, r.header)
			}
		}
		if n := len(e.sim.GroundTruth().Charges); n != 3 {
			t.Fatalf("%d charges, want 3", n)
		}
	})

	t.Run("ErrOtherParameters", func(t *testing.T) {
		e := MustEnv(t)
		wantStatus(t, e.do(t, "POST", "/v1/charges", visa2000, "Idempotency-Key", "m"), 200)
		r := e.do(t, "POST", "/v1/charges", form("amount", "3000", "currency", "usd", "source", "tok_visa"), "Idempotency-Key", "m")
		wantStatus(t, r, 400)
		if err := r.apiError(t).Error; err.Type != "idempotency_error" || err.Code != "idempotency_error" {
			t.Fatalf("error = %+v", err)
		}
		_, sdkErr := e.sdk().V1Charges.Create(context.Background(), func() *stripe.ChargeCreateParams {
			p := &stripe.ChargeCreateParams{Amount: stripe.Int64(999), Currency: stripe.String("usd"),
				Source: &stripe.PaymentSourceSourceParams{Token: stripe.String("tok_visa")}}
			p.SetIdempotencyKey("m")
			return p
		}())
		if se := stripeErr(t, sdkErr); se.Type != stripe.ErrorTypeIdempotency {
			t.Fatalf("sdk error type = %s", se.Type)
		}
		if n := len(e.sim.GroundTruth().Charges); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})

	t.Run("ErrOtherPath", func(t *testing.T) {
		e := MustEnv(t)
		wantStatus(t, e.do(t, "POST", "/v1/charges", visa2000, "Idempotency-Key", "p"), 200)
		r := e.do(t, "POST", "/v1/payment_intents", form("amount", "2000", "currency", "usd"), "Idempotency-Key", "p")
		wantStatus(t, r, 400)
		if err := r.apiError(t).Error; err.Type != "idempotency_error" {
			t.Fatalf("error = %+v", err)
		}
	})

	t.Run("ErrKeyTooLong", func(t *testing.T) {
		e := MustEnv(t)
		r := e.do(t, "POST", "/v1/charges", visa2000, "Idempotency-Key", strings.Repeat("k", 256))
		wantStatus(t, r, 400)
		r.apiError(t)
		wantStatus(t, e.do(t, "POST", "/v1/charges", visa2000, "Idempotency-Key", strings.Repeat("k", 255)), 200)
		if n := len(e.sim.GroundTruth().Charges); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})

	t.Run("ErrInUse", func(t *testing.T) {
		e := MustEnv(t)
		release := make(chan struct{})
		fired := make(chan string, 1)
		if _, err := e.sim.AddFault(stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultLatency,
			Nth: 1, Wait: release, Fired: fired}); err != nil {
			t.Fatal(err)
		}
		firstDone := make(chan response, 1)
		go func() {
			r, err := e.send(context.Background(), "POST", "/v1/charges", visa2000, "Idempotency-Key", "busy")
			if err != nil {
				t.Error(err)
			}
			firstDone <- r
		}()
		<-fired // the first request holds the key
		second := e.do(t, "POST", "/v1/charges", visa2000, "Idempotency-Key", "busy")
		wantStatus(t, second, 409)
		if err := second.apiError(t).Error; err.Code != "idempotency_key_in_use" {
			t.Fatalf("error = %+v", err)
		}
		close(release)
		first := <-firstDone
		wantStatus(t, first, 200)
		third := e.do(t, "POST", "/v1/charges", visa2000, "Idempotency-Key", "busy")
		if third.status != 200 || string(third.body) != string(first.body) || third.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("after release: %d %s", third.status, third.body)
		}
		if n := len(e.sim.GroundTruth().Charges); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})

	t.Run("OKExpiresAfter24h", func(t *testing.T) {
		e := MustEnv(t)
		first := e.do(t, "POST", "/v1/charges", visa2000, "Idempotency-Key", "old")
		wantStatus(t, first, 200)
		e.sim.Advance(23*time.Hour + 59*time.Minute)
		if r := e.do(t, "POST", "/v1/charges", visa2000, "Idempotency-Key", "old"); r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("before 24h: not replayed (%d)", r.status)
		}
		e.sim.Advance(time.Minute)
		r := e.do(t, "POST", "/v1/charges", visa2000, "Idempotency-Key", "old")
		if r.status != 200 || r.header.Get("Idempotent-Replayed") != "" || string(r.body) == string(first.body) {
			t.Fatalf("after 24h: replayed (%d %v)", r.status, r.header)
		}
		if n := len(e.sim.GroundTruth().Charges); n != 2 {
			t.Fatalf("%d charges, want 2", n)
		}
	})

	t.Run("OKExpiresAfterAdminAdvance", func(t *testing.T) {
		e := MustEnv(t)
		wantStatus(t, e.do(t, "POST", "/v1/charges", visa2000, "Idempotency-Key", "adm"), 200)
		r := e.do(t, "POST", "/_sim/clock/advance", `{"seconds": 86400}`)
		wantStatus(t, r, 200)
		if now := r.object(t)["now"].(float64); int64(now) != epoch.Unix()+86400 {
			t.Fatalf("clock = %v", now)
		}
		if r := e.do(t, "POST", "/v1/charges", visa2000, "Idempotency-Key", "adm"); r.header.Get("Idempotent-Replayed") != "" {
			t.Fatal("replayed after the admin clock advance")
		}
		if r := e.do(t, "GET", "/_sim/clock", ""); int64(r.object(t)["offset_seconds"].(float64)) != 86400 {
			t.Fatalf("clock = %s", r.body)
		}
	})
}
