package storetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// testApprovalAlerts covers what issue 15 adds around approvals: the
// approval_required alert written with the approval, the link secret, and
// suspension cascading to child keys.
func testApprovalAlerts(t *testing.T, open opener) {
	ctx := context.Background()
	request := func(t *testing.T, s keybrake.Store, id, idem string) bool {
		t.Helper()
		_, created, err := s.RequestApproval(ctx, &keybrake.Approval{ID: id, KeyID: "vk_a", IdempotencyKey: idem, Fingerprint: "fp",
			Operation: "refunds.create", Method: "POST", Path: "/v1/refunds", Amount: 15000, Currency: "usd",
			Micros: USD(150), Reason: "above", CreatedAt: T0, ExpiresAt: T0.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		return created
	}
	approvalAlerts := func(t *testing.T, s keybrake.Store) []*keybrake.Alert {
		t.Helper()
		as, err := s.FindAlerts(ctx, keybrake.AlertFilter{KeyID: "vk_a", Kind: keybrake.AlertApproval})
		if err != nil {
			t.Fatal(err)
		}
		return as
	}
	t.Run("AlertOncePerApproval", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("vk_a"))
		if err := s.CreateAlertEndpoint(ctx, &keybrake.AlertEndpoint{ID: "ep_1", URL: "http://127.0.0.1:1/", Format: keybrake.FormatKeybrake, Secret: "whsec_x", Enabled: true, CreatedAt: T0, UpdatedAt: T0}); err != nil {
			t.Fatal(err)
		}
		request(t, s, "apr_1", "i1")
		if request(t, s, "apr_2", "i1") {
			t.Fatal("a retry under the same Idempotency-Key made a second approval")
		}
		as := approvalAlerts(t, s)
		if len(as) != 1 {
			t.Fatalf("alerts after one approval and a retry: %d, want 1", len(as))
		}
		a := as[0]
		if a.AlertKey != "approval_required:apr_1" || a.ApprovalID != "apr_1" || a.Spent != USD(150) || a.Detail != "refunds.create" || !a.CreatedAt.Equal(T0) {
			t.Fatalf("alert: %+v", a)
		}
		ds, err := s.FindAlertDeliveries(ctx, keybrake.DeliveryFilter{AlertID: a.ID})
		if err != nil || len(ds) != 1 || ds[0].EndpointID != "ep_1" || ds[0].Alert.ApprovalID != "apr_1" {
			t.Fatalf("deliveries: %v, %v", ds, err)
		}
		request(t, s, "apr_3", "i2")
		if n := len(approvalAlerts(t, s)); n != 2 {
			t.Fatalf("alerts after a second approval: %d, want 2", n)
		}
	})
	t.Run("AlertOptOut", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("vk_a"))
		if err := s.CreateAlertRule(ctx, &keybrake.AlertRule{KeyID: "vk_a", Kind: keybrake.AlertApproval, Enabled: false, CreatedAt: T0}); err != nil {
			t.Fatal(err)
		}
		request(t, s, "apr_1", "i1")
		if n := len(approvalAlerts(t, s)); n != 0 {
			t.Fatalf("alerts with the key's rule disabled: %d", n)
		}
	})
	t.Run("LinkSecret", func(t *testing.T) {
		s := open(t)
		a, err := s.LinkSecret(ctx, keybrake.LinkSecretApprovals)
		if err != nil || len(a) < 32 {
			t.Fatalf("LinkSecret: %d bytes, %v", len(a), err)
		}
		b, _ := s.LinkSecret(ctx, keybrake.LinkSecretApprovals)
		if string(a) != string(b) {
			t.Fatal("the secret changed between reads")
		}
		if _, err := s.LinkSecret(ctx, "nope"); keybrake.ErrorCode(err) != keybrake.ENOTFOUND {
			t.Fatalf("unknown secret: %v", err)
		}
	})
	t.Run("SuspendCascades", func(t *testing.T) {
		s := open(t)
		day := T0.Add(2 * time.Hour)
		p := NewKey("vk_parent")
		p.Total, p.Mint = Ptr(USD(100)), true
		p.AllowedEndpoints = []string{"charges.create"}
		p = MustCreateKey(t, s, p)
		c := NewChild("vk_child", p, USD(40), day)
		c.Mint = true
		MustMint(t, s, p.ID, c, T0)
		MustMint(t, s, "vk_child", NewChild("vk_grand", c, USD(10), day), T0)
		MustMint(t, s, p.ID, NewChild("vk_own", p, USD(10), day), T0)
		MustMint(t, s, p.ID, NewChild("vk_gone", p, USD(10), day), T0)
		// vk_own is suspended on its own first; vk_gone is revoked.
		if _, err := s.SuspendKey(ctx, "vk_own", "operator", T0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RevokeKey(ctx, "vk_gone", T0); err != nil {
			t.Fatal(err)
		}
		at := T0.Add(time.Minute)
		if _, err := s.SuspendKey(ctx, p.ID, "incident 7", at); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"vk_child", "vk_grand"} {
			k := mustFindKey(t, s, id)
			if k.SuspendedAt == nil || !k.SuspendedAt.Equal(at) || !strings.Contains(k.SuspendedReason, "vk_parent") {
				t.Fatalf("%s after its ancestor was suspended: %+v", id, k)
			}
		}
		if k := mustFindKey(t, s, "vk_own"); k.SuspendedReason != "operator" || !k.SuspendedAt.Equal(T0) {
			t.Fatalf("an earlier suspension was overwritten: %+v", k)
		}
		if k := mustFindKey(t, s, "vk_gone"); k.SuspendedAt != nil {
			t.Fatalf("a revoked child was suspended: %+v", k)
		}
		if _, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("vk_grand", "g1", USD(1)), Now: at}); err == nil {
			t.Fatal("grandchild reserved while its root was suspended")
		}
		if _, err := s.ResumeKey(ctx, p.ID, at.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"vk_parent", "vk_child", "vk_grand"} {
			if k := mustFindKey(t, s, id); k.SuspendedAt != nil {
				t.Fatalf("%s still suspended after the parent resumed: %+v", id, k)
			}
		}
		if k := mustFindKey(t, s, "vk_own"); k.SuspendedAt == nil {
			t.Fatal("resuming the parent resumed a child suspended on its own")
		}
		if _, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("vk_grand", "g2", USD(1)), Now: at.Add(time.Minute)}); err != nil {
			t.Fatalf("grandchild after the root resumed: %v", err)
		}
		// A child resumed by hand no longer follows its parent's resume; a
		// later suspension of the parent takes it again.
		if _, err := s.SuspendKey(ctx, p.ID, "again", at.Add(2*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ResumeKey(ctx, "vk_child", at.Add(3*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if k := mustFindKey(t, s, "vk_child"); k.SuspendedAt != nil {
			t.Fatalf("child resumed by hand: %+v", k)
		}
	})
	// A key an ancestor's cascade suspended, then suspended on its own,
	// keeps its own suspension (and its descendants theirs) when the
	// ancestor resumes: the ancestor's resume resumed it before
	// (http/TestAttackLifecycle_OwnSuspensionUndoneByParentResume).
	t.Run("OwnSuspensionOutlivesAncestorResume", func(t *testing.T) {
		s := open(t)
		day := T0.Add(2 * time.Hour)
		p := NewKey("vk_parent")
		p.Total, p.Mint = Ptr(USD(100)), true
		p.AllowedEndpoints = []string{"charges.create"}
		p = MustCreateKey(t, s, p)
		c := NewChild("vk_child", p, USD(40), day)
		c.Mint = true
		MustMint(t, s, p.ID, c, T0)
		MustMint(t, s, "vk_child", NewChild("vk_grand", c, USD(10), day), T0)
		at := T0.Add(time.Minute)
		if _, err := s.SuspendKey(ctx, p.ID, "incident 7", at); err != nil {
			t.Fatal(err)
		}
		k, err := s.SuspendKey(ctx, "vk_child", "operator", at.Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if k.SuspendedAt == nil || !k.SuspendedAt.Equal(at) || k.SuspendedReason != "operator" {
			t.Fatalf("child suspended on its own after its parent: %+v", k)
		}
		if _, err := s.ResumeKey(ctx, p.ID, at.Add(2*time.Minute)); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"vk_child", "vk_grand"} {
			if k := mustFindKey(t, s, id); k.SuspendedAt == nil {
				t.Fatalf("%s resumed with the parent after the child's own suspension", id)
			}
		}
		if _, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("vk_grand", "g1", USD(1)), Now: at.Add(2 * time.Minute)}); err == nil {
			t.Fatal("grandchild reserved under a suspended child")
		}
		// Resuming a child by hand, then suspending it while its parent
		// is suspended again, takes its child over too.
		if _, err := s.ResumeKey(ctx, "vk_child", at.Add(3*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SuspendKey(ctx, p.ID, "again", at.Add(4*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ResumeKey(ctx, "vk_child", at.Add(5*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SuspendKey(ctx, "vk_child", "operator", at.Add(6*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ResumeKey(ctx, p.ID, at.Add(7*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if k := mustFindKey(t, s, "vk_grand"); k.SuspendedAt == nil {
			t.Fatal("grandchild resumed with the root while its own parent is suspended")
		}
		if _, err := s.ResumeKey(ctx, "vk_child", at.Add(8*time.Minute)); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"vk_child", "vk_grand"} {
			if k := mustFindKey(t, s, id); k.SuspendedAt != nil {
				t.Fatalf("%s still suspended after the child resumed: %+v", id, k)
			}
		}
	})
}
