package billing_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/billing"
	"github.com/keybrake/keybrake/stripesim"
)

func TestStripeCharger_Classify(t *testing.T) {
	// Each answer the charger can get, and what the processor does with it.
	for _, tc := range []struct {
		name   string
		status int
		class  billing.Class
	}{
		{"ServerError", 500, billing.ClassTransient},
		{"Unavailable", 503, billing.ClassTransient},
		{"RateLimited", 429, billing.ClassTransient},
		{"KeyInUse", 409, billing.ClassTransient},
		{"Unauthorized", 401, billing.ClassOperator},
		{"Forbidden", 403, billing.ClassOperator},
		{"BadRequest", 400, billing.ClassFailed},
		{"NotFound", 404, billing.ClassFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := MustEnv(t)
			if _, err := e.Sim.AddFault(stripesim.Fault{Path: "/v1/charges", Mode: stripesim.FaultFailBefore, Status: tc.status}); err != nil {
				t.Fatal(err)
			}
			_, err := e.Charger.Charge(context.Background(), billing.ChargeRequest{Key: "kb_test_1", Amount: 100, Currency: "usd", Source: "tok_visa"})
			var ce *billing.ChargeError
			if !errors.As(err, &ce) || ce.Status != tc.status || billing.ClassOf(err) != tc.class {
				t.Fatalf("Charge error = %v (%#v), want class %s", err, ce, tc.class)
			}
		})
	}
	t.Run("Declined", func(t *testing.T) {
		e := MustEnv(t)
		_, err := e.Charger.Charge(context.Background(), billing.ChargeRequest{Key: "kb_test_1", Amount: 100, Currency: "usd", Source: "tok_chargeDeclined"})
		var ce *billing.ChargeError
		if !errors.As(err, &ce) || ce.Class != billing.ClassDeclined || ce.ChargeID == "" || ce.DeclineCode != "generic_decline" {
			t.Fatalf("Charge error = %v (%#v)", err, ce)
		}
	})
	t.Run("Timeout", func(t *testing.T) {
		// No answer at all: transient, the charge may exist.
		e := MustEnv(t)
		release := make(chan struct{})
		defer close(release)
		if _, err := e.Sim.AddFault(stripesim.Fault{Path: "/v1/charges", Mode: stripesim.FaultLatency, Wait: release}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		e.Charger.HTTPClient = &http.Client{}
		_, err := e.Charger.Charge(ctx, billing.ChargeRequest{Key: "kb_test_1", Amount: 100, Currency: "usd", Source: "tok_visa"})
		if err == nil || billing.ClassOf(err) != billing.ClassTransient {
			t.Fatalf("Charge error = %v, want transient", err)
		}
	})
	t.Run("OverCapIsEOVERCAP", func(t *testing.T) {
		err := &billing.ChargeError{Class: billing.ClassTransient, Status: 429, Code: "keybrake_spend_cap_exceeded"}
		if keybrake.ErrorCode(err) != keybrake.EOVERCAP {
			t.Fatalf("code = %s", keybrake.ErrorCode(err))
		}
	})
}
