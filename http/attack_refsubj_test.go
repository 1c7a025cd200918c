package http_test

import (
	"net/http"
	"testing"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/keybrake/keybrake/stripesim"
)

// A refund's guard subject was the ID it named: the charge (in the
// charge parameter or a legacy path's URL), else the payment intent. One
// payment refunded once by charge=ch_… and once by payment_intent=pi_…
// (or by the legacy /v1/charges/{id}/refunds) counted as two subjects, so
// a limit of one refund a payment, or the duplicate guard, let the same
// $5.00 of one payment be refunded twice. A charge made by a payment
// intent is now counted under that intent, read upstream.
func TestAttackRules_RefundByChargeAndIntentTwoSubjects(t *testing.T) {
	for name, guards := range map[string]string{
		"Velocity":  `"velocity":[{"name":"one_refund_a_payment","per":"customer","operations":["refunds.create","charges.refunds.create","charges.refund"],"limit":1,"window_seconds":86400}]`,
		"Duplicate": `"duplicate":{"window_seconds":86400}`,
	} {
		t.Run(name, func(t *testing.T) {
			e := MustOpen(t)
			_, secret := e.CreateKey(t, `{"total_usd_cap":100,"allowed_endpoints":["*"],"guards":{`+guards+`}}`)
			sc, ctx := e.Stripe(secret), t.Context()
			pi, err := sc.V1PaymentIntents.Create(ctx, &stripego.PaymentIntentCreateParams{Amount: stripego.Int64(4000), Currency: stripego.String("usd"),
				PaymentMethod: stripego.String("pm_card_visa"), Confirm: stripego.Bool(true)})
			if err != nil || pi.LatestCharge == nil {
				t.Fatalf("pay: %v %+v", err, pi)
			}
			charge := pi.LatestCharge.ID
			if _, err := sc.V1Refunds.Create(ctx, &stripego.RefundCreateParams{PaymentIntent: stripego.String(pi.ID), Amount: stripego.Int64(500)}); err != nil {
				t.Fatalf("first refund: %v", err)
			}
			if _, err := sc.V1Refunds.Create(ctx, &stripego.RefundCreateParams{Charge: stripego.String(charge), Amount: stripego.Int64(500)}); !guardRefusal(err) {
				t.Errorf("refund by charge: %v, want the guard's refusal", err)
			}
			resp, body := e.Do(t, "POST", "/v1/charges/"+charge+"/refunds", "amount=500", map[string]string{"Authorization": "Bearer " + secret})
			if resp.StatusCode != http.StatusConflict && resp.StatusCode != http.StatusTooManyRequests {
				t.Errorf("legacy refund: %d %s, want the guard's refusal", resp.StatusCode, body)
			}
			if n := len(e.Sim.GroundTruth().Refunds); n != 1 {
				t.Fatalf("%d refunds of one payment past the key's guards", n)
			}
		})
	}
}

// The subject of a refund by charge is read upstream; when that read
// fails, the refund is refused, not counted under the charge.
func TestAttackRules_RefundSubjectLookupFailsClosed(t *testing.T) {
	e := MustOpen(t)
	_, secret := e.CreateKey(t, `{"total_usd_cap":100,"allowed_endpoints":["*"],"guards":{"duplicate":{"window_seconds":86400}}}`)
	sc, ctx := e.Stripe(secret), t.Context()
	pi, err := sc.V1PaymentIntents.Create(ctx, &stripego.PaymentIntentCreateParams{Amount: stripego.Int64(4000), Currency: stripego.String("usd"),
		PaymentMethod: stripego.String("pm_card_visa"), Confirm: stripego.Bool(true)})
	if err != nil || pi.LatestCharge == nil {
		t.Fatalf("pay: %v %+v", err, pi)
	}
	if _, err := e.Sim.AddFault(stripesim.Fault{Method: "GET", Path: "/v1/charges/" + pi.LatestCharge.ID, Mode: stripesim.FaultFailBefore, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.V1Refunds.Create(ctx, &stripego.RefundCreateParams{Charge: stripego.String(pi.LatestCharge.ID), Amount: stripego.Int64(500)}); err == nil {
		t.Fatal("a refund whose subject could not be read was forwarded")
	}
	if n := len(e.Sim.GroundTruth().Refunds); n != 0 {
		t.Fatalf("%d refunds forwarded", n)
	}
	// Without the fault the same refund goes through, counted under the intent.
	if _, err := sc.V1Refunds.Create(ctx, &stripego.RefundCreateParams{Charge: stripego.String(pi.LatestCharge.ID), Amount: stripego.Int64(500)}); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.V1Refunds.Create(ctx, &stripego.RefundCreateParams{PaymentIntent: stripego.String(pi.ID), Amount: stripego.Int64(500)}); !guardRefusal(err) {
		t.Errorf("refund by intent after one by charge: %v, want the guard's refusal", err)
	}
}

// guardRefusal reports whether err is a duplicate guard's 409 or a velocity limit's 429.
func guardRefusal(err error) bool {
	se, ok := err.(*stripego.Error)
	return ok && (se.HTTPStatusCode == http.StatusConflict || se.HTTPStatusCode == http.StatusTooManyRequests)
}

// A refund by charge on a guarded key reads the charge once: the guard's
// subject, the customer scope and the pricer share the request's lookups
// (withLookups); each used to read it on its own.
func TestRefundByChargeReadsChargeOnce(t *testing.T) {
	up := &upstreamLog{}
	e := MustOpen(t, logUpstream(up))
	_, secret := e.CreateKey(t, `{"total_usd_cap":100,"allowed_endpoints":["*"],"guards":{"duplicate":{"window_seconds":86400}}}`)
	sc, ctx := e.Stripe(secret), t.Context()
	pi, err := sc.V1PaymentIntents.Create(ctx, &stripego.PaymentIntentCreateParams{Amount: stripego.Int64(4000), Currency: stripego.String("usd"),
		PaymentMethod: stripego.String("pm_card_visa"), Confirm: stripego.Bool(true)})
	if err != nil || pi.LatestCharge == nil {
		t.Fatalf("pay: %v %+v", err, pi)
	}
	charge := pi.LatestCharge.ID
	before := up.naming("GET /v1/charges/" + charge)
	if _, err := sc.V1Refunds.Create(ctx, &stripego.RefundCreateParams{Charge: stripego.String(charge)}); err != nil {
		t.Fatalf("refund by charge: %v", err)
	}
	if n := up.naming("GET /v1/charges/"+charge) - before; n != 1 {
		t.Fatalf("the refund read its charge %d times upstream, want once: %q", n, up.reqs)
	}
	if got := e.Sim.GroundTruth().Refunds; len(got) != 1 {
		t.Fatalf("%d refunds, want 1", len(got))
	}
}
