package alert_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/alert"
	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/storetest"
)

// MustSender returns a sender on store with clock and a short attempt
// timeout.
func MustSender(tb testing.TB, store alert.Store, clock *kbtest.Clock, owner string) *alert.Sender {
	tb.Helper()
	return &alert.Sender{Store: store, Owner: owner, Now: clock.Now, Logger: kbtest.Logger(), Timeout: 300 * time.Millisecond}
}

// MustEndpoint stores an endpoint for every key pointing at url.
func MustEndpoint(tb testing.TB, store keybrake.AlertService, url, secret, format string) *keybrake.AlertEndpoint {
	tb.Helper()
	e := &keybrake.AlertEndpoint{URL: url, Secret: secret, Format: format, Enabled: true}
	if err := store.CreateAlertEndpoint(context.Background(), e); err != nil {
		tb.Fatal(err)
	}
	return e
}

func TestSender_FailTimeoutRecover(t *testing.T) {
	ctx := context.Background()
	clock := kbtest.NewClock(kbtest.T0)
	store := kbtest.SQLite(t, "alerts.db")
	hook := kbtest.NewWebhook(t, "whsec_test", clock.Now)
	// Request 1 fails, 2 hangs past the timeout, 3 fails again; then all pass.
	hook.Behave = func(n int) int {
		switch n {
		case 1, 3:
			return http.StatusInternalServerError
		case 2:
			return 0
		}
		return http.StatusOK
	}
	MustEndpoint(t, store, hook.URL, "whsec_test", keybrake.FormatKeybrake)
	storetest.MustCreateCappedKey(t, store, "vk_a", "UTC", keybrake.Caps{Daily: storetest.Ptr(storetest.USD(10))})
	storetest.MustReserve(t, store, "vk_a", "i1", storetest.USD(9), clock.Now())
	alerts, err := store.FindAlerts(ctx, keybrake.AlertFilter{KeyID: "vk_a"})
	if err != nil || len(alerts) != 2 {
		t.Fatalf("alerts = %d, %v; want 50%% and 80%%", len(alerts), err)
	}

	fired := 0
	outcomes := map[string]int{}
	s := MustSender(t, store, clock, "r1")
	s.Parallel = 1 // one request at a time, so the receiver's script is deterministic
	s.OnFired = func(*keybrake.Alert) { fired++ }
	s.OnAttempt = func(o string) { outcomes[o]++ }
	for i := 0; i < 10 && len(hook.Acked()) < 2; i++ {
		if err := s.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Hour)
	}
	acked := hook.Acked()
	for _, a := range alerts {
		if acked[a.ID] != 1 {
			t.Fatalf("alert %s acknowledged %d times, want 1 (all: %v)", a.AlertKey, acked[a.ID], acked)
		}
	}
	if len(acked) != 2 || hook.BadSignatures() != 0 || fired != 2 {
		t.Fatalf("acked %v, bad signatures %d, fired %d", acked, hook.BadSignatures(), fired)
	}
	if outcomes["retry"] != 3 || outcomes[keybrake.DeliveryDelivered] != 2 {
		t.Fatalf("outcomes = %v, want 3 retries and 2 delivered", outcomes)
	}
	var ev alert.Event
	if err := json.Unmarshal(hook.Body(alerts[0].ID), &ev); err != nil || ev.Object != "event" || ev.Type != "alert.threshold" || ev.Data.KeyLabel != "test key vk_a" {
		t.Fatalf("event = %+v, %v", ev, err)
	}

	// Every attempt is recorded: status, latency, error.
	ds, err := store.FindAlertDeliveries(ctx, keybrake.DeliveryFilter{KeyID: "vk_a"})
	if err != nil || len(ds) != 2 {
		t.Fatalf("deliveries = %d, %v", len(ds), err)
	}
	var statuses []int
	for _, d := range ds {
		if d.State != keybrake.DeliveryDelivered {
			t.Fatalf("delivery %s is %s", d.ID, d.State)
		}
		atts, err := store.FindAlertAttempts(ctx, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range atts {
			statuses = append(statuses, a.Status)
			if a.Status == 0 && a.Error == "" {
				t.Fatalf("a timed-out attempt has no error: %+v", a)
			}
		}
	}
	if len(statuses) != 5 {
		t.Fatalf("attempt statuses = %v, want 5 attempts (500, timeout, 500, 200, 200)", statuses)
	}
}

func TestSender_GivesUpAfterRetryPeriod(t *testing.T) {
	ctx := context.Background()
	clock := kbtest.NewClock(kbtest.T0)
	store := kbtest.SQLite(t, "alerts.db")
	hook := kbtest.NewWebhook(t, "whsec_test", clock.Now)
	hook.Behave = func(int) int { return http.StatusServiceUnavailable }
	MustEndpoint(t, store, hook.URL, "whsec_test", keybrake.FormatSlack)
	storetest.MustCreateKey(t, store, storetest.NewKey("vk_a"))
	a := &keybrake.Alert{AlertKey: "test:1", Kind: keybrake.AlertTest, KeyID: "vk_a", Detail: "we_x"}
	if _, err := store.EnqueueAlert(ctx, a); err != nil {
		t.Fatal(err)
	}
	s := MustSender(t, store, clock, "r1")
	var d *keybrake.AlertDelivery
	for i := 0; i < 100; i++ {
		if err := s.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		ds, _ := store.FindAlertDeliveries(ctx, keybrake.DeliveryFilter{AlertID: a.ID})
		if d = ds[0]; d.State != keybrake.DeliveryPending {
			break
		}
		clock.Set(d.NextAttemptAt) // jump to the scheduled retry: no real waiting
	}
	if d.State != keybrake.DeliveryFailed || d.LastStatus != http.StatusServiceUnavailable {
		t.Fatalf("delivery = %+v, want failed", d)
	}
	atts, _ := store.FindAlertAttempts(ctx, d.ID)
	last := atts[len(atts)-1].At
	if got := last.Sub(*d.FirstAttemptAt); got != alert.DefaultRetryFor {
		t.Fatalf("last attempt %v after the first, want exactly %v", got, alert.DefaultRetryFor)
	}
	if len(atts) < 25 || len(atts) != hook.Requests() {
		t.Fatalf("%d attempts recorded, %d requests received", len(atts), hook.Requests())
	}
}

func TestSender_LostLeaseRecordsNothing(t *testing.T) {
	// Two senders: the first's lease ends while its attempt hangs; the second
	// takes the delivery and delivers it. The first's late record is refused,
	// so the delivery is recorded once as delivered.
	ctx := context.Background()
	clock := kbtest.NewClock(kbtest.T0)
	store := kbtest.SQLite(t, "alerts.db")
	hook := kbtest.NewWebhook(t, "whsec_test", clock.Now)
	MustEndpoint(t, store, hook.URL, "whsec_test", keybrake.FormatKeybrake)
	storetest.MustCreateKey(t, store, storetest.NewKey("vk_a"))
	a := &keybrake.Alert{AlertKey: "test:1", Kind: keybrake.AlertTest, KeyID: "vk_a"}
	if _, err := store.EnqueueAlert(ctx, a); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	hook.Behave = func(n int) int {
		if n == 1 {
			<-release
		}
		return http.StatusOK
	}
	s1 := MustSender(t, store, clock, "r1")
	s1.Timeout = 10 * time.Second
	done := make(chan error)
	go func() { done <- s1.Tick(ctx) }()
	kbtest.Eventually(t, "first attempt in flight", func() bool { return hook.Requests() == 1 })
	clock.Advance(time.Hour) // r1's lease is over
	s2 := MustSender(t, store, clock, "r2")
	if err := s2.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ds, _ := store.FindAlertDeliveries(ctx, keybrake.DeliveryFilter{AlertID: a.ID})
	atts, _ := store.FindAlertAttempts(ctx, ds[0].ID)
	if ds[0].State != keybrake.DeliveryDelivered || len(atts) != 1 {
		t.Fatalf("delivery %+v with %d attempts, want delivered once", ds[0], len(atts))
	}
	// The stale first request, signed an hour before the receiver checks
	// it, is refused by the signature's tolerance window.
	if got := hook.Acked()[a.ID]; got != 1 || hook.BadSignatures() != 1 {
		t.Fatalf("receiver acknowledged %d times with %d bad signatures, want 1 and 1", got, hook.BadSignatures())
	}
}
