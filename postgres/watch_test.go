package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/storetest"
)

// wantNotice waits (bounded, not timed) for the watcher to report id.
func wantNotice(tb testing.TB, ch <-chan string, id string) {
	tb.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case got := <-ch:
			if got == id {
				return
			}
		case <-deadline:
			tb.Fatalf("no change reported for %q", id)
		}
	}
}

// TestWatchKeys checks that a change made through one replica's Store is
// reported to another's watcher, and that a lost listener connection is
// reported as "" (drop everything) and then recovered from.
func TestWatchKeys(t *testing.T) {
	dsn := MustDatabase(t, MustServerDSN(t))
	a, b := MustOpen(t, dsn), MustOpen(t, dsn)
	storetest.MustCreateKey(t, a, storetest.NewKey("key_a"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := make(chan string, 64)
	if err := b.WatchKeys(ctx, func(id string) { ch <- id }); err != nil {
		t.Fatalf("WatchKeys: %v", err)
	}

	t.Run("Update", func(t *testing.T) {
		label := "renamed"
		if _, err := a.UpdateKey(ctx, "key_a", keybrake.KeyUpdate{Label: &label}, storetest.T0); err != nil {
			t.Fatal(err)
		}
		wantNotice(t, ch, "key_a")
	})
	t.Run("Revoke", func(t *testing.T) {
		if _, err := a.RevokeKey(ctx, "key_a", storetest.T0); err != nil {
			t.Fatal(err)
		}
		wantNotice(t, ch, "key_a")
	})
	t.Run("ConnectionLost", func(t *testing.T) {
		// Kill every listening backend: the watcher must say "" and
		// listen again by itself.
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE pid <> pg_backend_pid() AND query = 'LISTEN "keybrake_keys:' || current_schema() || '"'`); err != nil {
			t.Fatal(err)
		}
		wantNotice(t, ch, "")
		// Changes made after the reconnection are reported again. The
		// watcher reports "" once more when it listens again; until then
		// a change may be missed, so keep changing until one arrives.
		deadline := time.Now().Add(30 * time.Second)
		for i := 0; ; i++ {
			id := fmt.Sprintf("key_after_%d", i)
			storetest.MustCreateKey(t, a, storetest.NewKey(id))
			if _, err := a.RevokeKey(ctx, id, storetest.T0); err != nil {
				t.Fatal(err)
			}
			select {
			case got := <-ch:
				if got == id {
					return
				}
			case <-time.After(200 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatal("no change reported after the listener was killed")
			}
		}
	})
}

// TestAddEvents checks the batch insert numbers events in order.
func TestAddEvents(t *testing.T) {
	s := MustOpen(t, MustDatabase(t, MustServerDSN(t)))
	ctx := context.Background()
	var events []*keybrake.Event
	for i := range 50 {
		events = append(events, &keybrake.Event{KeyID: "key_a", Time: storetest.T0.Add(time.Duration(i) * time.Second),
			Operation: "charges.create", Method: "POST", Path: "/v1/charges", Amount: int64(i), Currency: "usd",
			Micros: keybrake.Micros(i), Decision: keybrake.DecisionAllow, RequestID: "req"})
	}
	if err := s.AddEvents(ctx, events); err != nil {
		t.Fatalf("AddEvents: %v", err)
	}
	for i := 1; i < len(events); i++ {
		if events[i].ID <= events[i-1].ID {
			t.Fatalf("event %d has ID %d after %d", i, events[i].ID, events[i-1].ID)
		}
	}
	got, _, err := s.FindEvents(ctx, keybrake.EventFilter{KeyID: "key_a", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(events) {
		t.Fatalf("found %d events, want %d", len(got), len(events))
	}
	for _, e := range got {
		if want := events[e.Amount]; e.ID != want.ID || !e.Time.Equal(want.Time) {
			t.Fatalf("event %d: ID %d time %v, want ID %d time %v", e.Amount, e.ID, e.Time, want.ID, want.Time)
		}
	}
}
