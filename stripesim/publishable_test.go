package stripesim_test

import (
	"testing"
)

// pkKey is the publishable key a browser would use.
const pkKey = "Bearer pk_test_browser123456"

func TestPublishableConfirm(t *testing.T) {
	// mustIntent creates, with the secret key, an unconfirmed intent with a
	// payment method and returns its id and client_secret.
	mustIntent := func(t *testing.T, e *env) (string, string) {
		t.Helper()
		r := e.do(t, "POST", "/v1/payment_intents", form("amount", "4000", "currency", "usd",
			"payment_method", "pm_card_visa", "capture_method", "manual"))
		wantStatus(t, r, 200)
		m := r.object(t)
		return m["id"].(string), m["client_secret"].(string)
	}

	t.Run("OKMovesMoneyWithoutTheSecretKey", func(t *testing.T) {
		e := MustEnv(t)
		id, secret := mustIntent(t, e)
		r := e.do(t, "POST", "/v1/payment_intents/"+id+"/confirm", form("client_secret", secret), "Authorization", pkKey)
		wantStatus(t, r, 200)
		if m := r.object(t); m["status"] != "requires_capture" || m["amount_capturable"] != 4000.0 {
			t.Fatalf("confirm = %s", r.body)
		}
		r = e.do(t, "GET", "/v1/payment_intents/"+id+"?client_secret="+secret, "", "Authorization", pkKey)
		if wantStatus(t, r, 200); r.object(t)["status"] != "requires_capture" {
			t.Fatalf("retrieve = %s", r.body)
		}
		wantStatus(t, e.do(t, "POST", "/v1/payment_intents/"+id+"/capture", ""), 200)
		if got := e.sim.Moved().Total.Captured["usd"]; got != 4000 {
			t.Fatalf("moved = %d, want 4000", got)
		}
	})

	t.Run("OKAutomaticCaptureAndConnectedAccount", func(t *testing.T) {
		e := MustEnv(t)
		r := e.do(t, "POST", "/v1/payment_intents", form("amount", "1200", "currency", "eur"), "Stripe-Context", "acct_9")
		wantStatus(t, r, 200)
		id, secret := r.object(t)["id"].(string), r.object(t)["client_secret"].(string)
		body := form("client_secret", secret, "payment_method", "pm_card_visa")
		wantStatus(t, e.do(t, "POST", "/v1/payment_intents/"+id+"/confirm", body, "Authorization", pkKey), 404)
		r = e.do(t, "POST", "/v1/payment_intents/"+id+"/confirm", body, "Authorization", pkKey, "Stripe-Account", "acct_9")
		if wantStatus(t, r, 200); r.object(t)["status"] != "succeeded" || r.object(t)["amount_received"] != 1200.0 {
			t.Fatalf("confirm = %s", r.body)
		}
		if got := e.sim.Moved().Accounts["acct_9"].Captured["eur"]; got != 1200 {
			t.Fatalf("moved on acct_9 = %d, want 1200", got)
		}
	})

	t.Run("OKIdempotent", func(t *testing.T) {
		e := MustEnv(t)
		id, secret := mustIntent(t, e)
		path, body := "/v1/payment_intents/"+id+"/confirm", form("client_secret", secret)
		wantStatus(t, e.do(t, "POST", path, body, "Authorization", pkKey, "Idempotency-Key", "c1"), 200)
		r := e.do(t, "POST", path, body, "Authorization", pkKey, "Idempotency-Key", "c1")
		if wantStatus(t, r, 200); r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry was not replayed: %v", r.header)
		}
		if n := len(e.sim.GroundTruth().Charges); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})

	t.Run("ErrClientSecret", func(t *testing.T) {
		e := MustEnv(t)
		id, secret := mustIntent(t, e)
		path := "/v1/payment_intents/" + id + "/confirm"
		r := e.do(t, "POST", path, "", "Authorization", pkKey)
		if wantStatus(t, r, 400); r.apiError(t).Error.Code != "parameter_missing" {
			t.Fatalf("no client_secret = %s", r.body)
		}
		r = e.do(t, "POST", path, form("client_secret", secret+"x"), "Authorization", pkKey)
		if wantStatus(t, r, 400); r.apiError(t).Error.Param != "client_secret" {
			t.Fatalf("wrong client_secret = %s", r.body)
		}
		r = e.do(t, "POST", path, form("client_secret", secret+"x"))
		if wantStatus(t, r, 400); r.apiError(t).Error.Param != "client_secret" {
			t.Fatalf("wrong client_secret with the secret key = %s", r.body)
		}
		wantStatus(t, e.do(t, "POST", "/v1/payment_intents/pi_missing/confirm", form("client_secret", secret), "Authorization", pkKey), 404)
		wantStatus(t, e.do(t, "GET", "/v1/payment_intents/"+id+"?client_secret=nope", "", "Authorization", pkKey), 400)
		if n := len(e.sim.GroundTruth().Charges); n != 0 {
			t.Fatalf("%d charges after refused confirms", n)
		}
	})

	t.Run("ErrOtherEndpoints", func(t *testing.T) {
		e := MustEnv(t)
		id, secret := mustIntent(t, e)
		for _, tc := range []struct{ method, path, body string }{
			{"POST", "/v1/charges", form("amount", "500", "currency", "usd", "source", "tok_visa")},
			{"POST", "/v1/payment_intents", form("amount", "500", "currency", "usd")},
			{"POST", "/v1/payment_intents/" + id, form("client_secret", secret, "amount", "9000")},
			{"POST", "/v1/payment_intents/" + id + "/capture", form("client_secret", secret)},
			{"POST", "/v1/payment_intents/" + id + "/increment_authorization", form("client_secret", secret, "amount", "9000")},
			{"GET", "/v1/charges", ""},
			{"GET", "/v1/customers/cus_1", ""},
		} {
			r := e.do(t, tc.method, tc.path, tc.body, "Authorization", pkKey)
			wantStatus(t, r, 401)
			if got := r.apiError(t).Error; got.Type != "invalid_request_error" {
				t.Fatalf("%s %s: %+v", tc.method, tc.path, got)
			}
		}
		wantStatus(t, e.do(t, "POST", "/v1/payment_intents/"+id+"/confirm", form("client_secret", secret), "Authorization", "Bearer pk_live_abc"), 401)
		if n := len(e.sim.GroundTruth().Charges); n != 0 {
			t.Fatalf("%d charges made with a publishable key outside confirm", n)
		}
	})
}
