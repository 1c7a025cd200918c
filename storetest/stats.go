package storetest

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// testStats checks the console's summaries (keybrake.StatsService) and the
// audit log's filters.
func testStats(t *testing.T, open opener) {
	ctx := context.Background()
	t.Run("CountEvents", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		MustCreateKey(t, s, NewKey("key_b"))
		add := func(key string, at time.Time, decision, reason string) {
			e := NewEvent(key, at, 1)
			e.Decision, e.Reason = decision, reason
			MustAddEvent(t, s, e)
		}
		from, to := T0, T0.Add(24*time.Hour)
		add("key_a", from.Add(-time.Microsecond), keybrake.DecisionAllow, "") // before the range
		add("key_a", from, keybrake.DecisionAllow, "")
		add("key_a", from.Add(time.Hour), keybrake.DecisionAllow, "")
		add("key_a", from.Add(time.Hour), keybrake.DecisionReplay, "")
		add("key_a", from.Add(time.Hour), keybrake.DecisionResolve, "settled after replay")
		add("key_a", from.Add(2*time.Hour), keybrake.DecisionDeny, "keybrake refused charges.create: $10.00 would exceed the daily cap of $25.00 on vault key key_a")
		add("key_a", from.Add(2*time.Hour), keybrake.DecisionDeny, "keybrake refused charges.create: $60.00 is over the per-request cap of $50.00 on vault key key_a")
		add("key_a", from.Add(3*time.Hour), keybrake.DecisionDeny, "revoked")
		add("key_a", from.Add(3*time.Hour), keybrake.DecisionDeny, "expired")
		add("key_a", from.Add(3*time.Hour), keybrake.DecisionDeny, "This vault key may not call payouts.create.")
		add("key_b", from.Add(4*time.Hour), keybrake.DecisionDeny, "revoked")
		add("key_b", to, keybrake.DecisionAllow, "") // the range's end is excluded

		for _, tc := range []struct {
			name string
			key  string
			want keybrake.EventCounts
		}{
			{"OneKey", "key_a", keybrake.EventCounts{Calls: 8, Allowed: 2, Replayed: 1, Resolved: 1, RefusedCap: 2, RefusedAuth: 2, RefusedPolicy: 1}},
			{"EveryKey", "", keybrake.EventCounts{Calls: 9, Allowed: 2, Replayed: 1, Resolved: 1, RefusedCap: 2, RefusedAuth: 3, RefusedPolicy: 1}},
			{"NoEvents", "key_c", keybrake.EventCounts{}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got, err := s.CountEvents(ctx, keybrake.StatsFilter{KeyID: tc.key, From: from, To: to})
				if err != nil {
					t.Fatalf("CountEvents: %v", err)
				}
				if got != tc.want {
					t.Fatalf("CountEvents(%q) = %+v, want %+v", tc.key, got, tc.want)
				}
			})
		}
	})

	t.Run("SpendByHour", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		MustCreateKey(t, s, NewKey("key_b"))
		hour := T0.Truncate(time.Hour) // 15:00
		MustReserve(t, s, "key_a", "before", USD(100), hour.Add(-time.Microsecond))
		MustReserve(t, s, "key_a", "r1", USD(10), hour)                           // reserved: 10
		r2 := MustReserve(t, s, "key_a", "r2", USD(20), T0)                       // settled at 15
		r3 := MustReserve(t, s, "key_a", "r3", USD(40), hour.Add(59*time.Minute)) // released
		r4 := MustReserve(t, s, "key_a", "r4", USD(5), hour.Add(3*time.Hour))     // uncertain
		MustReserve(t, s, "key_b", "b1", USD(7), hour.Add(3*time.Hour+time.Minute))
		r5 := MustReserve(t, s, "key_a", "r5", USD(9), hour.Add(5*time.Hour)) // released: its hour is returned with 0
		later := hour.Add(6 * time.Hour)
		pt := func(h int, m keybrake.Micros) keybrake.SpendPoint {
			return keybrake.SpendPoint{Start: hour.Add(time.Duration(h) * time.Hour), Micros: m}
		}
		MustSettle(t, s, keybrake.SettleArgs{ID: r2.ID, State: keybrake.StateSettled, SettledMicros: USD(15), Amount: 1500, Currency: "usd", Now: later})
		MustSettle(t, s, keybrake.SettleArgs{ID: r3.ID, State: keybrake.StateReleased, Now: later})
		MustSettle(t, s, keybrake.SettleArgs{ID: r4.ID, State: keybrake.StateUncertain, Now: later})
		MustSettle(t, s, keybrake.SettleArgs{ID: r5.ID, State: keybrake.StateReleased, Now: later})

		for _, tc := range []struct {
			name string
			key  string
			to   time.Time
			want []keybrake.SpendPoint
		}{
			{"OneKey", "key_a", later, []keybrake.SpendPoint{pt(0, USD(25)), pt(3, USD(5)), pt(5, 0)}},
			{"EveryKey", "", later, []keybrake.SpendPoint{pt(0, USD(25)), pt(3, USD(12)), pt(5, 0)}},
			{"EndExcluded", "", hour.Add(5 * time.Hour), []keybrake.SpendPoint{pt(0, USD(25)), pt(3, USD(12))}},
			{"Empty", "key_c", later, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got, err := s.SpendByHour(ctx, keybrake.StatsFilter{KeyID: tc.key, From: hour, To: tc.to})
				if err != nil {
					t.Fatalf("SpendByHour: %v", err)
				}
				if len(got) != len(tc.want) {
					t.Fatalf("SpendByHour(%q) = %+v, want %+v", tc.key, got, tc.want)
				}
				for i := range got {
					if !got[i].Start.Equal(tc.want[i].Start) || got[i].Micros != tc.want[i].Micros {
						t.Fatalf("SpendByHour(%q)[%d] = %+v, want %+v", tc.key, i, got[i], tc.want[i])
					}
				}
			})
		}
	})

	t.Run("OpenAmounts", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		MustCreateKey(t, s, NewKey("key_b"))
		later := T0.Add(time.Minute)
		u := MustReserve(t, s, "key_a", "u", USD(3), T0)
		MustSettle(t, s, keybrake.SettleArgs{ID: u.ID, State: keybrake.StateUncertain, Now: later})
		MustReserve(t, s, "key_a", "open", USD(50), T0) // reserved: neither uncertain nor held
		MustHold(t, s, "key_a", "h1", "pi_1", USD(11), T0, T0.Add(time.Hour))
		MustHold(t, s, "key_b", "h2", "pi_2", USD(4), T0, T0.Add(time.Hour))
		MustHold(t, s, "key_b", "h3", "pi_3", USD(1), T0, T0.Add(time.Hour))

		for _, tc := range []struct {
			key  string
			want keybrake.OpenAmounts
		}{
			{"key_a", keybrake.OpenAmounts{Uncertain: 1, UncertainMicros: USD(3), Held: 1, HeldMicros: USD(11)}},
			{"key_b", keybrake.OpenAmounts{Held: 2, HeldMicros: USD(5)}},
			{"", keybrake.OpenAmounts{Uncertain: 1, UncertainMicros: USD(3), Held: 3, HeldMicros: USD(16)}},
			{"key_c", keybrake.OpenAmounts{}},
		} {
			got, err := s.OpenAmounts(ctx, tc.key)
			if err != nil {
				t.Fatalf("OpenAmounts(%q): %v", tc.key, err)
			}
			if got != tc.want {
				t.Fatalf("OpenAmounts(%q) = %+v, want %+v", tc.key, got, tc.want)
			}
		}
	})

	t.Run("FindEventsFilter", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("key_a"))
		MustCreateKey(t, s, NewKey("key_b"))
		var ids []int64
		for i, e := range []struct {
			key, op, decision string
		}{
			{"key_a", "charges.create", keybrake.DecisionAllow},  // 0
			{"key_a", "charges.create", keybrake.DecisionDeny},   // 1
			{"key_b", "refunds.create", keybrake.DecisionAllow},  // 2
			{"key_a", "refunds.create", keybrake.DecisionDeny},   // 3
			{"key_b", "charges.create", keybrake.DecisionReplay}, // 4
		} {
			ev := NewEvent(e.key, T0.Add(time.Duration(i)*time.Minute), i)
			ev.Operation, ev.Decision = e.op, e.decision
			ids = append(ids, MustAddEvent(t, s, ev).ID)
		}
		for _, tc := range []struct {
			name string
			f    keybrake.EventFilter
			want []int
		}{
			{"EveryKey", keybrake.EventFilter{Limit: 10}, []int{4, 3, 2, 1, 0}},
			{"Decision", keybrake.EventFilter{Decision: keybrake.DecisionDeny}, []int{3, 1}},
			{"Operation", keybrake.EventFilter{Operation: "refunds.create"}, []int{3, 2}},
			{"KeyAndOperation", keybrake.EventFilter{KeyID: "key_a", Operation: "charges.create"}, []int{1, 0}},
			{"Since", keybrake.EventFilter{Since: T0.Add(2 * time.Minute)}, []int{4, 3, 2}},
			{"Until", keybrake.EventFilter{Until: T0.Add(2 * time.Minute)}, []int{1, 0}},
			{"NewerThan", keybrake.EventFilter{NewerThan: ids[2]}, []int{4, 3}},
			{"NewerThanAndStartingAfter", keybrake.EventFilter{NewerThan: ids[0], StartingAfter: ids[3]}, []int{2, 1}},
			{"Nothing", keybrake.EventFilter{Decision: keybrake.DecisionResolve}, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				es, more, err := s.FindEvents(ctx, tc.f)
				if err != nil {
					t.Fatalf("FindEvents(%+v): %v", tc.f, err)
				}
				var got, want []int64
				for _, e := range es {
					got = append(got, e.ID)
				}
				for _, i := range tc.want {
					want = append(want, ids[i])
				}
				if !reflect.DeepEqual(got, want) || more {
					t.Fatalf("FindEvents(%+v) = %v (more %v), want %v", tc.f, got, more, want)
				}
			})
		}
	})
}
