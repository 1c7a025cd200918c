package stripesim_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	stripe "github.com/stripe/stripe-go/v82"

	"github.com/keybrake/keybrake/stripesim"
)

// MustFault registers f.
func MustFault(tb testing.TB, sim *stripesim.Server, f stripesim.Fault) string {
	tb.Helper()
	id, err := sim.AddFault(f)
	if err != nil {
		tb.Fatalf("AddFault: %v", err)
	}
	return id
}

func chargeParams(key string) *stripe.ChargeCreateParams {
	p := &stripe.ChargeCreateParams{Amount: stripe.Int64(2000), Currency: stripe.String("usd"),
		Source: &stripe.PaymentSourceSourceParams{Token: stripe.String("tok_visa")}}
	if key != "" {
		p.SetIdempotencyKey(key)
	}
	return p
}

func TestFaults(t *testing.T) {
	ctx := context.Background()

	t.Run("FailBefore", func(t *testing.T) {
		e := MustEnv(t)
		MustFault(t, e.sim, stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultFailBefore, Nth: 1})
		_, err := e.sdk().V1Charges.Create(ctx, chargeParams("fb"))
		if se := stripeErr(t, err); se.HTTPStatusCode != 500 || se.Type != stripe.ErrorTypeAPI {
			t.Fatalf("error = %+v", se)
		}
		if n := countObjects(e.sim); n != 0 {
			t.Fatalf("%d objects created by a fail_before request", n)
		}
		// Nothing was saved under the key: the retry executes for real.
		r := e.do(t, "POST", "/v1/charges", form("amount", "2000", "currency", "usd", "source", "tok_visa"), "Idempotency-Key", "fb")
		if r.status != 200 || r.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("retry: %d %v", r.status, r.header)
		}
		if n := len(e.sim.GroundTruth().Charges); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})

	t.Run("FailAfter", func(t *testing.T) {
		e := MustEnv(t)
		MustFault(t, e.sim, stripesim.Fault{Path: "/v1/charges", Mode: stripesim.FaultFailAfter, Nth: 1, Status: 503})
		_, err := e.sdk().V1Charges.Create(ctx, chargeParams("fa"))
		if se := stripeErr(t, err); se.HTTPStatusCode != 503 {
			t.Fatalf("error = %+v", se)
		}
		gt := e.sim.GroundTruth()
		if len(gt.Charges) != 1 || gt.Charges[0].Status != "succeeded" {
			t.Fatalf("ground truth = %+v", gt.Charges)
		}
		ch, err := e.sdk().V1Charges.Create(ctx, chargeParams("fa"))
		if err != nil || ch.ID != gt.Charges[0].ID {
			t.Fatalf("retry = %v, %v; want the charge %s", ch, err, gt.Charges[0].ID)
		}
		if n := len(e.sim.GroundTruth().Charges); n != 1 {
			t.Fatalf("%d charges after the retry, want 1", n)
		}
	})

	t.Run("CutAfter", func(t *testing.T) {
		e := MustEnv(t)
		MustFault(t, e.sim, stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultCutAfter, Nth: 1})
		_, err := e.sdk().V1Charges.Create(ctx, chargeParams("cut"))
		var se *stripe.Error
		if err == nil || errors.As(err, &se) {
			t.Fatalf("want a connection error, got %v", err)
		}
		gt := e.sim.GroundTruth()
		if len(gt.Charges) != 1 {
			t.Fatalf("%d charges, want the one whose response was cut", len(gt.Charges))
		}
		r := e.do(t, "POST", "/v1/charges", form("amount", "2000", "currency", "usd", "source", "tok_visa"), "Idempotency-Key", "cut")
		if r.status != 200 || r.header.Get("Idempotent-Replayed") != "true" || r.object(t)["id"] != gt.Charges[0].ID {
			t.Fatalf("retry: %d %s", r.status, r.body)
		}
	})

	t.Run("CutAfterRaw", func(t *testing.T) {
		e := MustEnv(t)
		MustFault(t, e.sim, stripesim.Fault{Path: "/v1/*", Mode: stripesim.FaultCutAfter})
		if _, err := e.send(ctx, "POST", "/v1/customers", ""); err == nil {
			t.Fatal("want a connection error")
		}
		if n := len(e.sim.GroundTruth().Customers); n != 1 {
			t.Fatalf("%d customers, want 1", n)
		}
	})

	t.Run("Latency", func(t *testing.T) {
		e := MustEnv(t)
		MustFault(t, e.sim, stripesim.Fault{Path: "/v1/charges", Mode: stripesim.FaultLatency, Latency: time.Minute})
		tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if _, err := e.sdk().V1Charges.Create(tctx, chargeParams("")); err == nil {
			t.Fatal("want the client to time out")
		}
		// The request goes on once its client left, as on a real server;
		// Close waits for it.
		e.srv.Close()
		if n := len(e.sim.GroundTruth().Charges); n != 1 {
			t.Fatalf("%d charges, want the one whose client timed out", n)
		}
		if st := e.sim.Faults(); len(st) != 1 || st[0].Fired != 1 {
			t.Fatalf("faults = %+v", st)
		}
	})

	t.Run("LatencyOK", func(t *testing.T) {
		e := MustEnv(t)
		MustFault(t, e.sim, stripesim.Fault{Method: "GET", Path: "/v1/charges*", Mode: stripesim.FaultLatency, Latency: time.Millisecond})
		wantStatus(t, e.do(t, "POST", "/v1/charges", visa2000), 200)
		wantStatus(t, e.do(t, "GET", "/v1/charges", ""), 200)
		if st := e.sim.Faults(); st[0].Matched != 1 || st[0].Fired != 1 {
			t.Fatalf("faults = %+v (the POST must not match a GET fault)", st)
		}
	})

	t.Run("Nth", func(t *testing.T) {
		e := MustEnv(t)
		MustFault(t, e.sim, stripesim.Fault{Path: "/v1/charges", Mode: stripesim.FaultFailBefore, Nth: 2})
		got := statuses(t, e, 4)
		if got != "200 500 200 200" {
			t.Fatalf("statuses = %s", got)
		}
		if n := len(e.sim.GroundTruth().Charges); n != 3 {
			t.Fatalf("%d charges, want 3", n)
		}
	})

	t.Run("Count", func(t *testing.T) {
		e := MustEnv(t)
		MustFault(t, e.sim, stripesim.Fault{Path: "/v1/charges", Mode: stripesim.FaultFailAfter, Count: 2})
		if got := statuses(t, e, 4); got != "500 500 200 200" {
			t.Fatalf("statuses = %s", got)
		}
		if n := len(e.sim.GroundTruth().Charges); n != 4 {
			t.Fatalf("%d charges, want 4 (fail_after creates)", n)
		}
	})

	t.Run("ProbabilityReproducible", func(t *testing.T) {
		run := func(seed int64) string {
			e := MustEnv(t)
			MustFault(t, e.sim, stripesim.Fault{Path: "/v1/charges", Mode: stripesim.FaultFailBefore, Probability: 0.5, Seed: seed})
			return statuses(t, e, 24)
		}
		a, b := run(7), run(7)
		if a != b {
			t.Fatalf("same seed, different runs:\n%s\n%s", a, b)
		}
		if c := run(8); c == a {
			t.Fatalf("seeds 7 and 8 gave the same run %s", a)
		}
		if !strings.Contains(a, "200") || !strings.Contains(a, "500") {
			t.Fatalf("probability 0.5 over 24 requests: %s", a)
		}
	})

	t.Run("RemoveAndClear", func(t *testing.T) {
		e := MustEnv(t)
		id := MustFault(t, e.sim, stripesim.Fault{Path: "/v1/charges", Mode: stripesim.FaultFailBefore})
		MustFault(t, e.sim, stripesim.Fault{Path: "/v1/customers", Mode: stripesim.FaultFailBefore})
		e.sim.RemoveFault(id)
		wantStatus(t, e.do(t, "POST", "/v1/charges", visa2000), 200)
		wantStatus(t, e.do(t, "POST", "/v1/customers", ""), 500)
		e.sim.ClearFaults()
		wantStatus(t, e.do(t, "POST", "/v1/customers", ""), 200)
	})

	t.Run("ErrInvalid", func(t *testing.T) {
		e := MustEnv(t)
		for _, f := range []stripesim.Fault{
			{Path: "/v1/charges", Mode: "explode"},
			{Path: "/v1/charges", Mode: stripesim.FaultLatency, Latency: -1},
			{Path: "/v1/charges", Mode: stripesim.FaultFailBefore, Probability: 2},
			{Path: "/v1/charges", Mode: stripesim.FaultFailBefore, Status: 200},
			{Path: "v1/charges", Mode: stripesim.FaultFailBefore},
		} {
			if _, err := e.sim.AddFault(f); err == nil {
				t.Errorf("AddFault(%+v) accepted", f)
			}
		}
	})
}

func TestAdminFaults(t *testing.T) {
	e := MustEnv(t)
	r := e.do(t, "POST", "/_sim/faults", `{"method":"POST","path":"/v1/charges","mode":"fail_before","nth":1,"latency":"1ms"}`)
	wantStatus(t, r, 200)
	id := r.object(t)["id"].(string)
	wantStatus(t, e.do(t, "POST", "/_sim/faults", `{"path":"/v1/customers","mode":"fail_after","latency":2}`), 200)
	wantStatus(t, e.do(t, "POST", "/v1/charges", visa2000), 500)

	r = e.do(t, "GET", "/_sim/faults", "")
	var list struct {
		Faults []stripesim.FaultStatus `json:"faults"`
	}
	if err := json.Unmarshal(r.body, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Faults) != 2 || list.Faults[0].ID != id || list.Faults[0].Fired != 1 ||
		list.Faults[0].Fault.Latency != time.Millisecond || list.Faults[1].Fault.Latency != 2*time.Millisecond {
		t.Fatalf("faults = %s", r.body)
	}

	for _, bad := range []string{`{"path":"/v1/charges","mode":"nope"}`, `{"path":"/v1/x","mode":"latency","latency":"soon"}`, `{"mode":"latency","bogus":1}`} {
		r := e.do(t, "POST", "/_sim/faults", bad)
		wantStatus(t, r, 400)
		r.apiError(t)
	}

	wantStatus(t, e.do(t, "DELETE", "/_sim/faults/"+id, ""), 200)
	if n := len(e.sim.Faults()); n != 1 {
		t.Fatalf("%d faults after deleting one, want 1", n)
	}
	wantStatus(t, e.do(t, "DELETE", "/_sim/faults", ""), 200)
	if n := len(e.sim.Faults()); n != 0 {
		t.Fatalf("%d faults after clearing, want 0", n)
	}
	wantStatus(t, e.do(t, "GET", "/_sim/nothing", ""), 404)
}

// statuses sends n charges and returns their statuses, space-separated.
func statuses(t *testing.T, e *env, n int) string {
	t.Helper()
	out := ""
	for i := range n {
		if i > 0 {
			out += " "
		}
		out += fmt.Sprint(e.do(t, "POST", "/v1/charges", visa2000).status)
	}
	return out
}
