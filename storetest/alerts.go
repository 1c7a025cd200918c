package storetest

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// MustAlertKeys returns the alert keys of keyID's alerts, sorted.
func MustAlertKeys(tb testing.TB, s keybrake.Store, keyID string) []string {
	tb.Helper()
	as, err := s.FindAlerts(context.Background(), keybrake.AlertFilter{KeyID: keyID, Limit: 1000})
	if err != nil {
		tb.Fatalf("FindAlerts(%s): %v", keyID, err)
	}
	out := []string{}
	for _, a := range as {
		out = append(out, a.AlertKey)
	}
	sort.Strings(out)
	return out
}

// wantAlertKeys fails the test unless keyID's alerts are exactly want.
func wantAlertKeys(tb testing.TB, s keybrake.Store, keyID string, want ...string) {
	tb.Helper()
	got := MustAlertKeys(tb, s, keyID)
	sort.Strings(want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		tb.Fatalf("alerts of %s = %q, want %q", keyID, got, want)
	}
}

// MustCreateEndpoint stores an enabled endpoint for keyID ("" for all).
func MustCreateEndpoint(tb testing.TB, s keybrake.Store, id, keyID string) *keybrake.AlertEndpoint {
	tb.Helper()
	e := &keybrake.AlertEndpoint{ID: id, URL: "http://127.0.0.1:1/" + id, Format: keybrake.FormatKeybrake, KeyID: keyID,
		Secret: "whsec_" + id, Enabled: true, CreatedAt: T0}
	if err := s.CreateAlertEndpoint(context.Background(), e); err != nil {
		tb.Fatalf("CreateAlertEndpoint(%s): %v", id, err)
	}
	return e
}

func testAlerts(t *testing.T, open opener) {
	ctx := context.Background()
	day := T0.Format("2006-01-02")
	month := T0.Format("2006-01")
	release := func(t *testing.T, s keybrake.Store, r *keybrake.Reservation) {
		t.Helper()
		MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateReleased, Now: T0})
	}

	t.Run("DefaultRules", func(t *testing.T) {
		s := open(t)
		rules, err := s.FindAlertRules(ctx, "", false)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range rules {
			got = append(got, fmt.Sprintf("%s/%d/%d/%d/%d/%d", r.Kind, r.Percent, r.Hours, r.Count, r.Seconds, r.Minutes))
		}
		sort.Strings(got)
		want := "[amount_mismatch/0/0/0/0/0 approval_required/0/0/0/0/0 drift/0/0/0/0/0 expiring/0/24/0/0/0 refusal_burst/0/0/10/60/0 threshold/100/0/0/0/0 threshold/50/0/0/0/0 threshold/80/0/0/0/0 uncertain/0/0/0/0/15]"
		if fmt.Sprint(got) != want {
			t.Fatalf("default rules = %v, want %s", got, want)
		}
	})

	t.Run("ThresholdOncePerBucket", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Daily: Ptr(USD(10))})
		MustReserve(t, s, "key_a", "i1", USD(4), T0)
		wantAlertKeys(t, s, "key_a")
		r := MustReserve(t, s, "key_a", "i2", USD(1), T0)
		wantAlertKeys(t, s, "key_a", "threshold:key_a:daily:"+day+":50")
		// Falling back under and crossing again fires nothing new.
		release(t, s, r)
		MustReserve(t, s, "key_a", "i3", USD(1), T0)
		wantAlertKeys(t, s, "key_a", "threshold:key_a:daily:"+day+":50")
		// One charge crossing two thresholds fires both.
		MustReserve(t, s, "key_a", "i4", USD(5), T0)
		wantAlertKeys(t, s, "key_a", "threshold:key_a:daily:"+day+":50", "threshold:key_a:daily:"+day+":80", "threshold:key_a:daily:"+day+":100")
		// The next day is a new period.
		next := T0.Add(24 * time.Hour)
		MustReserve(t, s, "key_a", "i5", USD(6), next)
		wantAlertKeys(t, s, "key_a", "threshold:key_a:daily:"+day+":50", "threshold:key_a:daily:"+day+":80", "threshold:key_a:daily:"+day+":100",
			"threshold:key_a:daily:"+next.Format("2006-01-02")+":50")
	})

	t.Run("ThresholdEveryCappedWindow", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Daily: Ptr(USD(100)), Monthly: Ptr(USD(10)), Total: Ptr(USD(20))})
		MustReserve(t, s, "key_a", "i1", USD(10), T0)
		wantAlertKeys(t, s, "key_a",
			"threshold:key_a:monthly:"+month+":50", "threshold:key_a:monthly:"+month+":80", "threshold:key_a:monthly:"+month+":100",
			"threshold:key_a:total::50")
		as, err := s.FindAlerts(ctx, keybrake.AlertFilter{KeyID: "key_a", Kind: keybrake.AlertThreshold})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			if a.AlertKey == "threshold:key_a:total::50" && (a.Cap != USD(20) || a.Threshold != USD(10) || a.Spent != USD(10) || a.Window != "total" || a.Percent != 50) {
				t.Fatalf("total alert = %+v", a)
			}
		}
	})

	t.Run("ThresholdRoundsUp", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: Ptr(3)})
		MustReserve(t, s, "key_a", "i1", 1, T0)
		wantAlertKeys(t, s, "key_a") // 1 of 3 is under 50%
		MustReserve(t, s, "key_a", "i2", 1, T0)
		wantAlertKeys(t, s, "key_a", "threshold:key_a:total::50") // 2 ≥ ceil(1.5)
	})

	// Every rule of every percent fires at the reservation that reaches its
	// threshold exactly, whatever the step: a store may skip looking for
	// alerts when no counter crossed a whole percent of its cap (SQLite
	// does), never when one did.
	t.Run("ThresholdEveryPercentAtItsCrossing", func(t *testing.T) {
		s := open(t)
		caps := map[string]keybrake.Caps{
			"key_d": {Daily: Ptr(keybrake.Micros(37))},
			"key_m": {Monthly: Ptr(keybrake.Micros(101))},
			"key_t": {Total: Ptr(keybrake.Micros(7))},
		}
		percents := []int{1, 2, 33, 34, 50, 99, 100}
		steps := []keybrake.Micros{1, 2, 1, 3, 1, 1, 5, 2, 1, 4, 1, 1, 7, 1, 2, 1, 1, 3, 9, 1, 1, 1, 13, 1, 2, 1}
		for id, c := range caps {
			MustCreateCappedKey(t, s, id, "UTC", c)
			for _, p := range percents {
				if err := s.CreateAlertRule(ctx, &keybrake.AlertRule{KeyID: id, Kind: keybrake.AlertThreshold, Percent: p, Enabled: true, CreatedAt: T0}); err != nil {
					t.Fatal(err)
				}
			}
			window, bucket, capM := "daily", day, c.Daily
			if c.Monthly != nil {
				window, bucket, capM = "monthly", month, c.Monthly
			} else if c.Total != nil {
				window, bucket, capM = "total", "", c.Total
			}
			var spent keybrake.Micros
			want := []string{}
			for i := 0; spent < *capM; i++ {
				m := steps[i%len(steps)]
				if i >= 3*len(steps) {
					m = 1
				}
				res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation(id, fmt.Sprintf("i%d", i), m), Now: T0})
				if err != nil {
					t.Fatal(err)
				}
				if res.OverCap != nil {
					continue
				}
				before := spent
				spent += m
				for _, p := range percents {
					threshold := (*capM*keybrake.Micros(p) + 99) / 100
					if before < threshold && spent >= threshold {
						want = append(want, fmt.Sprintf("threshold:%s:%s:%s:%d", id, window, bucket, p))
					}
				}
				wantAlertKeys(t, s, id, want...)
			}
			if len(want) != len(percents) {
				t.Fatalf("%s: %d alerts at its cap, want one per rule (%d)", id, len(want), len(percents))
			}
		}
	})

	// A hold raised on a later day or month moves there whole
	// (keybrake.RaiseBuckets): the move itself may carry that window's
	// counter across a threshold, and its alert must fire, not only a
	// crossing by the raise's difference. Else a hold made at 23:30 and
	// raised after midnight moves nearly a whole daily cap unannounced.
	t.Run("ThresholdOnAHoldMovedByARaise", func(t *testing.T) {
		s := open(t)
		// (a raise of a hold also fires amount_mismatch: only thresholds here)
		wantThresholdKeys := func(want ...string) {
			t.Helper()
			as, err := s.FindAlerts(ctx, keybrake.AlertFilter{KeyID: "key_a", Kind: keybrake.AlertThreshold, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			got := []string{}
			for _, a := range as {
				got = append(got, a.AlertKey)
			}
			sort.Strings(got)
			sort.Strings(want)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("threshold alerts = %q, want %q", got, want)
			}
		}
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Daily: Ptr(USD(10)), Monthly: Ptr(USD(12))})
		monthEnd := time.Date(2026, 11, 30, 23, 30, 0, 0, time.UTC)
		next := monthEnd.Add(time.Hour) // 2026-12-01
		r := MustHold(t, s, "key_a", "idem_1", "pi_1", USD(9), monthEnd, monthEnd.Add(48*time.Hour))
		before := []string{"threshold:key_a:daily:2026-11-30:50", "threshold:key_a:daily:2026-11-30:80", "threshold:key_a:monthly:2026-11:50"}
		wantThresholdKeys(before...)
		res, err := s.RaiseHold(ctx, keybrake.RaiseArgs{ID: r.ID, Amount: 950, Currency: "usd", Micros: USD(95) / 10, Now: next})
		if err != nil || res.OverCap != nil || res.Reservation.Day != "2026-12-01" {
			t.Fatalf("raise to $9.50 on the next day = %+v, %v", res, err)
		}
		// $9.50 of the new day's $10 and the new month's $12 is movable.
		wantThresholdKeys(append(before,
			"threshold:key_a:daily:2026-12-01:50", "threshold:key_a:daily:2026-12-01:80", "threshold:key_a:monthly:2026-12:50")...)
		as, err := s.FindAlerts(ctx, keybrake.AlertFilter{KeyID: "key_a", Kind: keybrake.AlertThreshold})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			if a.Bucket == "2026-12-01" && (a.Cap != USD(10) || a.Spent < USD(9)) {
				t.Fatalf("moved hold's alert = %+v", a)
			}
		}
		// The raise's own difference crossing a threshold fires as before.
		res, err = s.RaiseHold(ctx, keybrake.RaiseArgs{ID: r.ID, Amount: 1000, Currency: "usd", Micros: USD(10), Now: next})
		if err != nil || res.OverCap != nil {
			t.Fatalf("raise to $10 = %+v, %v", res, err)
		}
		wantThresholdKeys(append(before,
			"threshold:key_a:daily:2026-12-01:50", "threshold:key_a:daily:2026-12-01:80", "threshold:key_a:daily:2026-12-01:100",
			"threshold:key_a:monthly:2026-12:50", "threshold:key_a:monthly:2026-12:80")...)
	})

	t.Run("OwnRulesReplaceDefaults", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Daily: Ptr(USD(10)), Total: Ptr(USD(10))})
		MustCreateCappedKey(t, s, "key_b", "UTC", keybrake.Caps{Daily: Ptr(USD(10))})
		if err := s.CreateAlertRule(ctx, &keybrake.AlertRule{KeyID: "key_a", Kind: keybrake.AlertThreshold, Window: keybrake.WindowDaily, Percent: 90, Enabled: true, CreatedAt: T0}); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateAlertRule(ctx, &keybrake.AlertRule{KeyID: "key_b", Kind: keybrake.AlertThreshold, Percent: 10, Enabled: false, CreatedAt: T0}); err != nil {
			t.Fatal(err)
		}
		MustReserve(t, s, "key_a", "i1", USD(85)/10, T0)
		wantAlertKeys(t, s, "key_a")
		MustReserve(t, s, "key_a", "i2", USD(1), T0)
		wantAlertKeys(t, s, "key_a", "threshold:key_a:daily:"+day+":90")
		MustReserve(t, s, "key_b", "i1", USD(10), T0)
		wantAlertKeys(t, s, "key_b") // a disabled own rule silences the kind
	})

	t.Run("SettleAboveReservation", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Daily: Ptr(USD(10))})
		r := MustReserve(t, s, "key_a", "i1", USD(1), T0)
		MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateSettled, SettledMicros: USD(9), Amount: 900, Currency: "usd", Now: T0})
		wantAlertKeys(t, s, "key_a", "amount_mismatch:"+r.ID, "threshold:key_a:daily:"+day+":50", "threshold:key_a:daily:"+day+":80")
		as, err := s.FindAlerts(ctx, keybrake.AlertFilter{KeyID: "key_a", Kind: keybrake.AlertAmountMismatch})
		if err != nil || len(as) != 1 || as[0].Spent != USD(9) || as[0].Reserved != USD(1) || as[0].ReservationID != r.ID {
			t.Fatalf("mismatch alerts = %+v, %v", as, err)
		}
		// Settling below the reservation is routine: no alert.
		r2 := MustReserve(t, s, "key_a", "i2", USD(1)/2, T0)
		MustSettle(t, s, keybrake.SettleArgs{ID: r2.ID, State: keybrake.StateSettled, SettledMicros: USD(1) / 4, Now: T0})
		if got := MustAlertKeys(t, s, "key_a"); len(got) != 3 {
			t.Fatalf("alerts = %q", got)
		}
	})

	t.Run("RefusalBurst", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		var es []*keybrake.Event
		for i := 0; i < 12; i++ {
			es = append(es, &keybrake.Event{KeyID: "key_a", Time: T0.Add(time.Duration(i) * time.Second), Decision: keybrake.DecisionDeny, Reason: "over cap"})
		}
		if err := s.AddEvents(ctx, es[:9]); err != nil {
			t.Fatal(err)
		}
		wantAlertKeys(t, s, "key_a")
		if err := s.AddEvents(ctx, es[9:]); err != nil {
			t.Fatal(err)
		}
		got := MustAlertKeys(t, s, "key_a")
		if len(got) != 1 || got[0] != fmt.Sprintf("refusal_burst:key_a:60:%d", T0.Add(9*time.Second).UnixMicro()/60_000_000) {
			t.Fatalf("alerts = %q", got)
		}
	})

	t.Run("ScanExpiringAndUncertain", func(t *testing.T) {
		s := open(t)
		k := NewKey("key_a")
		exp := T0.Add(30 * time.Hour)
		k.ExpiresAt = &exp
		k.Caps = keybrake.Caps{Total: Ptr(USD(100))}
		MustCreateKey(t, s, k)
		r := MustReserve(t, s, "key_a", "i1", USD(1), T0)
		MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateUncertain, Now: T0})
		n, err := s.ScanAlerts(ctx, T0.Add(14*time.Minute))
		if err != nil || n != 0 {
			t.Fatalf("ScanAlerts early = %d, %v", n, err)
		}
		n, err = s.ScanAlerts(ctx, T0.Add(6*time.Hour))
		if err != nil || n != 2 {
			t.Fatalf("ScanAlerts = %d, %v; want 2", n, err)
		}
		n, err = s.ScanAlerts(ctx, T0.Add(7*time.Hour))
		if err != nil || n != 0 {
			t.Fatalf("ScanAlerts again = %d, %v; want 0", n, err)
		}
		wantAlertKeys(t, s, "key_a", fmt.Sprintf("expiring:key_a:%d:24", exp.UnixMicro()), "uncertain:"+r.ID+":15")
	})

	t.Run("EnqueueOnceAndFanOut", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		MustCreateKey(t, s, NewKey("key_b"))
		MustCreateEndpoint(t, s, "we_all", "")
		MustCreateEndpoint(t, s, "we_b", "key_b")
		a := &keybrake.Alert{AlertKey: "test:1", Kind: keybrake.AlertTest, KeyID: "key_a", CreatedAt: T0}
		if ok, err := s.EnqueueAlert(ctx, a); !ok || err != nil || a.ID == "" {
			t.Fatalf("EnqueueAlert = %v, %v", ok, err)
		}
		if ok, err := s.EnqueueAlert(ctx, &keybrake.Alert{AlertKey: "test:1", Kind: keybrake.AlertTest, KeyID: "key_a", CreatedAt: T0}); ok || err != nil {
			t.Fatalf("EnqueueAlert again = %v, %v; want false", ok, err)
		}
		ds, err := s.FindAlertDeliveries(ctx, keybrake.DeliveryFilter{AlertID: a.ID})
		if err != nil || len(ds) != 1 || ds[0].EndpointID != "we_all" || ds[0].State != keybrake.DeliveryPending || ds[0].Alert.ID != a.ID {
			t.Fatalf("deliveries = %+v, %v", ds, err)
		}
		b := &keybrake.Alert{AlertKey: "test:2", Kind: keybrake.AlertTest, KeyID: "key_b", EndpointID: "we_b", CreatedAt: T0}
		if _, err := s.EnqueueAlert(ctx, b); err != nil {
			t.Fatal(err)
		}
		ds, err = s.FindAlertDeliveries(ctx, keybrake.DeliveryFilter{AlertID: b.ID})
		if err != nil || len(ds) != 1 || ds[0].EndpointID != "we_b" {
			t.Fatalf("targeted deliveries = %+v, %v", ds, err)
		}
		claimed, err := s.ClaimAlerts(ctx, 10)
		if err != nil || len(claimed) != 2 {
			t.Fatalf("ClaimAlerts = %d, %v", len(claimed), err)
		}
		if again, err := s.ClaimAlerts(ctx, 10); err != nil || len(again) != 0 {
			t.Fatalf("ClaimAlerts again = %d, %v", len(again), err)
		}
	})

	t.Run("DeliveryLifecycle", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		MustCreateEndpoint(t, s, "we_1", "")
		a := &keybrake.Alert{AlertKey: "test:1", Kind: keybrake.AlertTest, KeyID: "key_a", CreatedAt: T0}
		if _, err := s.EnqueueAlert(ctx, a); err != nil {
			t.Fatal(err)
		}
		ds, err := s.LeaseAlertDeliveries(ctx, "r1", T0, T0.Add(time.Minute), 10)
		if err != nil || len(ds) != 1 {
			t.Fatalf("lease = %d, %v", len(ds), err)
		}
		d := ds[0]
		if d.Alert == nil || d.Alert.ID != a.ID || d.Endpoint == nil || d.Endpoint.Secret != "whsec_we_1" || d.LeaseOwner != "r1" {
			t.Fatalf("leased delivery = %+v", d)
		}
		if again, _ := s.LeaseAlertDeliveries(ctx, "r2", T0.Add(time.Second), T0.Add(time.Minute), 10); len(again) != 0 {
			t.Fatalf("a live lease was taken: %+v", again)
		}
		_, err = s.RecordAlertAttempt(ctx, keybrake.AttemptArgs{DeliveryID: d.ID, Owner: "r2", At: T0, State: keybrake.DeliveryDelivered})
		wantCode(t, err, keybrake.ECONFLICT)
		_, err = s.RecordAlertAttempt(ctx, keybrake.AttemptArgs{DeliveryID: "ald_nope", Owner: "r1", At: T0, State: keybrake.DeliveryDelivered})
		wantCode(t, err, keybrake.ENOTFOUND)

		retry := T0.Add(10 * time.Second)
		got, err := s.RecordAlertAttempt(ctx, keybrake.AttemptArgs{DeliveryID: d.ID, Owner: "r1", At: T0.Add(time.Second), Status: 500,
			Latency: 1500 * time.Microsecond, Error: "HTTP 500", State: keybrake.DeliveryPending, NextAt: retry})
		if err != nil || got.State != keybrake.DeliveryPending || got.Attempts != 1 || got.LastStatus != 500 {
			t.Fatalf("record retry = %+v, %v", got, err)
		}
		wantTime(t, "next_attempt_at", got.NextAttemptAt, retry)
		wantTimePtr(t, "first_attempt_at", got.FirstAttemptAt, ptrTime(T0.Add(time.Second)))
		if early, _ := s.LeaseAlertDeliveries(ctx, "r1", retry.Add(-time.Microsecond), retry.Add(time.Minute), 10); len(early) != 0 {
			t.Fatalf("leased before its retry time")
		}
		// A lease that ends at now has expired: another sender takes it, and
		// the first can no longer record.
		if ds, _ = s.LeaseAlertDeliveries(ctx, "r1", retry, retry.Add(time.Minute), 10); len(ds) != 1 {
			t.Fatalf("retry not leased")
		}
		if ds, _ = s.LeaseAlertDeliveries(ctx, "r2", retry.Add(time.Minute), retry.Add(2*time.Minute), 10); len(ds) != 1 {
			t.Fatalf("expired lease not taken")
		}
		_, err = s.RecordAlertAttempt(ctx, keybrake.AttemptArgs{DeliveryID: d.ID, Owner: "r1", At: retry, State: keybrake.DeliveryDelivered})
		wantCode(t, err, keybrake.ECONFLICT)
		got, err = s.RecordAlertAttempt(ctx, keybrake.AttemptArgs{DeliveryID: d.ID, Owner: "r2", At: retry.Add(time.Minute), Status: 200, State: keybrake.DeliveryDelivered})
		if err != nil || got.State != keybrake.DeliveryDelivered || got.Attempts != 2 {
			t.Fatalf("record delivered = %+v, %v", got, err)
		}
		wantTimePtr(t, "first_attempt_at", got.FirstAttemptAt, ptrTime(T0.Add(time.Second)))
		_, err = s.RecordAlertAttempt(ctx, keybrake.AttemptArgs{DeliveryID: d.ID, Owner: "r2", At: retry, State: keybrake.DeliveryDelivered})
		wantCode(t, err, keybrake.ECONFLICT)
		if ds, _ = s.LeaseAlertDeliveries(ctx, "r3", retry.Add(time.Hour), retry.Add(2*time.Hour), 10); len(ds) != 0 {
			t.Fatalf("a delivered delivery was leased")
		}
		atts, err := s.FindAlertAttempts(ctx, d.ID)
		if err != nil || len(atts) != 2 || atts[0].N != 1 || atts[0].Status != 500 || atts[0].Latency != 1500*time.Microsecond || atts[0].Error != "HTTP 500" || atts[1].Status != 200 {
			t.Fatalf("attempts = %+v, %v", atts, err)
		}
		wantTime(t, "attempt at", atts[0].At, T0.Add(time.Second))
		if byID, err := s.FindAlertDeliveries(ctx, keybrake.DeliveryFilter{ID: d.ID}); err != nil || len(byID) != 1 || byID[0].Attempts != 2 {
			t.Fatalf("FindAlertDeliveries by ID = %+v, %v", byID, err)
		}
	})

	t.Run("DeleteEndpointFailsPending", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		MustCreateEndpoint(t, s, "we_1", "")
		a := &keybrake.Alert{AlertKey: "test:1", Kind: keybrake.AlertTest, KeyID: "key_a", CreatedAt: T0}
		if _, err := s.EnqueueAlert(ctx, a); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteAlertEndpoint(ctx, "we_1", T0); err != nil {
			t.Fatal(err)
		}
		wantCode(t, s.DeleteAlertEndpoint(ctx, "we_1", T0), keybrake.ENOTFOUND)
		ds, err := s.FindAlertDeliveries(ctx, keybrake.DeliveryFilter{KeyID: "key_a"})
		if err != nil || len(ds) != 1 || ds[0].State != keybrake.DeliveryFailed || ds[0].LastError != "endpoint deleted" {
			t.Fatalf("deliveries = %+v, %v", ds, err)
		}
	})

	t.Run("RulesAndEndpointsCRUD", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		wantCode(t, s.CreateAlertRule(ctx, &keybrake.AlertRule{Kind: keybrake.AlertThreshold, Percent: 0}), keybrake.EINVALID)
		wantCode(t, s.CreateAlertRule(ctx, &keybrake.AlertRule{KeyID: "key_nope", Kind: keybrake.AlertThreshold, Percent: 10}), keybrake.ENOTFOUND)
		r := &keybrake.AlertRule{KeyID: "key_a", Kind: keybrake.AlertRefusalBurst, Count: 3, Seconds: 10, Enabled: true, CreatedAt: T0}
		if err := s.CreateAlertRule(ctx, r); err != nil {
			t.Fatal(err)
		}
		n := 0
		got, err := s.UpdateAlertRule(ctx, r.ID, keybrake.AlertRuleUpdate{Count: &n}, T0)
		wantCode(t, err, keybrake.EINVALID)
		n = 5
		if got, err = s.UpdateAlertRule(ctx, r.ID, keybrake.AlertRuleUpdate{Count: &n}, T0.Add(time.Second)); err != nil || got.Count != 5 || got.Seconds != 10 {
			t.Fatalf("UpdateAlertRule = %+v, %v", got, err)
		}
		rules, err := s.FindAlertRules(ctx, "key_a", false)
		if err != nil || len(rules) != 1 || rules[0].Count != 5 {
			t.Fatalf("FindAlertRules = %+v, %v", rules, err)
		}
		wantTime(t, "updated_at", rules[0].UpdatedAt, T0.Add(time.Second))
		if all, _ := s.FindAlertRules(ctx, "", true); len(all) != 10 {
			t.Fatalf("all rules = %d, want 10", len(all))
		}
		if err := s.DeleteAlertRule(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
		wantCode(t, s.DeleteAlertRule(ctx, r.ID), keybrake.ENOTFOUND)
		_, err = s.UpdateAlertRule(ctx, r.ID, keybrake.AlertRuleUpdate{}, T0)
		wantCode(t, err, keybrake.ENOTFOUND)

		e := MustCreateEndpoint(t, s, "", "key_a")
		off, url := false, "http://127.0.0.1:2/x"
		got2, err := s.UpdateAlertEndpoint(ctx, e.ID, keybrake.AlertEndpointUpdate{Enabled: &off, URL: &url}, T0)
		if err != nil || got2.Enabled || got2.URL != url || got2.Secret != e.Secret {
			t.Fatalf("UpdateAlertEndpoint = %+v, %v", got2, err)
		}
		found, err := s.FindAlertEndpointByID(ctx, e.ID)
		if err != nil || found.URL != url || found.KeyID != "key_a" {
			t.Fatalf("FindAlertEndpointByID = %+v, %v", found, err)
		}
		// A disabled endpoint gets no deliveries.
		a := &keybrake.Alert{AlertKey: "test:1", Kind: keybrake.AlertTest, KeyID: "key_a", CreatedAt: T0}
		if _, err := s.EnqueueAlert(ctx, a); err != nil {
			t.Fatal(err)
		}
		if ds, _ := s.FindAlertDeliveries(ctx, keybrake.DeliveryFilter{}); len(ds) != 0 {
			t.Fatalf("disabled endpoint got %d deliveries", len(ds))
		}
		_, err = s.FindAlertEndpointByID(ctx, "we_nope")
		wantCode(t, err, keybrake.ENOTFOUND)
	})

	t.Run("ConcurrentCrossingFiresOnce", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Daily: Ptr(USD(100))})
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; i < 15; i++ {
					_, _ = s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("key_a", fmt.Sprintf("g%d-%d", g, i), USD(1)), Now: T0})
				}
			}(g)
		}
		wg.Wait()
		wantAlertKeys(t, s, "key_a", "threshold:key_a:daily:"+day+":50", "threshold:key_a:daily:"+day+":80", "threshold:key_a:daily:"+day+":100")
	})
}
