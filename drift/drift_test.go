package drift_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/drift"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/postgres"
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

// TestWatchAlertsAndSuspends runs the watch of keybrake serve with
// --drift-suspend on two replicas sharing a store: a charge made directly
// on the simulator, outside keybrake, carrying the tag of a key's
// reservation at another amount raises one drift alert, delivered signed to
// a webhook, and suspends the key, which the other replica then refuses.
// A charge with no tag alerts too and suspends nothing.
func TestWatchAlertsAndSuspends(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) (a, b keybrake.Store)
	}{
		{"SQLite", func(t *testing.T) (keybrake.Store, keybrake.Store) {
			s := kbtest.SQLite(t, "keybrake.db")
			return s, s
		}},
		{"PostgreSQL", func(t *testing.T) (keybrake.Store, keybrake.Store) {
			dsn := kbtest.PostgresSchema(t, kbtest.PostgresServerDSN(t))
			a, err := postgres.Open(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			b, err := postgres.Open(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return a, b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			storeA, storeB := tc.store(t)
			_, simURL := kbtest.Simulator(t, stripesim.Options{})
			// Replica B only serves; replica A also runs the watch and sends alerts.
			b := kbtest.Proxy(t, simURL, func(s *khttp.Server) { s.Store = storeB })
			keyID, secret := kbtest.VaultKey(t, b.URL(), `{"label":"agent","daily_usd_cap":1000,"allowed_endpoints":["*"]}`)
			via := client(b.URL(), secret)
			if _, err := via.V1Charges.Create(ctx, charge(500)); err != nil { // warms B's key cache
				t.Fatalf("charge through keybrake: %v", err)
			}

			hook := kbtest.NewWebhook(t, "", time.Now)
			req, _ := http.NewRequest("POST", b.URL()+"/vault/alerts/endpoints", strings.NewReader(`{"url":"`+hook.URL+`"}`))
			req.Header.Set("Authorization", "Bearer "+kbtest.AdminToken)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var ep struct {
				Secret string `json:"secret"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&ep); err != nil || resp.StatusCode != http.StatusCreated {
				t.Fatalf("create endpoint: %d, %v", resp.StatusCode, err)
			}
			resp.Body.Close()
			hook.Secret = ep.Secret

			// Keybrake settled 8.00 for idem_x; upstream, a charge made with
			// the real secret carries that tag at 9.00.
			rv := mustSettled(t, storeB, keyID, "idem_x", "", 800, time.Now())
			direct := client(simURL, kbtest.UpstreamSecret)
			params := charge(900)
			params.AddMetadata(drift.MetadataKey, "idem_x")
			tagged, err := direct.V1Charges.Create(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			untagged, err := direct.V1Charges.Create(ctx, charge(4200))
			if err != nil {
				t.Fatal(err)
			}

			kbtest.Proxy(t, simURL, func(s *khttp.Server) {
				s.Store = storeA
				s.Drift = khttp.DriftConfig{Interval: 10 * time.Millisecond, Suspend: true}
				s.AlertInterval = 10 * time.Millisecond
			})
			var events []alertEvent
			kbtest.Eventually(t, "two drift alerts delivered", func() bool {
				events = events[:0]
				for id, n := range hook.Acked() {
					var ev alertEvent
					if err := json.Unmarshal(hook.Body(id), &ev); err != nil || n != 1 {
						t.Fatalf("delivery %s (%d times): %s, %v", id, n, hook.Body(id), err)
					}
					events = append(events, ev)
				}
				return len(events) >= 2
			})
			if hook.BadSignatures() != 0 {
				t.Fatalf("%d deliveries failed signature checks", hook.BadSignatures())
			}
			byObject := map[string]alertEvent{}
			for _, ev := range events {
				if ev.Type != "alert.drift" {
					t.Fatalf("alert %s: %+v", ev.Type, ev)
				}
				byObject[ev.Data.ObjectID] = ev
			}
			if d := byObject[tagged.ID].Data; d.Finding != drift.KindAmount || d.KeyID != keyID || d.Amount != 900 || d.ReservedAmount != 800 ||
				d.ReservationID != rv.ID || d.UpstreamObject != "charges" || !strings.Contains(d.Message, tagged.ID) {
				t.Fatalf("amount alert: %+v", d)
			}
			if d := byObject[untagged.ID].Data; d.Finding != drift.KindUnseen || d.KeyID != "" || d.Amount != 4200 {
				t.Fatalf("unseen alert: %+v", d)
			}

			// The sender may deliver before the watch suspends: wait for it,
			// then the key refuses its next charge on the other replica.
			var k *keybrake.Key
			kbtest.Eventually(t, "the key suspended", func() bool {
				k, err = storeB.FindKeyByID(ctx, keyID)
				return err == nil && k.SuspendedAt != nil
			})
			if k.SuspendedReason != "drift: amount "+tagged.ID {
				t.Fatalf("suspended for %q", k.SuspendedReason)
			}
			_, err = via.V1Charges.Create(ctx, charge(100))
			var serr *stripego.Error
			if !errors.As(err, &serr) || serr.HTTPStatusCode != http.StatusForbidden {
				t.Fatalf("charge of a key suspended by drift: %v, want 403", err)
			}
			as, ok := storeB.(keybrake.AdminStore)
			if !ok {
				t.Fatal("store keeps no admin audit log")
			}
			// The watch writes its admin event in the suspension's own
			// transaction: it is there as soon as the key is suspended.
			aes, _, err := as.FindAdminEvents(ctx, keybrake.AdminEventFilter{Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(aes, func(e *keybrake.AdminEvent) bool {
				return e.Actor == "drift watch" && e.Action == "key.suspend" && e.Target == keyID && e.Detail == k.SuspendedReason
			}) {
				t.Fatalf("the key is suspended but the admin audit log does not say so: %+v", aes)
			}
			// Every finding alerts once however many runs see it.
			drifts, err := storeB.FindAlerts(ctx, keybrake.AlertFilter{Kind: keybrake.AlertDrift})
			if err != nil || len(drifts) != 2 {
				t.Fatalf("drift alerts: %d, %v; want 2", len(drifts), err)
			}
		})
	}
}

type alertEvent struct {
	Type string `json:"type"`
	Data struct {
		keybrake.Alert
		Message string `json:"message"`
	} `json:"data"`
}
