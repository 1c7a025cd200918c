package stripesim_test

import (
	"testing"
)

func TestStripeContext(t *testing.T) {
	charge := form("amount", "500", "currency", "usd", "source", "tok_visa")

	t.Run("OKScopesLikeStripeAccount", func(t *testing.T) {
		e := MustEnv(t)
		r := e.do(t, "POST", "/v1/charges", charge, "Stripe-Context", "acct_1")
		wantStatus(t, r, 200)
		id := r.object(t)["id"].(string)
		if gt := e.sim.GroundTruth(); gt.Charges[0].Account != "acct_1" {
			t.Fatalf("account = %q", gt.Charges[0].Account)
		}
		wantStatus(t, e.do(t, "GET", "/v1/charges/"+id, "", "Stripe-Account", "acct_1"), 200)
		wantStatus(t, e.do(t, "GET", "/v1/charges/"+id, "", "Stripe-Context", "acct_1"), 200)
		wantStatus(t, e.do(t, "GET", "/v1/charges/"+id, "", "Stripe-Context", "acct_1", "Stripe-Account", "acct_1"), 200)
		wantStatus(t, e.do(t, "GET", "/v1/charges/"+id, ""), 404)
		wantStatus(t, e.do(t, "GET", "/v1/charges/"+id, "", "Stripe-Context", "acct_2"), 404)
	})

	t.Run("OKIdempotencyScoped", func(t *testing.T) {
		e := MustEnv(t)
		first := e.do(t, "POST", "/v1/charges", charge, "Stripe-Context", "acct_1", "Idempotency-Key", "k1")
		wantStatus(t, first, 200)
		replay := e.do(t, "POST", "/v1/charges", charge, "Stripe-Account", "acct_1", "Idempotency-Key", "k1")
		wantStatus(t, replay, 200)
		if replay.header.Get("Idempotent-Replayed") != "true" || replay.object(t)["id"] != first.object(t)["id"] {
			t.Fatalf("Stripe-Account acct_1 did not replay the Stripe-Context acct_1 request: %s", replay.body)
		}
		other := e.do(t, "POST", "/v1/charges", charge, "Stripe-Context", "acct_2", "Idempotency-Key", "k1")
		wantStatus(t, other, 200)
		if other.header.Get("Idempotent-Replayed") != "" || other.object(t)["id"] == first.object(t)["id"] {
			t.Fatalf("acct_2 shared acct_1's key: %s", other.body)
		}
		if n := len(e.sim.GroundTruth().Charges); n != 2 {
			t.Fatalf("%d charges, want 2", n)
		}
	})

	t.Run("ErrConflict", func(t *testing.T) {
		e := MustEnv(t)
		for _, h := range [][]string{
			{"Stripe-Context", "acct_1", "Stripe-Account", "acct_2"},
			{"Stripe-Context", "cus_1"},
			{"Stripe-Context", "acct_1/acct_2"},
		} {
			r := e.do(t, "POST", "/v1/charges", charge, h...)
			wantStatus(t, r, 400)
			if got := r.apiError(t).Error; got.Type != "invalid_request_error" {
				t.Fatalf("%v: error = %+v", h, got)
			}
		}
		if n := countObjects(e.sim); n != 0 {
			t.Fatalf("%d objects created by refused requests", n)
		}
	})
}
