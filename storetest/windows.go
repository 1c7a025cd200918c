package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

func testWindows(t *testing.T, open opener) {
	ctx := context.Background()

	t.Run("DailyLocalMidnight", func(t *testing.T) {
		// 23:59 and 00:01 New York time are different days but the same
		// month; in UTC both fall on the 30th, so a UTC store would merge them.
		ny := MustLocation(t, "America/New_York")
		before := time.Date(2026, 11, 29, 23, 59, 0, 0, ny)
		after := time.Date(2026, 11, 30, 0, 1, 0, 0, ny)
		s := open(t)
		MustCreateCappedKey(t, s, "key_ny", "America/New_York", keybrake.Caps{Daily: Ptr(USD(10))})
		a := MustReserve(t, s, "key_ny", "idem_1", USD(10), before)
		if a.Day != "2026-11-29" || a.Month != "2026-11" {
			t.Fatalf("buckets = %s %s, want 2026-11-29 2026-11", a.Day, a.Month)
		}
		oc := MustOverCap(t, s, "key_ny", "idem_2", USD(1), before.Add(59*time.Second))
		wantTimePtr(t, "ResetsAt", oc.ResetsAt, ptrTime(time.Date(2026, 11, 30, 0, 0, 0, 0, ny)))
		b := MustReserve(t, s, "key_ny", "idem_3", USD(10), after)
		if b.Day != "2026-11-30" || b.Month != "2026-11" {
			t.Fatalf("buckets = %s %s, want 2026-11-30 2026-11", b.Day, b.Month)
		}
		wantSpend(t, MustSpend(t, s, "key_ny", before, ny), keybrake.Spend{Day: USD(10), Month: USD(20), Total: USD(20)})
		wantSpend(t, MustSpend(t, s, "key_ny", after, ny), keybrake.Spend{Day: USD(10), Month: USD(20), Total: USD(20)})
	})
	t.Run("DayFollowsKeyZoneNotUTC", func(t *testing.T) {
		// 03:00 UTC on the 30th is still the 29th in New York.
		s := open(t)
		MustCreateCappedKey(t, s, "key_ny", "America/New_York", nil0())
		r := MustReserve(t, s, "key_ny", "idem_1", USD(1), time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC))
		if r.Day != "2026-11-29" {
			t.Fatalf("Day = %s, want 2026-11-29", r.Day)
		}
		sp, err := s.Spend(ctx, "key_ny", "2026-11-29", "2026-11")
		if err != nil {
			t.Fatalf("Spend: %v", err)
		}
		wantSpend(t, sp, keybrake.Spend{Day: USD(1), Month: USD(1), Total: USD(1)})
	})
	t.Run("MonthlyRollover", func(t *testing.T) {
		tokyo := MustLocation(t, "Asia/Tokyo")
		before := time.Date(2026, 11, 30, 23, 59, 0, 0, tokyo)
		after := time.Date(2026, 12, 1, 0, 1, 0, 0, tokyo)
		s := open(t)
		MustCreateCappedKey(t, s, "key_jp", "Asia/Tokyo", keybrake.Caps{Monthly: Ptr(USD(10))})
		a := MustReserve(t, s, "key_jp", "idem_1", USD(10), before)
		if a.Day != "2026-11-30" || a.Month != "2026-11" {
			t.Fatalf("buckets = %s %s, want 2026-11-30 2026-11", a.Day, a.Month)
		}
		oc := MustOverCap(t, s, "key_jp", "idem_2", 1, before)
		wantTimePtr(t, "ResetsAt", oc.ResetsAt, ptrTime(time.Date(2026, 12, 1, 0, 0, 0, 0, tokyo)))
		b := MustReserve(t, s, "key_jp", "idem_3", USD(10), after)
		if b.Day != "2026-12-01" || b.Month != "2026-12" {
			t.Fatalf("buckets = %s %s, want 2026-12-01 2026-12", b.Day, b.Month)
		}
		wantSpend(t, MustSpend(t, s, "key_jp", before, tokyo), keybrake.Spend{Day: USD(10), Month: USD(10), Total: USD(20)})
		wantSpend(t, MustSpend(t, s, "key_jp", after, tokyo), keybrake.Spend{Day: USD(10), Month: USD(10), Total: USD(20)})
	})
	t.Run("YearRollover", func(t *testing.T) {
		tokyo := MustLocation(t, "Asia/Tokyo")
		s := open(t)
		MustCreateCappedKey(t, s, "key_jp", "Asia/Tokyo", keybrake.Caps{Monthly: Ptr(USD(10))})
		at := time.Date(2026, 12, 31, 23, 0, 0, 0, tokyo)
		MustReserve(t, s, "key_jp", "idem_1", USD(10), at)
		oc := MustOverCap(t, s, "key_jp", "idem_2", 1, at)
		wantTimePtr(t, "ResetsAt", oc.ResetsAt, ptrTime(time.Date(2027, 1, 1, 0, 0, 0, 0, tokyo)))
		r := MustReserve(t, s, "key_jp", "idem_2", USD(10), time.Date(2027, 1, 1, 0, 0, 0, 0, tokyo))
		if r.Month != "2027-01" {
			t.Fatalf("Month = %s, want 2027-01", r.Month)
		}
	})
	t.Run("TotalNeverResets", func(t *testing.T) {
		s := open(t)
		MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: Ptr(USD(10))})
		MustReserve(t, s, "key_a", "idem_1", USD(10), T0)
		oc := MustOverCap(t, s, "key_a", "idem_2", 1, T0.AddDate(1, 0, 0))
		if oc.Window != keybrake.WindowTotal || oc.ResetsAt != nil || oc.Spent != USD(10) {
			t.Fatalf("OverCap = %+v", *oc)
		}
	})
	t.Run("DSTDay", func(t *testing.T) {
		// 2026-11-01 is 25 hours long in New York; both ends are one day.
		ny := MustLocation(t, "America/New_York")
		s := open(t)
		MustCreateCappedKey(t, s, "key_ny", "America/New_York", keybrake.Caps{Daily: Ptr(USD(2))})
		MustReserve(t, s, "key_ny", "idem_1", USD(1), time.Date(2026, 11, 1, 0, 30, 0, 0, ny))
		MustReserve(t, s, "key_ny", "idem_2", USD(1), time.Date(2026, 11, 1, 23, 30, 0, 0, ny))
		oc := MustOverCap(t, s, "key_ny", "idem_3", 1, time.Date(2026, 11, 1, 23, 59, 0, 0, ny))
		wantTimePtr(t, "ResetsAt", oc.ResetsAt, ptrTime(time.Date(2026, 11, 2, 0, 0, 0, 0, ny)))
	})

	t.Run("Spend", func(t *testing.T) {
		t.Run("OK", func(t *testing.T) {
			s := open(t)
			MustCreateKey(t, s, NewKey("key_a"))
			MustCreateKey(t, s, NewKey("key_b"))
			day2 := T0.AddDate(0, 0, 1)
			month2 := T0.AddDate(0, 1, 0)
			MustReserve(t, s, "key_a", "idem_1", USD(1), T0)
			u := MustReserve(t, s, "key_a", "idem_2", USD(2), T0)
			MustSettle(t, s, keybrake.SettleArgs{ID: u.ID, State: keybrake.StateUncertain, Now: T0})
			MustReserve(t, s, "key_a", "idem_3", USD(4), day2)
			MustReserve(t, s, "key_a", "idem_4", USD(8), month2)
			MustReserve(t, s, "key_b", "idem_1", USD(100), T0)
			wantSpend(t, MustSpend(t, s, "key_a", T0, time.UTC), keybrake.Spend{Day: USD(3), Month: USD(7), Total: USD(15), Uncertain: USD(2)})
			wantSpend(t, MustSpend(t, s, "key_a", day2, time.UTC), keybrake.Spend{Day: USD(4), Month: USD(7), Total: USD(15), Uncertain: USD(2)})
			wantSpend(t, MustSpend(t, s, "key_a", month2, time.UTC), keybrake.Spend{Day: USD(8), Month: USD(8), Total: USD(15), Uncertain: USD(2)})
			sp, err := s.Spend(ctx, "key_a", "1999-01-01", "1999-01")
			if err != nil {
				t.Fatalf("Spend: %v", err)
			}
			wantSpend(t, sp, keybrake.Spend{Total: USD(15), Uncertain: USD(2)})
		})
		t.Run("Empty", func(t *testing.T) {
			s := open(t)
			MustCreateKey(t, s, NewKey("key_a"))
			wantSpend(t, MustSpend(t, s, "key_a", T0, time.UTC), keybrake.Spend{})
		})
		t.Run("UnknownKey", func(t *testing.T) {
			s := open(t)
			wantSpend(t, MustSpend(t, s, "key_missing", T0, time.UTC), keybrake.Spend{})
		})
	})
}

func ptrTime(t time.Time) *time.Time { return &t }

func nil0() keybrake.Caps { return keybrake.Caps{} }
