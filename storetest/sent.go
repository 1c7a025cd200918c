package storetest

import (
	"context"
	"reflect"
	"testing"

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
