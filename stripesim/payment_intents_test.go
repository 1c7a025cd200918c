package stripesim_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	stripe "github.com/stripe/stripe-go/v82"
)

func TestPaymentIntents(t *testing.T) {
	ctx := context.Background()

	t.Run("OKCreateThenConfirm", func(t *testing.T) {
		e := MustEnv(t)
		sc := e.sdk()
		pi, err := sc.V1PaymentIntents.Create(ctx, &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(1500),
			Currency: stripe.String("eur"), Metadata: map[string]string{"order": "9"}})
		if err != nil || !strings.HasPrefix(pi.ID, "pi_") || pi.Status != stripe.PaymentIntentStatusRequiresPaymentMethod ||
			pi.LatestCharge != nil || !strings.HasPrefix(pi.ClientSecret, pi.ID+"_secret_") {
			t.Fatalf("create = %+v, %v", pi, err)
		}
		pi, err = sc.V1PaymentIntents.Update(ctx, pi.ID, &stripe.PaymentIntentUpdateParams{Amount: stripe.Int64(1800)})
		if err != nil || pi.Amount != 1800 || pi.Metadata["order"] != "9" {
			t.Fatalf("update = %+v, %v", pi, err)
		}
		pi, err = sc.V1PaymentIntents.Confirm(ctx, pi.ID, &stripe.PaymentIntentConfirmParams{PaymentMethod: stripe.String("pm_card_visa")})
		if err != nil || pi.Status != stripe.PaymentIntentStatusSucceeded || pi.AmountReceived != 1800 || pi.LatestCharge == nil {
			t.Fatalf("confirm = %+v, %v", pi, err)
		}
		ch, err := sc.V1Charges.Retrieve(ctx, pi.LatestCharge.ID, nil)
		if err != nil || ch.Amount != 1800 || ch.PaymentIntent == nil || ch.PaymentIntent.ID != pi.ID || !ch.Captured || ch.Metadata["order"] != "9" {
			t.Fatalf("charge = %+v, %v", ch, err)
		}
		got, err := sc.V1PaymentIntents.Retrieve(ctx, pi.ID, nil)
		if err != nil || got.Status != stripe.PaymentIntentStatusSucceeded {
			t.Fatalf("retrieve = %+v, %v", got, err)
		}
		// Amounts change only before confirmation.
		_, err = sc.V1PaymentIntents.Update(ctx, pi.ID, &stripe.PaymentIntentUpdateParams{Amount: stripe.Int64(900)})
		if se := stripeErr(t, err); se.Code != stripe.ErrorCodePaymentIntentUnexpectedState {
			t.Fatalf("update after success = %+v", se)
		}
		_, err = sc.V1PaymentIntents.Confirm(ctx, pi.ID, nil)
		if se := stripeErr(t, err); se.Code != stripe.ErrorCodePaymentIntentUnexpectedState {
			t.Fatalf("confirm twice = %+v", se)
		}
	})

	t.Run("OKConfirmOnCreate", func(t *testing.T) {
		e := MustEnv(t)
		pi, err := e.sdk().V1PaymentIntents.Create(ctx, &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(5000),
			Currency: stripe.String("usd"), PaymentMethod: stripe.String("pm_card_visa"), Confirm: stripe.Bool(true)})
		if err != nil || pi.Status != stripe.PaymentIntentStatusSucceeded || pi.LatestCharge == nil {
			t.Fatalf("create = %+v, %v", pi, err)
		}
		gt := e.sim.GroundTruth()
		if len(gt.PaymentIntents) != 1 || len(gt.Charges) != 1 || gt.Charges[0].PaymentIntent != pi.ID {
			t.Fatalf("ground truth = %+v", gt)
		}
	})

	t.Run("ErrDeclined", func(t *testing.T) {
		e := MustEnv(t)
		_, err := e.sdk().V1PaymentIntents.Create(ctx, &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(5000),
			Currency: stripe.String("usd"), PaymentMethod: stripe.String("pm_card_chargeDeclinedInsufficientFunds"), Confirm: stripe.Bool(true)})
		se := stripeErr(t, err)
		if se.HTTPStatusCode != 402 || se.Type != stripe.ErrorTypeCard || se.DeclineCode != stripe.DeclineCodeInsufficientFunds ||
			se.PaymentIntent == nil || se.PaymentIntent.Status != stripe.PaymentIntentStatusRequiresPaymentMethod ||
			se.PaymentIntent.LastPaymentError == nil || se.ChargeID == "" {
			t.Fatalf("error = %+v", se)
		}
		gt := e.sim.GroundTruth()
		if len(gt.Charges) != 1 || gt.Charges[0].Status != "failed" || gt.Charges[0].ID != se.ChargeID ||
			gt.PaymentIntents[0].Status != "requires_payment_method" || gt.PaymentIntents[0].LatestCharge != se.ChargeID {
			t.Fatalf("ground truth = %+v", gt)
		}
		// A new payment method succeeds on the same PaymentIntent.
		pi, err := e.sdk().V1PaymentIntents.Confirm(ctx, se.PaymentIntent.ID, &stripe.PaymentIntentConfirmParams{PaymentMethod: stripe.String("pm_card_visa")})
		if err != nil || pi.Status != stripe.PaymentIntentStatusSucceeded || pi.LastPaymentError != nil {
			t.Fatalf("second confirm = %+v, %v", pi, err)
		}
	})

	t.Run("ErrDeclinedRaw", func(t *testing.T) {
		e := MustEnv(t)
		r := e.do(t, "POST", "/v1/payment_intents", form("amount", "5000", "currency", "usd", "payment_method", "pm_card_chargeDeclined", "confirm", "true"))
		wantStatus(t, r, 402)
		got := r.apiError(t).Error
		var pi map[string]any
		if err := json.Unmarshal(got.PaymentIntent, &pi); err != nil || got.Code != "card_declined" || got.DeclineCode != "generic_decline" ||
			pi["object"] != "payment_intent" || pi["status"] != "requires_payment_method" || pi["payment_method"] != nil {
			t.Fatalf("error = %s", r.body)
		}
	})

	t.Run("OKManualCapture", func(t *testing.T) {
		e := MustEnv(t)
		sc := e.sdk()
		pi, err := sc.V1PaymentIntents.Create(ctx, &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(5000), Currency: stripe.String("usd"),
			PaymentMethod: stripe.String("pm_card_visa"), Confirm: stripe.Bool(true), CaptureMethod: stripe.String("manual")})
		if err != nil || pi.Status != stripe.PaymentIntentStatusRequiresCapture || pi.AmountCapturable != 5000 {
			t.Fatalf("create = %+v, %v", pi, err)
		}
		_, err = sc.V1PaymentIntents.Capture(ctx, pi.ID, &stripe.PaymentIntentCaptureParams{AmountToCapture: stripe.Int64(6000)})
		if se := stripeErr(t, err); se.Code != stripe.ErrorCodeAmountTooLarge {
			t.Fatalf("over-capture = %+v", se)
		}
		pi, err = sc.V1PaymentIntents.Capture(ctx, pi.ID, &stripe.PaymentIntentCaptureParams{AmountToCapture: stripe.Int64(3000)})
		if err != nil || pi.Status != stripe.PaymentIntentStatusSucceeded || pi.AmountReceived != 3000 || pi.AmountCapturable != 0 {
			t.Fatalf("capture = %+v, %v", pi, err)
		}
		ch, _ := sc.V1Charges.Retrieve(ctx, pi.LatestCharge.ID, nil)
		if !ch.Captured || ch.AmountCaptured != 3000 {
			t.Fatalf("charge = %+v", ch)
		}
		_, err = sc.V1PaymentIntents.Capture(ctx, pi.ID, nil)
		if se := stripeErr(t, err); se.Code != stripe.ErrorCodePaymentIntentUnexpectedState {
			t.Fatalf("capture twice = %+v", se)
		}
	})

	t.Run("OKCancel", func(t *testing.T) {
		e := MustEnv(t)
		sc := e.sdk()
		pi, err := sc.V1PaymentIntents.Create(ctx, &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(5000), Currency: stripe.String("usd"),
			PaymentMethod: stripe.String("pm_card_visa"), Confirm: stripe.Bool(true), CaptureMethod: stripe.String("manual")})
		if err != nil {
			t.Fatal(err)
		}
		pi, err = sc.V1PaymentIntents.Cancel(ctx, pi.ID, &stripe.PaymentIntentCancelParams{CancellationReason: stripe.String("duplicate")})
		if err != nil || pi.Status != stripe.PaymentIntentStatusCanceled || pi.CancellationReason != "duplicate" || pi.CanceledAt != epoch.Unix() {
			t.Fatalf("cancel = %+v, %v", pi, err)
		}
		if ch := e.sim.GroundTruth().Charges[0]; !ch.Refunded || ch.AmountRefunded != 5000 {
			t.Fatalf("released charge = %+v", ch)
		}
		_, err = sc.V1PaymentIntents.Cancel(ctx, pi.ID, nil)
		if se := stripeErr(t, err); se.Code != stripe.ErrorCodePaymentIntentUnexpectedState {
			t.Fatalf("cancel twice = %+v", se)
		}
	})

	t.Run("ErrNotFound", func(t *testing.T) {
		e := MustEnv(t)
		for _, path := range []string{"/v1/payment_intents/pi_x/confirm", "/v1/payment_intents/pi_x/capture", "/v1/payment_intents/pi_x/cancel", "/v1/payment_intents/pi_x"} {
			r := e.do(t, "POST", path, "")
			wantStatus(t, r, 404)
			if r.apiError(t).Error.Code != "resource_missing" {
				t.Fatalf("%s: %s", path, r.body)
			}
		}
	})
}

func TestRefunds(t *testing.T) {
	ctx := context.Background()

	t.Run("OKPartialThenRest", func(t *testing.T) {
		e := MustEnv(t)
		sc := e.sdk()
		ch, err := sc.V1Charges.Create(ctx, chargeParams(""))
		if err != nil {
			t.Fatal(err)
		}
		re, err := sc.V1Refunds.Create(ctx, &stripe.RefundCreateParams{Charge: stripe.String(ch.ID), Amount: stripe.Int64(500)})
		if err != nil || !strings.HasPrefix(re.ID, "re_") || re.Amount != 500 || re.Status != stripe.RefundStatusSucceeded || re.Charge.ID != ch.ID {
			t.Fatalf("refund = %+v, %v", re, err)
		}
		got, err := sc.V1Charges.Retrieve(ctx, ch.ID, nil)
		if err != nil || got.AmountRefunded != 500 || got.Refunded {
			t.Fatalf("charge = %+v, %v", got, err)
		}
		_, err = sc.V1Refunds.Create(ctx, &stripe.RefundCreateParams{Charge: stripe.String(ch.ID), Amount: stripe.Int64(1501)})
		if se := stripeErr(t, err); se.HTTPStatusCode != 400 || se.Code != stripe.ErrorCodeAmountTooLarge {
			t.Fatalf("over-refund = %+v", se)
		}
		re, err = sc.V1Refunds.Create(ctx, &stripe.RefundCreateParams{Charge: stripe.String(ch.ID)})
		if err != nil || re.Amount != 1500 {
			t.Fatalf("rest = %+v, %v", re, err)
		}
		got, _ = sc.V1Charges.Retrieve(ctx, ch.ID, nil)
		if got.AmountRefunded != 2000 || !got.Refunded {
			t.Fatalf("charge = %+v", got)
		}
		_, err = sc.V1Refunds.Create(ctx, &stripe.RefundCreateParams{Charge: stripe.String(ch.ID), Amount: stripe.Int64(1)})
		if se := stripeErr(t, err); se.Code != stripe.ErrorCodeChargeAlreadyRefunded {
			t.Fatalf("refund of a refunded charge = %+v", se)
		}
		r, err := sc.V1Refunds.Retrieve(ctx, re.ID, nil)
		if err != nil || r.ID != re.ID {
			t.Fatalf("retrieve = %+v, %v", r, err)
		}
		if n := len(e.sim.GroundTruth().Refunds); n != 2 {
			t.Fatalf("%d refunds, want 2", n)
		}
	})

	t.Run("OKByPaymentIntent", func(t *testing.T) {
		e := MustEnv(t)
		sc := e.sdk()
		pi, err := sc.V1PaymentIntents.Create(ctx, &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(5000),
			Currency: stripe.String("usd"), PaymentMethod: stripe.String("pm_card_visa"), Confirm: stripe.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		re, err := sc.V1Refunds.Create(ctx, &stripe.RefundCreateParams{PaymentIntent: stripe.String(pi.ID)})
		if err != nil || re.Amount != 5000 || re.PaymentIntent == nil || re.PaymentIntent.ID != pi.ID || re.Charge.ID != pi.LatestCharge.ID {
			t.Fatalf("refund = %+v, %v", re, err)
		}
	})

	t.Run("ErrNotRefundable", func(t *testing.T) {
		e := MustEnv(t)
		r := e.do(t, "POST", "/v1/charges", form("amount", "2000", "currency", "usd", "source", "tok_chargeDeclined"))
		id := r.apiError(t).Error.Charge
		wantStatus(t, e.do(t, "POST", "/v1/refunds", form("charge", id)), 400)
		wantStatus(t, e.do(t, "POST", "/v1/refunds", form("charge", "ch_missing")), 400)
		wantStatus(t, e.do(t, "GET", "/v1/refunds/re_missing", ""), 404)
		if n := len(e.sim.GroundTruth().Refunds); n != 0 {
			t.Fatalf("%d refunds, want 0", n)
		}
	})

	t.Run("OKConcurrentNeverExceeds", func(t *testing.T) {
		e := MustEnv(t)
		ch := e.do(t, "POST", "/v1/charges", visa2000).object(t)["id"].(string)
		results := make(chan int, 10)
		for range 10 {
			go func() {
				r, err := e.send(ctx, "POST", "/v1/refunds", form("charge", ch, "amount", "300"))
				if err != nil {
					t.Error(err)
				}
				results <- r.status
			}()
		}
		ok := 0
		for range 10 {
			if <-results == 200 {
				ok++
			}
		}
		gt := e.sim.GroundTruth()
		if ok != 6 || len(gt.Refunds) != 6 || gt.Charges[0].AmountRefunded != 1800 {
			t.Fatalf("%d refunds succeeded, charge refunded %d; want 6 and 1800", ok, gt.Charges[0].AmountRefunded)
		}
	})
}

func TestTransfersAndPayouts(t *testing.T) {
	ctx := context.Background()
	e := MustEnv(t)
	sc := e.sdk()
	tr, err := sc.V1Transfers.Create(ctx, &stripe.TransferCreateParams{Amount: stripe.Int64(700), Currency: stripe.String("usd"),
		Destination: stripe.String("acct_123")})
	if err != nil || !strings.HasPrefix(tr.ID, "tr_") || tr.Amount != 700 || tr.Destination == nil || tr.Destination.ID != "acct_123" {
		t.Fatalf("transfer = %+v, %v", tr, err)
	}
	got, err := sc.V1Transfers.Retrieve(ctx, tr.ID, nil)
	if err != nil || got.ID != tr.ID {
		t.Fatalf("retrieve transfer = %+v, %v", got, err)
	}
	po, err := sc.V1Payouts.Create(ctx, &stripe.PayoutCreateParams{Amount: stripe.Int64(900), Currency: stripe.String("gbp")})
	if err != nil || !strings.HasPrefix(po.ID, "po_") || po.Amount != 900 || po.Currency != "gbp" || po.Status != stripe.PayoutStatusPending {
		t.Fatalf("payout = %+v, %v", po, err)
	}
	gp, err := sc.V1Payouts.Retrieve(ctx, po.ID, nil)
	if err != nil || gp.ID != po.ID {
		t.Fatalf("retrieve payout = %+v, %v", gp, err)
	}
	gt := e.sim.GroundTruth()
	if len(gt.Transfers) != 1 || len(gt.Payouts) != 1 {
		t.Fatalf("ground truth = %+v", gt)
	}
	wantStatus(t, e.do(t, "GET", "/v1/transfers/tr_missing", ""), 404)
	wantStatus(t, e.do(t, "GET", "/v1/payouts/po_missing", ""), 404)
	wantStatus(t, e.do(t, "POST", "/v1/transfers", form("amount", "700", "currency", "usd", "destination", "bank_1")), 400)
}
