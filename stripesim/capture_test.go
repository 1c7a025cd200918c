package stripesim_test

import (
	"context"
	"testing"
	"time"

	stripe "github.com/stripe/stripe-go/v82"
)

// mustAuthorization creates an uncaptured charge of amount usd.
func mustAuthorization(t *testing.T, e *env, amount int64) *stripe.Charge {
	t.Helper()
	ch, err := e.sdk().V1Charges.Create(context.Background(), &stripe.ChargeCreateParams{Amount: stripe.Int64(amount),
		Currency: stripe.String("usd"), Capture: stripe.Bool(false),
		Source: &stripe.PaymentSourceSourceParams{Token: stripe.String("tok_visa")}})
	if err != nil {
		t.Fatal(err)
	}
	if ch.Status != "succeeded" || ch.Captured || ch.AmountCaptured != 0 || ch.Refunded || !ch.Paid {
		t.Fatalf("authorization = %+v", ch)
	}
	return ch
}

func TestChargeCapture(t *testing.T) {
	ctx := context.Background()

	t.Run("OKFull", func(t *testing.T) {
		e := MustEnv(t)
		ch := mustAuthorization(t, e, 2000)
		r := e.do(t, "GET", "/v1/charges/"+ch.ID, "")
		if m := r.object(t); m["captured"] != false || m["amount_captured"] != 0.0 || m["customer"] != nil || m["payment_intent"] != nil {
			t.Fatalf("uncaptured charge = %s", r.body)
		}
		got, err := e.sdk().V1Charges.Capture(ctx, ch.ID, nil)
		if err != nil || !got.Captured || got.AmountCaptured != 2000 || got.AmountRefunded != 0 || got.Refunded {
			t.Fatalf("capture = %+v, %v", got, err)
		}
	})

	t.Run("OKPartialReleasesTheRest", func(t *testing.T) {
		e := MustEnv(t)
		ch := mustAuthorization(t, e, 2000)
		got, err := e.sdk().V1Charges.Capture(ctx, ch.ID, &stripe.ChargeCaptureParams{Amount: stripe.Int64(1500)})
		if err != nil || !got.Captured || got.AmountCaptured != 1500 || got.AmountRefunded != 500 || got.Refunded || got.Amount != 2000 {
			t.Fatalf("capture = %+v, %v", got, err)
		}
		// Only the captured part can be refunded.
		_, err = e.sdk().V1Refunds.Create(ctx, &stripe.RefundCreateParams{Charge: stripe.String(ch.ID), Amount: stripe.Int64(1501)})
		if se := stripeErr(t, err); se.Code != stripe.ErrorCodeAmountTooLarge {
			t.Fatalf("over-refund = %+v", se)
		}
		re, err := e.sdk().V1Refunds.Create(ctx, &stripe.RefundCreateParams{Charge: stripe.String(ch.ID)})
		if err != nil || re.Amount != 1500 {
			t.Fatalf("refund = %+v, %v", re, err)
		}
		if got := e.sim.GroundTruth().Charges[0]; !got.Refunded || got.AmountRefunded != 2000 || got.AmountCaptured != 1500 {
			t.Fatalf("charge = %+v", got)
		}
	})

	t.Run("ErrCapturedTwice", func(t *testing.T) {
		e := MustEnv(t)
		ch := mustAuthorization(t, e, 2000)
		if _, err := e.sdk().V1Charges.Capture(ctx, ch.ID, nil); err != nil {
			t.Fatal(err)
		}
		_, err := e.sdk().V1Charges.Capture(ctx, ch.ID, nil)
		if se := stripeErr(t, err); se.HTTPStatusCode != 400 || se.Code != stripe.ErrorCodeChargeAlreadyCaptured {
			t.Fatalf("second capture = %+v", se)
		}
		r := e.do(t, "POST", "/v1/charges", form("amount", "900", "currency", "usd", "source", "tok_visa"))
		id := r.object(t)["id"].(string)
		r = e.do(t, "POST", "/v1/charges/"+id+"/capture", "")
		if wantStatus(t, r, 400); r.apiError(t).Error.Code != "charge_already_captured" {
			t.Fatalf("capture of a captured charge = %s", r.body)
		}
	})

	t.Run("ErrInvalid", func(t *testing.T) {
		e := MustEnv(t)
		ch := mustAuthorization(t, e, 2000)
		for _, tc := range []struct{ body, code string }{
			{form("amount", "2001"), "amount_too_large"},
			{form("amount", "0"), "parameter_invalid_integer"},
			{form("amont", "5"), "parameter_unknown"},
		} {
			r := e.do(t, "POST", "/v1/charges/"+ch.ID+"/capture", tc.body)
			if wantStatus(t, r, 400); r.apiError(t).Error.Code != tc.code {
				t.Fatalf("%s: %s", tc.body, r.body)
			}
		}
		wantStatus(t, e.do(t, "POST", "/v1/charges/ch_missing/capture", ""), 404)
		if got := e.sim.GroundTruth().Charges[0]; got.Captured {
			t.Fatalf("a refused capture captured: %+v", got)
		}
	})

	t.Run("OKExpiresAfterSevenDays", func(t *testing.T) {
		e := MustEnv(t)
		ch := mustAuthorization(t, e, 2000)
		e.sim.Advance(7*24*time.Hour - time.Second)
		if got := e.sim.GroundTruth().Charges[0]; got.Refunded || got.AmountRefunded != 0 {
			t.Fatalf("expired early: %+v", got)
		}
		e.sim.Advance(time.Second)
		if got := e.sim.GroundTruth().Charges[0]; got.Status != "succeeded" || got.Captured || !got.Refunded || got.AmountRefunded != 2000 || got.AmountCaptured != 0 {
			t.Fatalf("expired authorization = %+v", got)
		}
		_, err := e.sdk().V1Charges.Capture(ctx, ch.ID, nil)
		if se := stripeErr(t, err); se.Code != stripe.ErrorCodeChargeExpiredForCapture {
			t.Fatalf("capture after expiry = %+v", se)
		}
	})

	t.Run("OKExpiresOnReadWhenBaseClockMoves", func(t *testing.T) {
		e := MustEnv(t)
		ch := mustAuthorization(t, e, 2000)
		e.clock.Add(8 * 24 * time.Hour)
		got, err := e.sdk().V1Charges.Retrieve(ctx, ch.ID, nil)
		if err != nil || !got.Refunded || got.AmountRefunded != 2000 || got.Captured {
			t.Fatalf("retrieve = %+v, %v", got, err)
		}
	})

	t.Run("OKPaymentIntentChargeCapturesIntent", func(t *testing.T) {
		e := MustEnv(t)
		pi := mustManualIntent(t, e, 3000)
		ch, err := e.sdk().V1Charges.Capture(ctx, pi.LatestCharge.ID, &stripe.ChargeCaptureParams{Amount: stripe.Int64(1000)})
		if err != nil || ch.AmountCaptured != 1000 || ch.PaymentIntent == nil || ch.PaymentIntent.ID != pi.ID {
			t.Fatalf("capture = %+v, %v", ch, err)
		}
		got, err := e.sdk().V1PaymentIntents.Retrieve(ctx, pi.ID, nil)
		if err != nil || got.Status != stripe.PaymentIntentStatusSucceeded || got.AmountReceived != 1000 || got.AmountCapturable != 0 {
			t.Fatalf("intent = %+v, %v", got, err)
		}
	})
}

// mustManualIntent creates and confirms a capture_method=manual
// PaymentIntent of amount usd, which then requires capture.
func mustManualIntent(t *testing.T, e *env, amount int64) *stripe.PaymentIntent {
	t.Helper()
	pi, err := e.sdk().V1PaymentIntents.Create(context.Background(), &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(amount),
		Currency: stripe.String("usd"), PaymentMethod: stripe.String("pm_card_visa"), Confirm: stripe.Bool(true),
		CaptureMethod: stripe.String("manual")})
	if err != nil || pi.Status != stripe.PaymentIntentStatusRequiresCapture || pi.AmountCapturable != amount || pi.LatestCharge == nil {
		t.Fatalf("manual intent = %+v, %v", pi, err)
	}
	return pi
}
