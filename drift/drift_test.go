package drift_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/drift"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/storetest"
	"github.com/keybrake/keybrake/stripesim"
	stripego "github.com/stripe/stripe-go/v82"
)

func client(base, secret string) *stripego.Client {
	cfg := &stripego.BackendConfig{
		URL:               stripego.String(base),
		MaxNetworkRetries: stripego.Int64(0),
		LeveledLogger:     &stripego.LeveledLogger{Level: stripego.LevelNull},
		HTTPClient:        &http.Client{Timeout: 30 * time.Second},
	}
	return stripego.NewClient(secret, stripego.WithBackends(stripego.NewBackendsWithConfig(cfg)))
}

func charge(amount int64) *stripego.ChargeCreateParams {
	return &stripego.ChargeCreateParams{Amount: stripego.Int64(amount), Currency: stripego.String("usd"), Source: &stripego.PaymentSourceSourceParams{Token: stripego.String("tok_visa")}}
}

// mustSettled records a settled reservation of keyID for objectID straight
// in the store, created at `at`, as if keybrake had proxied it.
func mustSettled(t *testing.T, s keybrake.Store, keyID, idem, objectID string, amount int64, at time.Time) *keybrake.Reservation {
	t.Helper()
	r := storetest.NewReservation(keyID, idem, keybrake.Micros(amount*10_000))
	res, err := s.Reserve(context.Background(), keybrake.ReserveArgs{Reservation: r, Now: at})
	if err != nil || res.OverCap != nil {
		t.Fatalf("Reserve: %+v, %v", res, err)
	}
	settled, err := s.Settle(context.Background(), keybrake.SettleArgs{ID: res.Reservation.ID, State: keybrake.StateSettled,
		SettledMicros: r.Micros, Amount: amount, Currency: "usd", ObjectID: objectID, UpstreamStatus: 200, Now: at})
	if err != nil {
		t.Fatalf("Settle: %v", err)
	}
	return settled
}

func TestReconcile(t *testing.T) {
	ctx := context.Background()
	_, simURL := kbtest.Simulator(t, stripesim.Options{})
	p := kbtest.Proxy(t, simURL, nil)
	keyID, secret := kbtest.VaultKey(t, p.URL(), `{"label":"drift","daily_usd_cap":1000,"allowed_endpoints":["*"]}`)
	via := client(p.URL(), secret)
	direct := client(simURL, kbtest.UpstreamSecret)

	// Through keybrake: tagged, reserved, settled. Not drift.
	if _, err := via.V1Charges.Create(ctx, charge(2000)); err != nil {
		t.Fatalf("charge through keybrake: %v", err)
	}
	up, _ := url.Parse(simURL)
	r := &drift.Reconciler{Store: p.Store, Upstream: up, UpstreamKey: kbtest.UpstreamSecret}

	t.Run("OK", func(t *testing.T) {
		rep, err := r.Run(ctx)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if len(rep.Findings) != 0 || rep.Objects != 1 {
			t.Fatalf("findings %+v, objects %d; want none of 1", rep.Findings, rep.Objects)
		}
	})

	// Outside keybrake, with the real secret: a charge and a refund of it.
	outside, err := direct.V1Charges.Create(ctx, charge(777))
	if err != nil {
		t.Fatalf("direct charge: %v", err)
	}
	refund, err := direct.V1Refunds.Create(ctx, &stripego.RefundCreateParams{Charge: stripego.String(outside.ID), Amount: stripego.Int64(100)})
	if err != nil {
		t.Fatalf("direct refund: %v", err)
	}
	// A charge keybrake settled at another amount than it has upstream.
	other, err := direct.V1Charges.Create(ctx, charge(900))
	if err != nil {
		t.Fatalf("direct charge: %v", err)
	}
	mismatch := mustSettled(t, p.Store, keyID, "idem_mismatch", other.ID, 800, time.Now())
	// A reservation keybrake settled whose object is not upstream.
	gone := mustSettled(t, p.Store, keyID, "idem_gone", "ch_gone", 300, time.Now().Add(-5*time.Minute))

	t.Run("Drift", func(t *testing.T) {
		rep, err := r.Run(ctx)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		got := map[string]drift.Finding{}
		for _, f := range rep.Findings {
			got[f.Kind+" "+f.ObjectID+f.ReservationID] = f
		}
		for _, want := range []drift.Finding{
			{Kind: drift.KindUnseen, Object: "charges", ObjectID: outside.ID, Amount: 777},
			{Kind: drift.KindUnseen, Object: "refunds", ObjectID: refund.ID, Amount: 100},
			{Kind: drift.KindAmount, Object: "charges", ObjectID: other.ID, Amount: 900, Reserved: 800, KeyID: keyID, ReservationID: mismatch.ID},
			{Kind: drift.KindMissing, Object: "charges", Reserved: 300, KeyID: keyID, ReservationID: gone.ID},
		} {
			f, ok := got[want.Kind+" "+want.ObjectID+want.ReservationID]
			if !ok || f.Object != want.Object || f.Amount != want.Amount || f.Reserved != want.Reserved || f.KeyID != want.KeyID {
				t.Errorf("finding %s %s%s = %+v, want %+v", want.Kind, want.ObjectID, want.ReservationID, f, want)
			}
		}
		if len(rep.Findings) != 4 {
			t.Fatalf("findings = %+v, want 4", rep.Findings)
		}

		// Recorded once: audited in the chained log, and not again next run.
		seen := map[string]bool{}
		var reported int
		for range 2 {
			if err := drift.Record(ctx, p.Store, kbtest.Logger(), rep, time.Now(), seen, func(drift.Finding) { reported++ }); err != nil {
				t.Fatalf("Record: %v", err)
			}
		}
		if reported != 4 {
			t.Fatalf("reported %d, want 4", reported)
		}
		es, _, err := p.Store.FindEvents(ctx, keybrake.EventFilter{KeyID: keyID, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var drifts int
		for _, e := range es {
			if e.Decision == keybrake.DecisionDrift {
				drifts++
			}
		}
		if drifts != 2 {
			t.Fatalf("drift events of %s = %d, want 2 (amount, missing)", keyID, drifts)
		}
		if rep := storetest.MustVerify(t, p.Store); !rep.OK() {
			t.Fatalf("audit chain: %+v", rep.Breaks)
		}
	})
}

// TestWatch runs the background watch of keybrake serve: a charge made
// on the simulator outside keybrake is counted, logged and audited.
func TestWatch(t *testing.T) {
	ctx := context.Background()
	_, simURL := kbtest.Simulator(t, stripesim.Options{})
	p := kbtest.Proxy(t, simURL, func(s *khttp.Server) { s.Drift = khttp.DriftConfig{Interval: 10 * time.Millisecond} })
	ch, err := client(simURL, kbtest.UpstreamSecret).V1Charges.Create(ctx, charge(4200))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		es, _, err := p.Store.FindEvents(ctx, keybrake.EventFilter{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(es) > 0 {
			e := es[0]
			if e.Decision != keybrake.DecisionDrift || e.ObjectID != ch.ID || e.Operation != "drift.unseen" || e.Amount != 4200 {
				t.Fatalf("event = %+v, want drift.unseen of %s", e, ch.ID)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no drift event within 10s")
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline, not synchronisation
	}
	req, err := http.NewRequest("GET", p.URL()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+kbtest.AdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `keybrake_drift_total{kind="unseen",object="charges"} 1`) {
		t.Fatalf("metrics lack the drift count:\n%s", body)
	}
}
