package storetest

import (
	"context"
	"testing"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/drift"
)

// testDriftAlerts covers the drift alert: written by the store in the
// transaction of the finding's audit event, once per finding however many
// replicas audit it, naming the finding, and opted out of per key.
func testDriftAlerts(t *testing.T, open opener) {
	ctx := context.Background()
	audit := func(t *testing.T, s keybrake.Store, fs ...drift.Finding) {
		t.Helper()
		var es []*keybrake.Event
		for _, f := range fs {
			es = append(es, drift.Audit(f, T0))
		}
		if err := s.AddEvents(ctx, es); err != nil {
			t.Fatal(err)
		}
	}
	driftAlerts := func(t *testing.T, s keybrake.Store, keyID string) []*keybrake.Alert {
		t.Helper()
		as, err := s.FindAlerts(ctx, keybrake.AlertFilter{KeyID: keyID, Kind: keybrake.AlertDrift})
		if err != nil {
			t.Fatal(err)
		}
		return as
	}
	t.Run("OncePerFinding", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("vk_a"))
		MustCreateEndpoint(t, s, "ep_1", "")
		rv := MustReserve(t, s, "vk_a", "i1", USD(8), T0)
		f := drift.Finding{Kind: drift.KindAmount, Object: "charges", ObjectID: "ch_1", Amount: 900, Currency: "usd",
			Reserved: 800, ReservedCcy: "usd", KeyID: "vk_a", ReservationID: rv.ID, IdempotencyKey: "i1", Created: T0}
		audit(t, s, f)
		audit(t, s, f) // a second replica, or a second run, audits it again
		as := driftAlerts(t, s, "vk_a")
		if len(as) != 1 {
			t.Fatalf("drift alerts after one finding audited twice: %d, want 1", len(as))
		}
		a := as[0]
		if a.AlertKey != "drift:amount:ch_1" || a.Finding != drift.KindAmount || a.UpstreamObject != "charges" || a.ObjectID != "ch_1" ||
			a.Amount != 900 || a.Currency != "usd" || a.ReservedAmount != 800 || a.ReservedCurrency != "usd" ||
			a.ReservationID != rv.ID || a.Detail != f.String() || !a.CreatedAt.Equal(T0) {
			t.Fatalf("alert: %+v", a)
		}
		ds, err := s.FindAlertDeliveries(ctx, keybrake.DeliveryFilter{AlertID: a.ID})
		if err != nil || len(ds) != 1 || ds[0].EndpointID != "ep_1" || ds[0].Alert.Finding != drift.KindAmount {
			t.Fatalf("deliveries: %v, %v", ds, err)
		}
	})
	t.Run("MissingAndUnseen", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("vk_a"))
		MustCreateEndpoint(t, s, "ep_all", "")
		MustCreateEndpoint(t, s, "ep_a", "vk_a")
		rv := MustReserve(t, s, "vk_a", "i1", USD(3), T0)
		audit(t, s,
			drift.Finding{Kind: drift.KindMissing, Object: "charges", Reserved: 300, ReservedCcy: "usd", KeyID: "vk_a", ReservationID: rv.ID, IdempotencyKey: "i1"},
			drift.Finding{Kind: drift.KindUnseen, Object: "refunds", ObjectID: "re_9", Amount: 9000, Currency: "usd"})
		as := driftAlerts(t, s, "vk_a")
		if len(as) != 1 || as[0].AlertKey != "drift:missing:"+rv.ID || as[0].ObjectID != "" || as[0].ReservedAmount != 300 || as[0].UpstreamObject != "charges" {
			t.Fatalf("missing alert: %+v", as)
		}
		if ds, _ := s.FindAlertDeliveries(ctx, keybrake.DeliveryFilter{AlertID: as[0].ID}); len(ds) != 2 {
			t.Fatalf("deliveries of the key's alert: %d, want 2 (every-key and the key's endpoint)", len(ds))
		}
		var unseen []*keybrake.Alert
		for _, a := range driftAlerts(t, s, "") { // every key's
			if a.KeyID == "" {
				unseen = append(unseen, a)
			}
		}
		if len(unseen) != 1 || unseen[0].AlertKey != "drift:unseen:re_9" || unseen[0].KeyID != "" || unseen[0].Amount != 9000 || unseen[0].ReservedAmount != 0 {
			t.Fatalf("unseen alert: %+v", unseen)
		}
		ds, _ := s.FindAlertDeliveries(ctx, keybrake.DeliveryFilter{AlertID: unseen[0].ID})
		if len(ds) != 1 || ds[0].EndpointID != "ep_all" {
			t.Fatalf("deliveries of a keyless finding: %+v, want ep_all only", ds)
		}
	})
	t.Run("OptOut", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("vk_a"))
		if err := s.CreateAlertRule(ctx, &keybrake.AlertRule{KeyID: "vk_a", Kind: keybrake.AlertDrift, Enabled: false, CreatedAt: T0}); err != nil {
			t.Fatal(err)
		}
		audit(t, s, drift.Finding{Kind: drift.KindAmount, Object: "charges", ObjectID: "ch_1", Amount: 1, Currency: "usd", KeyID: "vk_a"})
		if as := driftAlerts(t, s, "vk_a"); len(as) != 0 {
			t.Fatalf("drift alerts of a key that opted out: %+v", as)
		}
		// Other events never make one.
		if err := s.AddEvents(ctx, []*keybrake.Event{{KeyID: "vk_a", Time: T0, Operation: "charges.create", Decision: keybrake.DecisionAllow}}); err != nil {
			t.Fatal(err)
		}
		if as, _ := s.FindAlerts(ctx, keybrake.AlertFilter{Kind: keybrake.AlertDrift}); len(as) != 0 {
			t.Fatalf("drift alerts: %+v", as)
		}
	})
}
