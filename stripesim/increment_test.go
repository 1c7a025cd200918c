package stripesim_test

import (
	"context"
	"strings"
	"testing"
	"time"

	stripe "github.com/stripe/stripe-go/v82"
)

func TestManualCaptureIntents(t *testing.T) {
	ctx := context.Background()

	t.Run("OKIncrementThenCapture", func(t *testing.T) {
		e := MustEnv(t)
		sc := e.sdk()
		pi := mustManualIntent(t, e, 3000)
		got, err := sc.V1PaymentIntents.IncrementAuthorization(ctx, pi.ID, &stripe.PaymentIntentIncrementAuthorizationParams{
			Amount: stripe.Int64(4500), Metadata: map[string]string{"step": "2"}})
		if err != nil || got.Amount != 4500 || got.AmountCapturable != 4500 || got.Status != stripe.PaymentIntentStatusRequiresCapture ||
			got.Metadata["step"] != "2" {
			t.Fatalf("increment = %+v, %v", got, err)
		}
		if ch := e.sim.GroundTruth().Charges[0]; ch.Amount != 4500 || ch.Captured {
			t.Fatalf("charge = %+v", ch)
		}
		got, err = sc.V1PaymentIntents.Capture(ctx, pi.ID, &stripe.PaymentIntentCaptureParams{AmountToCapture: stripe.Int64(4000)})
		if err != nil || got.AmountReceived != 4000 || got.AmountCapturable != 0 || got.Status != stripe.PaymentIntentStatusSucceeded {
			t.Fatalf("capture = %+v, %v", got, err)
		}
		if ch := e.sim.GroundTruth().Charges[0]; !ch.Captured || ch.AmountCaptured != 4000 || ch.AmountRefunded != 500 || ch.Refunded {
			t.Fatalf("captured charge = %+v", ch)
		}
	})

	t.Run("ErrIncrement", func(t *testing.T) {
		e := MustEnv(t)
		sc := e.sdk()
		pi := mustManualIntent(t, e, 3000)
		for _, amount := range []int64{3000, 2000} {
			_, err := sc.V1PaymentIntents.IncrementAuthorization(ctx, pi.ID, &stripe.PaymentIntentIncrementAuthorizationParams{Amount: stripe.Int64(amount)})
			if se := stripeErr(t, err); se.HTTPStatusCode != 400 || se.Param != "amount" {
				t.Fatalf("increment to %d = %+v", amount, se)
			}
		}
		r := e.do(t, "POST", "/v1/payment_intents/"+pi.ID+"/increment_authorization", "")
		if wantStatus(t, r, 400); r.apiError(t).Error.Code != "parameter_missing" {
			t.Fatalf("no amount = %s", r.body)
		}
		auto, err := sc.V1PaymentIntents.Create(ctx, &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(3000),
			Currency: stripe.String("usd"), PaymentMethod: stripe.String("pm_card_visa"), Confirm: stripe.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = sc.V1PaymentIntents.IncrementAuthorization(ctx, auto.ID, &stripe.PaymentIntentIncrementAuthorizationParams{Amount: stripe.Int64(5000)})
		if se := stripeErr(t, err); se.Code != stripe.ErrorCodePaymentIntentUnexpectedState {
			t.Fatalf("increment of a succeeded intent = %+v", se)
		}
		if got, _ := sc.V1PaymentIntents.Retrieve(ctx, pi.ID, nil); got.Amount != 3000 {
			t.Fatalf("refused increments changed the amount: %+v", got)
		}
	})

	t.Run("OKStoredPaymentMethodCustomerAndSecret", func(t *testing.T) {
		e := MustEnv(t)
		sc := e.sdk()
		cus, err := sc.V1Customers.Create(ctx, &stripe.CustomerCreateParams{Email: stripe.String("a@example.com")})
		if err != nil {
			t.Fatal(err)
		}
		pi, err := sc.V1PaymentIntents.Create(ctx, &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(2500),
			Currency: stripe.String("usd"), Customer: stripe.String(cus.ID), PaymentMethod: stripe.String("pm_card_visa"),
			CaptureMethod: stripe.String("manual")})
		if err != nil || pi.Status != stripe.PaymentIntentStatusRequiresConfirmation || !strings.HasPrefix(pi.ClientSecret, pi.ID+"_secret_") {
			t.Fatalf("create = %+v, %v", pi, err)
		}
		pi, err = sc.V1PaymentIntents.Confirm(ctx, pi.ID, nil)
		if err != nil || pi.Status != stripe.PaymentIntentStatusRequiresCapture || pi.AmountCapturable != 2500 || pi.AmountReceived != 0 {
			t.Fatalf("confirm = %+v, %v", pi, err)
		}
		got, err := sc.V1PaymentIntents.Retrieve(ctx, pi.ID, nil)
		if err != nil || got.Customer == nil || got.Customer.ID != cus.ID || got.PaymentMethod == nil || got.PaymentMethod.ID != "pm_card_visa" {
			t.Fatalf("retrieve = %+v, %v", got, err)
		}
		if ch := e.sim.GroundTruth().Charges[0]; ch.Customer != cus.ID || ch.PaymentIntent != pi.ID || ch.Captured {
			t.Fatalf("charge = %+v", ch)
		}
	})

	t.Run("OKAuthorizationExpires", func(t *testing.T) {
		e := MustEnv(t)
		pi := mustManualIntent(t, e, 3000)
		e.sim.Advance(7 * 24 * time.Hour)
		got, err := e.sdk().V1PaymentIntents.Retrieve(ctx, pi.ID, nil)
		if err != nil || got.Status != stripe.PaymentIntentStatusCanceled || got.CancellationReason != "automatic" || got.AmountCapturable != 0 ||
			got.CanceledAt != epoch.Add(7*24*time.Hour).Unix() {
			t.Fatalf("intent = %+v, %v", got, err)
		}
		if ch := e.sim.GroundTruth().Charges[0]; !ch.Refunded || ch.AmountRefunded != 3000 || ch.Captured {
			t.Fatalf("charge = %+v", ch)
		}
		_, err = e.sdk().V1PaymentIntents.Capture(ctx, pi.ID, nil)
		if se := stripeErr(t, err); se.Code != stripe.ErrorCodePaymentIntentUnexpectedState {
			t.Fatalf("capture after expiry = %+v", se)
		}
	})
}
