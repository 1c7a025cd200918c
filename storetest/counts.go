package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// newCounted returns a reservation of $0.01 that sends n messages.
func newCounted(keyID, idem string, n int64) *keybrake.Reservation {
	r := NewReservation(keyID, idem, 10_000)
	r.Operation, r.CountKind, r.Count = "twilio.messages.create", keybrake.CountMessages, n
	return r
}

func countsUsed(tb testing.TB, s keybrake.Store, keyID string, now time.Time) map[string]int64 {
	tb.Helper()
	day := map[string]int64{}
	for kind, u := range countsUse(tb, s, keyID, now) {
		day[kind] = u.Day
	}
	return day
}

// countsUse returns what the key used of each kind in the day and month
// of now.
func countsUse(tb testing.TB, s keybrake.Store, keyID string, now time.Time) map[string]keybrake.CountUse {
	tb.Helper()
	cs, ok := s.(keybrake.CountService)
	if !ok {
		tb.Fatalf("%T does not implement keybrake.CountService", s)
	}
	used, err := cs.CountsUsed(context.Background(), keyID, now)
	if err != nil {
		tb.Fatalf("CountsUsed: %v", err)
	}
	return used
}

func testCounts(t *testing.T, open opener) {
	ctx := context.Background()
	newKey := func(t *testing.T, s keybrake.Store, limit int64) {
		k := NewKey("key_c")
		k.Vendor, k.Timezone = keybrake.VendorTwilio, "America/New_York"
		k.CountCaps = keybrake.CountCaps{DailyMessages: &limit}
		MustCreateKey(t, s, k)
	}
	reserve := func(t *testing.T, s keybrake.Store, idem string, n int64, now time.Time) keybrake.ReserveResult {
		t.Helper()
		res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: newCounted("key_c", idem, n), Now: now})
		if err != nil {
			t.Fatalf("Reserve(%s): %v", idem, err)
		}
		return res
	}

	t.Run("RoundTrip", func(t *testing.T) {
		s := open(t)
		newKey(t, s, 7)
		k, err := s.FindKeyByID(ctx, "key_c")
		if err != nil || k.DailyMessages == nil || *k.DailyMessages != 7 || k.DailyEmails != nil || k.DailyCalls != nil {
			t.Fatalf("FindKeyByID: %+v, %v; want daily messages 7 only", k.CountCaps, err)
		}
		five := int64(5)
		k, err = s.UpdateKey(ctx, "key_c", keybrake.KeyUpdate{CountCaps: &keybrake.CountCaps{DailyCalls: &five}}, T0)
		if err != nil || k.DailyMessages != nil || k.DailyCalls == nil || *k.DailyCalls != 5 {
			t.Fatalf("UpdateKey: %+v, %v; want daily calls 5 only", k.CountCaps, err)
		}
		if k, err = s.FindKeyByID(ctx, "key_c"); err != nil || k.DailyCalls == nil || *k.DailyCalls != 5 {
			t.Fatalf("FindKeyByID after update: %+v, %v", k.CountCaps, err)
		}
	})

	t.Run("CapReleaseSettleDay", func(t *testing.T) {
		s := open(t)
		newKey(t, s, 5)
		a := reserve(t, s, "a", 3, T0)
		if a.OverCount != nil || a.Reservation == nil {
			t.Fatalf("reserve 3 of 5: %+v", a)
		}
		if res := reserve(t, s, "b", 3, T0); res.OverCount == nil {
			t.Fatalf("reserve 3 more of 5 passed: %+v", res)
		} else if oc := res.OverCount; oc.Kind != keybrake.CountMessages || oc.Cap != 5 || oc.Used != 3 || oc.Requested != 3 || oc.ResetsAt.IsZero() {
			t.Fatalf("OverCount = %+v", *oc)
		}
		if got := countsUsed(t, s, "key_c", T0)[keybrake.CountMessages]; got != 3 {
			t.Fatalf("used %d, want 3 (a refusal records nothing)", got)
		}
		// A replay over the cap is still a replay.
		if res := reserve(t, s, "a", 3, T0); !res.Replay {
			t.Fatalf("replay of a: %+v", res)
		}
		// Settling never changes the count; releasing gives it back.
		if _, err := s.Settle(ctx, keybrake.SettleArgs{ID: a.Reservation.ID, State: keybrake.StateUncertain, Now: T0}); err != nil {
			t.Fatal(err)
		}
		b := reserve(t, s, "b", 2, T0)
		if b.OverCount != nil {
			t.Fatalf("landing on the cap refused: %+v", b.OverCount)
		}
		if _, err := s.Settle(ctx, keybrake.SettleArgs{ID: b.Reservation.ID, State: keybrake.StateSettled, SettledMicros: 1, Amount: 1, Currency: "usd", Now: T0}); err != nil {
			t.Fatal(err)
		}
		if got := countsUsed(t, s, "key_c", T0)[keybrake.CountMessages]; got != 5 {
			t.Fatalf("used %d after settling, want 5", got)
		}
		if res := reserve(t, s, "c", 1, T0); res.OverCount == nil {
			t.Fatalf("reserve past a full cap passed")
		}
		if _, err := s.Settle(ctx, keybrake.SettleArgs{ID: a.Reservation.ID, State: keybrake.StateReleased, Now: T0}); err != nil {
			t.Fatal(err)
		}
		if got := countsUsed(t, s, "key_c", T0)[keybrake.CountMessages]; got != 2 {
			t.Fatalf("used %d after releasing 3, want 2", got)
		}
		if res := reserve(t, s, "c", 3, T0); res.OverCount != nil {
			t.Fatalf("reserve into the released room refused: %+v", res.OverCount)
		}
		// Another kind is not limited by the message cap.
		r := newCounted("key_c", "e", 100)
		r.CountKind = keybrake.CountEmails
		if res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: r, Now: T0}); err != nil || res.OverCount != nil {
			t.Fatalf("uncapped kind: %+v, %v", res, err)
		}
		// The key's day (New York) ends at 05:00 UTC.
		reset := keybrake.DayReset(T0, mustLoc(t, "America/New_York"))
		if res := reserve(t, s, "d", 1, reset.Add(-time.Microsecond)); res.OverCount == nil {
			t.Fatalf("reserve just before the reset passed")
		}
		if res := reserve(t, s, "d", 5, reset); res.OverCount != nil {
			t.Fatalf("reserve on a new day refused: %+v", res.OverCount)
		}
		if got := countsUsed(t, s, "key_c", reset)[keybrake.CountMessages]; got != 5 {
			t.Fatalf("used %d on the new day, want 5", got)
		}
	})

	t.Run("Concurrent50", func(t *testing.T) {
		s := open(t)
		newKey(t, s, 20)
		var ok, over atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 50)
		start := make(chan struct{})
		for i := range 50 {
			wg.Go(func() {
				<-start
				res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: newCounted("key_c", fmt.Sprintf("idem_%d", i), 1), Now: T0})
				switch {
				case err != nil:
					errs <- err
				case res.OverCount != nil:
					over.Add(1)
				case res.Reservation == nil || res.Replay || res.OverCap != nil || res.Guard != nil:
					errs <- fmt.Errorf("idem_%d: unexpected %+v", i, res)
				default:
					ok.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("Reserve: %v", err)
		}
		if ok.Load() != 20 || over.Load() != 30 {
			t.Fatalf("passed %d, refused %d; want 20 and 30", ok.Load(), over.Load())
		}
		if got := countsUsed(t, s, "key_c", T0)[keybrake.CountMessages]; got != 20 {
			t.Fatalf("used %d, want 20", got)
		}
	})
}

func mustLoc(tb testing.TB, name string) *time.Location {
	tb.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		tb.Fatal(err)
	}
	return loc
}

// testCountsRearm checks that Rearm, which reserves a released
// reservation again on a retry, applies the count caps like Reserve: a
// retry must not send past a full day.
func testCountsRearm(t *testing.T, open opener) {
	ctx := context.Background()
	t.Run("ErrOverCount", func(t *testing.T) {
		s := open(t)
		k := NewKey("key_c")
		k.Vendor = keybrake.VendorTwilio
		k.CountCaps = keybrake.CountCaps{DailyMessages: countPtr(2)}
		MustCreateKey(t, s, k)
		a, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: newCounted("key_c", "a", 1), Now: T0})
		if err != nil || a.Reservation == nil {
			t.Fatalf("reserve a: %+v, %v", a, err)
		}
		MustSettle(t, s, keybrake.SettleArgs{ID: a.Reservation.ID, State: keybrake.StateReleased, UpstreamStatus: 429, Now: T0})
		for _, idem := range []string{"b", "c"} {
			if res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: newCounted("key_c", idem, 1), Now: T0}); err != nil || res.Reservation == nil || res.OverCount != nil {
				t.Fatalf("reserve %s: %+v, %v", idem, res, err)
			}
		}
		res, err := s.Rearm(ctx, keybrake.ReserveArgs{Reservation: newCounted("key_c", "a", 1), Now: T0})
		if err != nil || res.OverCount == nil || res.Reservation != nil {
			t.Fatalf("Rearm past a full day = %+v, %v; want OverCount", res, err)
		}
		if oc := res.OverCount; oc.Kind != keybrake.CountMessages || oc.Cap != 2 || oc.Used != 2 || oc.Requested != 1 {
			t.Fatalf("OverCount = %+v", *oc)
		}
		if got := countsUsed(t, s, "key_c", T0)[keybrake.CountMessages]; got != 2 {
			t.Fatalf("used %d after a refused rearm, want 2", got)
		}
	})
	t.Run("OKCountsTheRetry", func(t *testing.T) {
		s := open(t)
		k := NewKey("key_c")
		k.Vendor = keybrake.VendorTwilio
		k.CountCaps = keybrake.CountCaps{DailyMessages: countPtr(3)}
		MustCreateKey(t, s, k)
		a, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: newCounted("key_c", "a", 1), Now: T0})
		if err != nil || a.Reservation == nil {
			t.Fatalf("reserve a: %+v, %v", a, err)
		}
		MustSettle(t, s, keybrake.SettleArgs{ID: a.Reservation.ID, State: keybrake.StateReleased, UpstreamStatus: 429, Now: T0})
		// The retry counts what it sends now, in the windows of now.
		next := T0.Add(24 * time.Hour)
		res, err := s.Rearm(ctx, keybrake.ReserveArgs{Reservation: newCounted("key_c", "a", 2), Now: next})
		if err != nil || res.Reservation == nil || res.OverCount != nil {
			t.Fatalf("Rearm = %+v, %v", res, err)
		}
		if got := countsUsed(t, s, "key_c", T0)[keybrake.CountMessages]; got != 0 {
			t.Fatalf("the first day still counts %d", got)
		}
		if got := countsUsed(t, s, "key_c", next)[keybrake.CountMessages]; got != 2 {
			t.Fatalf("the retry's day counts %d, want 2", got)
		}
		if res, _ := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: newCounted("key_c", "b", 2), Now: next}); res.OverCount == nil {
			t.Fatalf("2 more on a day with 2 of 3 used passed: %+v", res)
		}
	})
}

func countPtr(n int64) *int64 { return &n }

// testCountsMonthly checks the monthly count caps: the key's calendar
// month in its zone, checked with the daily caps in the same transaction.
func testCountsMonthly(t *testing.T, open opener) {
	ctx := context.Background()
	s := open(t)
	k := NewKey("key_m")
	k.Vendor, k.Timezone = keybrake.VendorResend, "America/New_York"
	k.CountCaps = keybrake.CountCaps{DailyEmails: countPtr(3), MonthlyEmails: countPtr(4)}
	MustCreateKey(t, s, k)
	got, err := s.FindKeyByID(ctx, "key_m")
	if err != nil || got.MonthlyEmails == nil || *got.MonthlyEmails != 4 || got.DailyEmails == nil || *got.DailyEmails != 3 {
		t.Fatalf("FindKeyByID = %+v, %v", got.CountCaps, err)
	}
	loc := mustLoc(t, "America/New_York")
	month := keybrake.MonthReset(T0, loc) // the first of next month, New York
	last := month.Add(-48 * time.Hour)    // two days before: the same month
	reserve := func(idem string, n int64, now time.Time) keybrake.ReserveResult {
		t.Helper()
		r := newCounted("key_m", idem, n)
		r.CountKind = keybrake.CountEmails
		res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: r, Now: now})
		if err != nil {
			t.Fatalf("Reserve(%s): %v", idem, err)
		}
		return res
	}
	if res := reserve("a", 3, last); res.Reservation == nil || res.OverCount != nil {
		t.Fatalf("3 of 3 today, 4 this month: %+v", res)
	}
	if res := reserve("b", 1, last); res.OverCount == nil || res.OverCount.Window != keybrake.WindowDaily {
		t.Fatalf("past the daily cap: %+v", res)
	}
	next := last.Add(24 * time.Hour)
	if res := reserve("b", 2, next); res.OverCount == nil {
		t.Fatalf("5 of 4 this month passed: %+v", res)
	} else if oc := res.OverCount; oc.Window != keybrake.WindowMonthly || oc.Cap != 4 || oc.Used != 3 || oc.Requested != 2 || !oc.ResetsAt.Equal(month) {
		t.Fatalf("OverCount = %+v, want monthly, cap 4, used 3, resets %s", *oc, month)
	}
	if res := reserve("b", 1, next); res.Reservation == nil || res.OverCount != nil {
		t.Fatalf("landing on the monthly cap: %+v", res)
	}
	if u := countsUse(t, s, "key_m", next)[keybrake.CountEmails]; u.Day != 1 || u.Month != 4 {
		t.Fatalf("CountsUsed = %+v, want day 1, month 4", u)
	}
	if res := reserve("c", 1, month.Add(-time.Microsecond)); res.OverCount == nil {
		t.Fatalf("just before the month's reset passed")
	}
	if res := reserve("c", 3, month); res.Reservation == nil || res.OverCount != nil {
		t.Fatalf("a new month: %+v", res)
	}
	if u := countsUse(t, s, "key_m", month)[keybrake.CountEmails]; u.Day != 3 || u.Month != 3 {
		t.Fatalf("CountsUsed in the new month = %+v", u)
	}
}

// testScopeRoundTrip checks that a key's vendor scope is stored,
// replaced and removed.
func testScopeRoundTrip(t *testing.T, open opener) {
	ctx := context.Background()
	s := open(t)
	k := NewKey("key_s")
	k.Vendor = keybrake.VendorTwilio
	k.TwilioScope = &keybrake.TwilioScope{Countries: []string{"US", "CA"}, NumberPrefixes: []string{"+1415"}, From: []string{"+14155550100"}, MessagingServices: []string{"MG0123456789abcdef0123456789abcdef"}}
	MustCreateKey(t, s, k)
	got, err := s.FindKeyByID(ctx, "key_s")
	if err != nil || got.TwilioScope == nil || got.ResendScope != nil || fmt.Sprint(*got.TwilioScope) != fmt.Sprint(*k.TwilioScope) {
		t.Fatalf("FindKeyByID = %+v, %v", got.TwilioScope, err)
	}
	upd := keybrake.KeyUpdate{TwilioScope: &keybrake.TwilioScope{From: []string{"whatsapp:+14155550100"}}}
	if got, err = s.UpdateKey(ctx, "key_s", upd, T0); err != nil || got.TwilioScope == nil || len(got.TwilioScope.Countries) != 0 || got.TwilioScope.From[0] != "whatsapp:+14155550100" {
		t.Fatalf("UpdateKey = %+v, %v", got.TwilioScope, err)
	}
	if got, err = s.UpdateKey(ctx, "key_s", keybrake.KeyUpdate{Label: new(string)}, T0); err != nil || got.TwilioScope == nil {
		t.Fatalf("an update without scope kept %+v, %v", got.TwilioScope, err)
	}
	if got, err = s.UpdateKey(ctx, "key_s", keybrake.KeyUpdate{TwilioScope: &keybrake.TwilioScope{}}, T0); err != nil || got.TwilioScope != nil {
		t.Fatalf("removing the scope: %+v, %v", got.TwilioScope, err)
	}
	if got, err = s.FindKeyByID(ctx, "key_s"); err != nil || got.TwilioScope != nil {
		t.Fatalf("after removing: %+v, %v", got.TwilioScope, err)
	}

	r := NewKey("key_r")
	r.Vendor = keybrake.VendorResend
	r.ResendScope = &keybrake.ResendScope{Senders: []string{"example.com", "billing@example.org"}, RecipientDomains: []string{"xn--bcher-kva.example"}, MaxRecipients: 3}
	MustCreateKey(t, s, r)
	if got, err = s.FindKeyBySecretHash(ctx, r.SecretHash); err != nil || got.ResendScope == nil || got.TwilioScope != nil || fmt.Sprint(*got.ResendScope) != fmt.Sprint(*r.ResendScope) {
		t.Fatalf("FindKeyBySecretHash = %+v, %v", got.ResendScope, err)
	}
}
