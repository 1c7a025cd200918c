package storetest

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// testSent: which key sent each message, call and email
// (keybrake.SentService), on which the proxy lets a key read or act on an
// object by id only when it sent it.
func testSent(t *testing.T, o opener) {
	ctx := context.Background()
	s := o(t)
	a := NewKey("key_sent_a")
	a.Vendor = keybrake.VendorResend
	MustCreateKey(t, s, a)
	b := NewKey("key_sent_b")
	b.Vendor = keybrake.VendorResend
	MustCreateKey(t, s, b)
	find := func(vendor, id string, want ...string) {
		t.Helper()
		got, err := s.FindSenders(ctx, vendor, id)
		if err != nil {
			t.Fatalf("FindSenders(%s, %s): %v", vendor, id, err)
		}
		if len(want) == 0 {
			want = nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("FindSenders(%s, %s) = %q, want %q", vendor, id, got, want)
		}
	}
	record := func(args keybrake.RecordSentArgs) {
		t.Helper()
		if args.Now.IsZero() {
			args.Now = T0
		}
		if err := s.RecordSent(ctx, args); err != nil {
			t.Fatalf("RecordSent(%+v): %v", args, err)
		}
	}
	// Nothing recorded: no sender, no error (an id sent outside keybrake).
	find(keybrake.VendorResend, "0f8e7c3a-0000-4000-8000-000000000001")

	// Every email of a batch, not only the first.
	batch := []string{"0f8e7c3a-0000-4000-8000-00000000000a", "0f8e7c3a-0000-4000-8000-00000000000b", "", "0f8e7c3a-0000-4000-8000-00000000000c"}
	record(keybrake.RecordSentArgs{Vendor: keybrake.VendorResend, KeyID: a.ID, ReservationID: "rsv_batch", IDs: batch})
	for _, id := range batch {
		if id != "" {
			find(keybrake.VendorResend, id, a.ID)
		}
	}
	find(keybrake.VendorResend, "") // an empty id was skipped, not recorded
	// A replayed create answers with the same ids: recorded once.
	record(keybrake.RecordSentArgs{Vendor: keybrake.VendorResend, KeyID: a.ID, ReservationID: "rsv_batch", IDs: batch[:1], Now: T0.Add(1)})
	find(keybrake.VendorResend, batch[0], a.ID)
	// Ids match exactly: another case is another id, and each vendor's ids
	// are its own.
	find(keybrake.VendorResend, "0F8E7C3A-0000-4000-8000-00000000000A")
	find(keybrake.VendorTwilio, batch[0])
	// Two keys answered the same id (never seen upstream, but kept apart):
	// both, sorted.
	record(keybrake.RecordSentArgs{Vendor: keybrake.VendorResend, KeyID: b.ID, IDs: batch[1:2]})
	find(keybrake.VendorResend, batch[1], a.ID, b.ID)
	record(keybrake.RecordSentArgs{Vendor: keybrake.VendorTwilio, KeyID: b.ID, IDs: []string{"SM0123456789abcdef0123456789abcdef"}})
	find(keybrake.VendorTwilio, "SM0123456789abcdef0123456789abcdef", b.ID)
	find(keybrake.VendorTwilio, "SM0123456789ABCDEF0123456789ABCDEF")

	if err := s.RecordSent(ctx, keybrake.RecordSentArgs{Vendor: keybrake.VendorResend, KeyID: "key_missing", IDs: []string{"x"}, Now: T0}); keybrake.ErrorCode(err) != keybrake.ENOTFOUND {
		t.Fatalf("RecordSent for an unknown key: %v, want ENOTFOUND", err)
	}
	if err := s.RecordSent(ctx, keybrake.RecordSentArgs{KeyID: a.ID, IDs: []string{"x"}, Now: T0}); keybrake.ErrorCode(err) != keybrake.EINVALID {
		t.Fatalf("RecordSent without a vendor: %v, want EINVALID", err)
	}
	if err := s.RecordSent(ctx, keybrake.RecordSentArgs{Vendor: keybrake.VendorResend, KeyID: a.ID, IDs: make([]string, keybrake.MaxSentIDs+1), Now: T0}); keybrake.ErrorCode(err) != keybrake.EINVALID {
		t.Fatalf("RecordSent of %d ids: %v, want EINVALID", keybrake.MaxSentIDs+1, err)
	}
}

// testSentPrune: retention forgets who sent an object once its record is
// older than the sent retention (PruneSent), oldest first in batches, never
// inside MinSentRetention; the other retention kinds leave it alone.
func testSentPrune(t *testing.T, o opener) {
	ctx := context.Background()
	s := o(t)
	a := NewKey("key_sentprune_a")
	a.Vendor = keybrake.VendorTwilio
	MustCreateKey(t, s, a)
	b := NewKey("key_sentprune_b")
	b.Vendor = keybrake.VendorTwilio
	MustCreateKey(t, s, b)
	record := func(key, id string, at time.Time) {
		t.Helper()
		if err := s.RecordSent(ctx, keybrake.RecordSentArgs{Vendor: keybrake.VendorTwilio, KeyID: key, ReservationID: "rsv_" + id, IDs: []string{id}, Now: at}); err != nil {
			t.Fatalf("RecordSent(%s): %v", id, err)
		}
	}
	kept := func(id string, want bool) {
		t.Helper()
		got, err := s.FindSenders(ctx, keybrake.VendorTwilio, id)
		if err != nil {
			t.Fatalf("FindSenders(%s): %v", id, err)
		}
		if (len(got) > 0) != want {
			t.Fatalf("FindSenders(%s) = %q after pruning, want kept=%v", id, got, want)
		}
	}
	sid := func(i int) string { return fmt.Sprintf("SM%032x", i) }
	record(a.ID, sid(1), T0)
	record(a.ID, sid(2), T0.Add(time.Hour))
	record(b.ID, sid(3), T0.Add(2*time.Hour))
	record(b.ID, sid(4), T0.Add(10*day))
	record(a.ID, sid(5), T0.Add(15*day)) // exactly at the cut: kept
	record(a.ID, sid(6), T0.Add(50*day))
	now := T0.Add(60 * day)

	// The other kinds' retention leaves the records alone.
	p := &keybrake.Pruner{Store: s, Retention: keybrake.MinRetention, Batch: 2, Pause: time.Microsecond, Now: func() time.Time { return now }}
	if rep, err := p.Once(ctx); err != nil || rep.Sent != 0 {
		t.Fatalf("a pass without Sent = %+v, %v; want no sent objects pruned", rep, err)
	}
	for i := 1; i <= 6; i++ {
		kept(sid(i), true)
	}

	args := keybrake.PruneArgs{Before: T0.Add(15 * day), Now: now, Limit: 1}
	if got := mustPruneAll(t, "PruneSent", func() (int64, error) { return s.PruneSent(ctx, args) }); len(got) != 5 {
		t.Fatalf("PruneSent batches = %v, want four of one row, then none", got)
	}
	for i, want := range []bool{false, false, false, false, true, true} {
		kept(sid(i+1), want)
	}
	// A retention shorter than MinSentRetention is cut to it: sid 6 was
	// made 10 days before now.
	all := keybrake.PruneArgs{Before: now, Now: now}
	if n, err := s.PruneSent(ctx, all); err != nil || n != 1 {
		t.Fatalf("PruneSent of everything = %d, %v; want 1 (the one older than %s)", n, err, keybrake.MinSentRetention)
	}
	kept(sid(5), false)
	kept(sid(6), true)

	// A pruned id recorded again (a create answered anew) is its key's again.
	record(b.ID, sid(1), now)
	if got, err := s.FindSenders(ctx, keybrake.VendorTwilio, sid(1)); err != nil || len(got) != 1 || got[0] != b.ID {
		t.Fatalf("FindSenders after a new record = %q, %v", got, err)
	}

	// The Pruner runs it with Sent alone; both off, or Sent too short, is refused.
	p = &keybrake.Pruner{Store: s, Sent: keybrake.MinSentRetention, Batch: 2, Pause: time.Microsecond, Now: func() time.Time { return now.Add(35 * day) }}
	if rep, err := p.Once(ctx); err != nil || rep.Sent != 1 || rep.Events != 0 {
		t.Fatalf("a Sent-only pass = %+v, %v; want the one record older than %s", rep, err, keybrake.MinSentRetention)
	}
	kept(sid(6), false)
	kept(sid(1), true)
	for _, bad := range []keybrake.Pruner{{Store: s}, {Store: s, Sent: 10 * day}, {Store: s, Retention: keybrake.MinRetention, Sent: keybrake.MinRetention}} {
		if _, err := bad.Once(ctx); keybrake.ErrorCode(err) != keybrake.EINVALID {
			t.Fatalf("Pruner{Retention: %s, Sent: %s} = %v, want EINVALID", bad.Retention, bad.Sent, err)
		}
	}
}
