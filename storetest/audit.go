package storetest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// Tamper runs one SQL statement on a store's database behind its back, as
// someone with write access to the database would. The statement uses
// only SQL both stores accept, with literal values.
type Tamper func(t *testing.T, sql string)

// TamperOpener returns a fresh, empty, migrated store and a way to tamper
// with its database.
type TamperOpener func(t *testing.T) (keybrake.Store, Tamper)

// MustVerify verifies s's audit log, failing the test if it cannot be read.
func MustVerify(tb testing.TB, s keybrake.Store) *keybrake.AuditReport {
	tb.Helper()
	r, err := keybrake.VerifyAuditLog(context.Background(), s, nil)
	if err != nil {
		tb.Fatalf("VerifyAuditLog: %v", err)
	}
	return r
}

// mustAddChain adds n events of keyID at T0+i seconds, one AddEvents call
// each, and returns them.
func mustAddChain(t *testing.T, s keybrake.Store, keyID string, n int) []*keybrake.Event {
	t.Helper()
	var es []*keybrake.Event
	for i := range n {
		es = append(es, MustAddEvent(t, s, NewEvent(keyID, T0.Add(time.Duration(i)*time.Second), i+1)))
	}
	return es
}

func wantBreak(t *testing.T, r *keybrake.AuditReport, keyID string, seq, eventID int64, reason string) {
	t.Helper()
	if len(r.Breaks) != 1 {
		t.Fatalf("breaks = %+v, want one, in key %q at seq %d", r.Breaks, keyID, seq)
	}
	b := r.Breaks[0]
	if b.KeyID != keyID || b.Seq != seq || b.EventID != eventID || !strings.Contains(b.Reason, reason) {
		t.Fatalf("break = %+v, want key %q seq %d event %d reason containing %q", b, keyID, seq, eventID, reason)
	}
}

func wantOK(t *testing.T, r *keybrake.AuditReport, events int) {
	t.Helper()
	if !r.OK() || r.Events != events {
		t.Fatalf("report: %d events, breaks %+v; want %d events, no break", r.Events, r.Breaks, events)
	}
}

func testAuditChain(t *testing.T, open opener) {
	ctx := context.Background()
	t.Run("OK", func(t *testing.T) {
		s := open(t)
		// A batch mixing keys, then single events: each key keeps its own
		// consecutive chain, the unknown key ("") too.
		var batch []*keybrake.Event
		for i := range 6 {
			batch = append(batch, NewEvent([]string{"key_a", "key_b", ""}[i%3], T0, i))
		}
		if err := s.AddEvents(ctx, batch); err != nil {
			t.Fatalf("AddEvents: %v", err)
		}
		more := mustAddChain(t, s, "key_a", 2)
		if more[1].Seq != 4 || more[1].PrevHash != more[0].Hash || more[0].PrevHash != batch[3].Hash {
			t.Fatalf("key_a chain: seq %d, prev %q, want seq 4 linked to the batch", more[1].Seq, more[1].PrevHash)
		}
		if batch[0].Seq != 1 || batch[0].PrevHash != "" || batch[0].Hash != keybrake.EventHash(batch[0]) {
			t.Fatalf("first event = seq %d prev %q hash %q", batch[0].Seq, batch[0].PrevHash, batch[0].Hash)
		}
		r := MustVerify(t, s)
		wantOK(t, r, 8)
		if len(r.Heads) != 3 {
			t.Fatalf("heads = %+v, want 3", r.Heads)
		}
		// What FindEvents returns is what was chained.
		es, _, err := s.FindEvents(ctx, keybrake.EventFilter{KeyID: "key_a", Limit: 1})
		if err != nil || es[0].Hash != more[1].Hash || es[0].Seq != 4 {
			t.Fatalf("FindEvents = %+v, %v", es, err)
		}
	})
	t.Run("Export", func(t *testing.T) {
		s := open(t)
		mustAddChain(t, s, "key_a", 3)
		var buf bytes.Buffer
		if _, err := keybrake.VerifyAuditLog(ctx, s, &buf); err != nil {
			t.Fatalf("VerifyAuditLog: %v", err)
		}
		r, err := keybrake.VerifyAuditExport(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatalf("VerifyAuditExport: %v", err)
		}
		wantOK(t, r, 3)
		// The file itself is evidence: an edited line breaks there.
		edited := strings.Replace(buf.String(), `"amount":200`, `"amount":201`, 1)
		r, err = keybrake.VerifyAuditExport(strings.NewReader(edited))
		if err != nil {
			t.Fatalf("VerifyAuditExport: %v", err)
		}
		if len(r.Breaks) != 1 || r.Breaks[0].Seq != 2 {
			t.Fatalf("edited export: breaks %+v, want one at seq 2", r.Breaks)
		}
	})
	t.Run("Prune", func(t *testing.T) {
		s := open(t)
		a := mustAddChain(t, s, "key_a", 10)
		mustAddChain(t, s, "key_b", 2)
		// Events older than T0+4s go: key_a's seqs 1-4, all of key_b.
		n, err := s.PruneEvents(ctx, T0.Add(4*time.Second), T0.Add(time.Hour))
		if err != nil || n != 6 {
			t.Fatalf("PruneEvents = %d, %v; want 6", n, err)
		}
		r := MustVerify(t, s)
		wantOK(t, r, 6)
		anchors, err := s.ChainAnchors(ctx)
		if err != nil || len(anchors) != 2 || anchors[0].KeyID != "key_a" || anchors[0].Seq != 5 || anchors[0].Hash != a[3].Hash {
			t.Fatalf("anchors = %+v, %v; want key_a at seq 5 after %s", anchors, err, a[3].Hash)
		}
		// Pruning again changes nothing; the chains go on from their heads.
		if n, err := s.PruneEvents(ctx, T0.Add(4*time.Second), T0.Add(time.Hour)); err != nil || n != 0 {
			t.Fatalf("second PruneEvents = %d, %v; want 0", n, err)
		}
		b := MustAddEvent(t, s, NewEvent("key_b", T0.Add(time.Minute), 3))
		if b.Seq != 3 {
			t.Fatalf("key_b after pruning all: seq %d, want 3", b.Seq)
		}
		wantOK(t, MustVerify(t, s), 7)
	})
	t.Run("PruneInterleavedBatches", func(t *testing.T) {
		// Batches of events over many keys, as a busy proxy writes them
		// (AddEvents reads and moves their heads together), then pruned a
		// slice at a time as the pruner does: each prune deletes exactly
		// the events before its cut, every chain still verifies from its
		// anchor, and the chains go on from their heads.
		s := open(t)
		keys := []string{"key_a", "key_b", "key_c", "key_d", "key_e"}
		var all []*keybrake.Event
		for b := range 8 {
			var batch []*keybrake.Event
			for range 2*b + 1 { // uneven batches, every key in some, some keys twice
				n := len(all) + len(batch)
				batch = append(batch, NewEvent(keys[(n*3+b)%len(keys)], T0.Add(time.Duration(n)*time.Second), n+1))
			}
			if err := s.AddEvents(ctx, batch); err != nil {
				t.Fatalf("AddEvents: %v", err)
			}
			all = append(all, batch...)
		}
		wantOK(t, MustVerify(t, s), len(all))
		gone := 0
		for _, cut := range []int{0, 3, 4, 20, 21, 40, 64, 64} {
			want := max(0, min(cut, len(all))-gone)
			n, err := s.PruneEvents(ctx, T0.Add(time.Duration(cut)*time.Second), T0.Add(time.Hour))
			if err != nil || n != int64(want) {
				t.Fatalf("PruneEvents before event %d = %d, %v; want %d", cut, n, err, want)
			}
			gone += want
			wantOK(t, MustVerify(t, s), len(all)-gone)
		}
		for _, k := range keys {
			e := MustAddEvent(t, s, NewEvent(k, T0.Add(time.Hour), 1))
			var last int64
			for _, a := range all {
				if a.KeyID == k {
					last = a.Seq
				}
			}
			if e.Seq != last+1 {
				t.Fatalf("%s after pruning: seq %d, want %d", k, e.Seq, last+1)
			}
		}
		wantOK(t, MustVerify(t, s), len(all)-gone+len(keys))
	})
}

// RunAuditTamper checks that editing, deleting or reordering audit events
// in the database behind the store's back breaks verification at the
// right link. Stores run it beside Run, with a way to tamper.
func RunAuditTamper(t *testing.T, open TamperOpener) {
	setup := func(t *testing.T) (keybrake.Store, Tamper, []*keybrake.Event) {
		s, tamper := open(t)
		t.Cleanup(func() { _ = s.Close() })
		es := mustAddChain(t, s, "key_a", 5)
		mustAddChain(t, s, "key_b", 5)
		wantOK(t, MustVerify(t, s), 10)
		return s, tamper, es
	}
	t.Run("Edited", func(t *testing.T) {
		s, tamper, es := setup(t)
		tamper(t, fmt.Sprintf(`UPDATE events SET amount = amount + 1 WHERE id = %d`, es[2].ID))
		wantBreak(t, MustVerify(t, s), "key_a", 3, es[2].ID, "edited")
	})
	t.Run("Rehashed", func(t *testing.T) {
		// Editing and recomputing the event's own hash breaks the next link.
		s, tamper, es := setup(t)
		e := *es[2]
		e.Amount++
		tamper(t, fmt.Sprintf(`UPDATE events SET amount = %d, hash = '%s' WHERE id = %d`, e.Amount, keybrake.EventHash(&e), e.ID))
		wantBreak(t, MustVerify(t, s), "key_a", 4, es[3].ID, "prev_hash")
	})
	t.Run("Deleted", func(t *testing.T) {
		s, tamper, es := setup(t)
		tamper(t, fmt.Sprintf(`DELETE FROM events WHERE id = %d`, es[2].ID))
		wantBreak(t, MustVerify(t, s), "key_a", 3, es[3].ID, "missing")
	})
	t.Run("DeletedFirst", func(t *testing.T) {
		s, tamper, es := setup(t)
		tamper(t, fmt.Sprintf(`DELETE FROM events WHERE id = %d`, es[0].ID))
		wantBreak(t, MustVerify(t, s), "key_a", 1, es[1].ID, "missing")
	})
	t.Run("DeletedLast", func(t *testing.T) {
		s, tamper, es := setup(t)
		tamper(t, fmt.Sprintf(`DELETE FROM events WHERE id = %d`, es[4].ID))
		wantBreak(t, MustVerify(t, s), "key_a", 5, 0, "head")
	})
	t.Run("Reordered", func(t *testing.T) {
		// The third event moved to the end of the log (a new, larger ID):
		// the chain breaks where it was taken from.
		s, tamper, es := setup(t)
		cols := `key_id, time, operation, method, path, amount, currency, micros, decision, reason,
			upstream_status, object_id, request_id, idempotency_key, reservation_id, seq, prev_hash, hash`
		tamper(t, fmt.Sprintf(`INSERT INTO events (%s) SELECT %s FROM events WHERE id = %d`, cols, cols, es[2].ID))
		tamper(t, fmt.Sprintf(`DELETE FROM events WHERE id = %d`, es[2].ID))
		wantBreak(t, MustVerify(t, s), "key_a", 3, es[3].ID, "missing")
	})
	t.Run("PrunedThenDeleted", func(t *testing.T) {
		// After a prune the chain starts at its anchor: deleting the first
		// kept event is caught there.
		s, tamper, es := setup(t)
		if _, err := s.PruneEvents(context.Background(), T0.Add(2*time.Second), T0.Add(time.Hour)); err != nil {
			t.Fatalf("PruneEvents: %v", err)
		}
		wantOK(t, MustVerify(t, s), 6)
		tamper(t, fmt.Sprintf(`DELETE FROM events WHERE id = %d`, es[2].ID))
		wantBreak(t, MustVerify(t, s), "key_a", 3, es[3].ID, "missing")
	})
}
