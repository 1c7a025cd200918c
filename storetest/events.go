package storetest

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// NewEvent returns a complete audit event for keyID at t.
func NewEvent(keyID string, t time.Time, n int) *keybrake.Event {
	return &keybrake.Event{
		KeyID:          keyID,
		Time:           t,
		Operation:      "charges.create",
		Method:         "POST",
		Path:           "/v1/charges",
		Amount:         int64(100 * n),
		Currency:       "usd",
		Micros:         USD(int64(n)),
		Decision:       keybrake.DecisionAllow,
		Reason:         fmt.Sprintf("event %d", n),
		UpstreamStatus: 200,
		ObjectID:       fmt.Sprintf("ch_%d", n),
		RequestID:      fmt.Sprintf("req_%d", n),
		IdempotencyKey: fmt.Sprintf("idem_%d", n),
		ReservationID:  fmt.Sprintf("res_%d", n),
	}
}

// MustAddEvent appends e or fails the test.
func MustAddEvent(tb testing.TB, s keybrake.Store, e *keybrake.Event) *keybrake.Event {
	tb.Helper()
	if err := s.AddEvent(context.Background(), e); err != nil {
		tb.Fatalf("AddEvent: %v", err)
	}
	return e
}

func testEvents(t *testing.T, open opener) {
	ctx := context.Background()
	page := func(t *testing.T, s keybrake.Store, f keybrake.EventFilter) ([]int64, bool) {
		t.Helper()
		es, more, err := s.FindEvents(ctx, f)
		if err != nil {
			t.Fatalf("FindEvents(%+v): %v", f, err)
		}
		var out []int64
		for _, e := range es {
			out = append(out, e.ID)
		}
		return out, more
	}

	t.Run("Add", func(t *testing.T) {
		t.Run("OK", func(t *testing.T) {
			s := open(t)
			MustCreateKey(t, s, NewKey("key_a"))
			var last int64
			for i := range 5 {
				e := MustAddEvent(t, s, NewEvent("key_a", T0.Add(time.Duration(i)*time.Microsecond), i))
				if e.ID <= last {
					t.Fatalf("event %d ID = %d after %d", i, e.ID, last)
				}
				last = e.ID
			}
		})
		t.Run("RoundTrip", func(t *testing.T) {
			s := open(t)
			MustCreateKey(t, s, NewKey("key_a"))
			want := NewEvent("key_a", T0, 7)
			want.Decision = keybrake.DecisionDeny
			want.Reason = "over the daily cap: 10.00 spent of 10.00 — \"quoted\""
			MustAddEvent(t, s, want)
			es, _, err := s.FindEvents(ctx, keybrake.EventFilter{KeyID: "key_a"})
			if err != nil || len(es) != 1 {
				t.Fatalf("FindEvents = %d events, %v", len(es), err)
			}
			got := es[0]
			wantTime(t, "Time", got.Time, want.Time)
			g, w := *got, *want
			g.Time, w.Time = time.Time{}, time.Time{}
			if !reflect.DeepEqual(g, w) {
				t.Fatalf("event mismatch:\n got %+v\nwant %+v", g, w)
			}
		})
		t.Run("MCP", func(t *testing.T) {
			// A tool call through the MCP server is audited with its
			// session and client; a REST request keeps them empty.
			s := open(t)
			MustCreateKey(t, s, NewKey("key_a"))
			rest := MustAddEvent(t, s, NewEvent("key_a", T0, 1))
			want := NewEvent("key_a", T0.Add(time.Second), 2)
			want.Via, want.MCPSession, want.MCPClient = keybrake.ViaMCP, "mcps_Q2x5", "claude-code 2.1.0 \"quoted\" é"
			MustAddEvent(t, s, want)
			es, _, err := s.FindEvents(ctx, keybrake.EventFilter{KeyID: "key_a"})
			if err != nil || len(es) != 2 {
				t.Fatalf("FindEvents = %d events, %v", len(es), err)
			}
			if g := es[0]; g.ID != want.ID || g.Via != keybrake.ViaMCP || g.MCPSession != want.MCPSession || g.MCPClient != want.MCPClient {
				t.Fatalf("MCP event = %+v, want via=mcp session=%q client=%q", g, want.MCPSession, want.MCPClient)
			}
			if g := es[1]; g.ID != rest.ID || g.Via != "" || g.MCPSession != "" || g.MCPClient != "" {
				t.Fatalf("REST event = %+v, want no MCP fields", g)
			}
		})
		t.Run("OddText", func(t *testing.T) {
			// Text a client chose, not UTF-8 or with NUL bytes, is kept
			// with U+FFFD in their place, alike in both stores
			// (PostgreSQL refuses such text, and dropped the event), and
			// the chain hashes what is kept.
			s := open(t)
			MustCreateKey(t, s, NewKey("key_a"))
			e := NewEvent("key_a", T0, 1)
			e.Decision, e.Reason, e.MCPClient, e.ObjectID = keybrake.DecisionDeny, "customer cus_\xff\x00 refused", "agent \xc3", "cus_\x00"
			MustAddEvent(t, s, e)
			es, _, err := s.FindEvents(ctx, keybrake.EventFilter{KeyID: "key_a"})
			if err != nil || len(es) != 1 {
				t.Fatalf("FindEvents = %d events, %v", len(es), err)
			}
			if g := es[0]; g.Reason != "customer cus_\uFFFD\uFFFD refused" || g.MCPClient != "agent \uFFFD" || g.ObjectID != "cus_\uFFFD" || g.Hash != e.Hash || keybrake.EventHash(g) != g.Hash {
				t.Fatalf("event = %+v", g)
			}
			if cs, ok := s.(keybrake.AuditChainService); ok {
				if rep, err := keybrake.VerifyAuditLog(ctx, cs, nil); err != nil || !rep.OK() {
					t.Fatalf("chain: %+v, %v", rep, err)
				}
			}
		})
		t.Run("UnknownKey", func(t *testing.T) {
			// A refused request with an unknown vault key is still audited.
			s := open(t)
			e := NewEvent("", T0, 1)
			e.Decision = keybrake.DecisionDeny
			MustAddEvent(t, s, e)
		})
	})

	t.Run("Find", func(t *testing.T) {
		t.Run("OK", func(t *testing.T) {
			s := open(t)
			MustCreateKey(t, s, NewKey("key_a"))
			MustCreateKey(t, s, NewKey("key_b"))
			var a []int64
			for i := range 5 {
				a = append(a, MustAddEvent(t, s, NewEvent("key_a", T0.Add(time.Duration(i)*time.Second), i)).ID)
				MustAddEvent(t, s, NewEvent("key_b", T0.Add(time.Duration(i)*time.Second), i))
			}
			// Newest first.
			want := []int64{a[4], a[3], a[2], a[1], a[0]}
			got, more := page(t, s, keybrake.EventFilter{KeyID: "key_a", Limit: 2})
			if !reflect.DeepEqual(got, want[:2]) || !more {
				t.Fatalf("page 1 = %v more=%v, want %v more=true", got, more, want[:2])
			}
			got, more = page(t, s, keybrake.EventFilter{KeyID: "key_a", Limit: 2, StartingAfter: got[1]})
			if !reflect.DeepEqual(got, want[2:4]) || !more {
				t.Fatalf("page 2 = %v more=%v, want %v more=true", got, more, want[2:4])
			}
			got, more = page(t, s, keybrake.EventFilter{KeyID: "key_a", Limit: 2, StartingAfter: got[1]})
			if !reflect.DeepEqual(got, want[4:]) || more {
				t.Fatalf("page 3 = %v more=%v, want %v more=false", got, more, want[4:])
			}
			got, more = page(t, s, keybrake.EventFilter{KeyID: "key_a"})
			if !reflect.DeepEqual(got, want) || more {
				t.Fatalf("default page = %v more=%v, want %v more=false", got, more, want)
			}
		})
		t.Run("DefaultLimit", func(t *testing.T) {
			s := open(t)
			MustCreateKey(t, s, NewKey("key_a"))
			for i := range 11 {
				MustAddEvent(t, s, NewEvent("key_a", T0, i))
			}
			got, more := page(t, s, keybrake.EventFilter{KeyID: "key_a"})
			if len(got) != 10 || !more {
				t.Fatalf("default page = %d events more=%v, want 10 more=true", len(got), more)
			}
		})
		t.Run("Empty", func(t *testing.T) {
			s := open(t)
			MustCreateKey(t, s, NewKey("key_a"))
			MustAddEvent(t, s, NewEvent("key_b", T0, 1))
			got, more := page(t, s, keybrake.EventFilter{KeyID: "key_a"})
			if len(got) != 0 || more {
				t.Fatalf("events = %v more=%v, want none", got, more)
			}
		})
	})
}
