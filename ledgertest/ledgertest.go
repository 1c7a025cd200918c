// Package ledgertest is the conformance suite for keybrake.Ledger. Every
// implementation (sqlite, postgres) runs the same Run from its own tests, so
// the billing state machine behaves identically whichever store backs it.
//
// The suite never sleeps and never reads the wall clock: every time it passes
// to the ledger is derived from the fixed instant T0.
package ledgertest

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// T0 is the fixed instant the suite's clocks start from. It carries
// microseconds so that ledgers are checked for microsecond round-trips.
var T0 = time.Date(2026, 11, 29, 15, 4, 5, 123456000, time.UTC)

// Lease is the lease length the suite claims with.
const Lease = time.Minute

// Run runs the conformance suite. open must return a fresh, empty ledger
// each time it is called (once per subtest) and close it when the test ends.
func Run(t *testing.T, open func(t *testing.T) keybrake.Ledger) {
	t.Run("Claim", func(t *testing.T) { testClaim(t, open) })
	t.Run("Finish", func(t *testing.T) { testFinish(t, open) })
	t.Run("Extend", func(t *testing.T) { testExtend(t, open) })
	t.Run("Release", func(t *testing.T) { testRelease(t, open) })
	t.Run("Mismatch", func(t *testing.T) { testMismatch(t, open) })
	t.Run("FindEntries", func(t *testing.T) { testFindEntries(t, open) })
	t.Run("Concurrency", func(t *testing.T) { testConcurrency(t, open) })
}

// NewEntry returns the event part of an entry for key: 4200 usd for
// cus_test, fingerprinted "fp_"+key.
func NewEntry(key string) *keybrake.LedgerEntry {
	return &keybrake.LedgerEntry{Key: key, Fingerprint: "fp_" + key, Amount: 4200, Currency: "usd", Customer: "cus_test"}
}

// Claim claims e for owner at now with the suite's lease.
func Claim(tb testing.TB, l keybrake.Ledger, e *keybrake.LedgerEntry, owner string, now time.Time) *keybrake.ClaimResult {
	tb.Helper()
	res, err := l.Claim(context.Background(), keybrake.ClaimArgs{Entry: e, Owner: owner, Now: now, Until: now.Add(Lease)})
	if err != nil {
		tb.Fatalf("Claim(%s, %s): %v", e.Key, owner, err)
	}
	return res
}

// MustClaim claims e for owner at now and fails unless the lease is taken.
func MustClaim(tb testing.TB, l keybrake.Ledger, e *keybrake.LedgerEntry, owner string, now time.Time) *keybrake.LedgerEntry {
	tb.Helper()
	res := Claim(tb, l, e, owner, now)
	if !res.Claimed || res.Conflict != nil {
		tb.Fatalf("Claim(%s, %s) = %+v (entry %+v), want claimed", e.Key, owner, res, res.Entry)
	}
	return res.Entry
}

// MustFinish finishes key for owner.
func MustFinish(tb testing.TB, l keybrake.Ledger, args keybrake.FinishArgs) *keybrake.LedgerEntry {
	tb.Helper()
	e, err := l.Finish(context.Background(), args)
	if err != nil {
		tb.Fatalf("Finish(%+v): %v", args, err)
	}
	return e
}

// MustFind returns the entry of key.
func MustFind(tb testing.TB, l keybrake.Ledger, key string) *keybrake.LedgerEntry {
	tb.Helper()
	e, err := l.FindEntry(context.Background(), key)
	if err != nil {
		tb.Fatalf("FindEntry(%s): %v", key, err)
	}
	return e
}

// MustCode fails unless err carries code.
func MustCode(tb testing.TB, err error, code string) {
	tb.Helper()
	if got := keybrake.ErrorCode(err); got != code {
		tb.Fatalf("error = %v (code %q), want code %q", err, got, code)
	}
}

// sameEntry fails unless got equals want, times compared as instants.
func sameEntry(tb testing.TB, what string, got, want *keybrake.LedgerEntry) {
	tb.Helper()
	g, w := *got, *want
	for _, p := range []*time.Time{&g.LeaseUntil, &g.FirstAttemptAt, &g.CreatedAt, &g.UpdatedAt,
		&w.LeaseUntil, &w.FirstAttemptAt, &w.CreatedAt, &w.UpdatedAt} {
		*p = p.UTC()
	}
	if !reflect.DeepEqual(g, w) {
		tb.Fatalf("%s:\n got %+v\nwant %+v", what, g, w)
	}
}

func testClaim(t *testing.T, open func(t *testing.T) keybrake.Ledger) {
	ctx := context.Background()
	t.Run("OK", func(t *testing.T) {
		l := open(t)
		e := MustClaim(t, l, NewEntry("kb_a"), "owner_a", T0)
		want := &keybrake.LedgerEntry{Key: "kb_a", State: keybrake.EntryPending, Amount: 4200, Currency: "usd",
			Customer: "cus_test", Fingerprint: "fp_kb_a", Attempts: 1, LeaseOwner: "owner_a", LeaseUntil: T0.Add(Lease),
			FirstAttemptAt: T0, CreatedAt: T0, UpdatedAt: T0}
		sameEntry(t, "claimed entry", e, want)
		sameEntry(t, "found entry", MustFind(t, l, "kb_a"), want)
	})
	t.Run("LeaseHeld", func(t *testing.T) {
		// A live lease of another owner: not claimed, nothing changes.
		l := open(t)
		first := MustClaim(t, l, NewEntry("kb_a"), "owner_a", T0)
		res := Claim(t, l, NewEntry("kb_a"), "owner_b", T0.Add(Lease-time.Microsecond))
		if res.Claimed || res.Conflict != nil {
			t.Fatalf("claim under a live lease = %+v", res)
		}
		sameEntry(t, "returned entry", res.Entry, first)
		sameEntry(t, "stored entry", MustFind(t, l, "kb_a"), first)
	})
	t.Run("SameOwnerAgain", func(t *testing.T) {
		// The holder's claim whose answer was lost can be retried.
		l := open(t)
		MustClaim(t, l, NewEntry("kb_a"), "owner_a", T0)
		e := MustClaim(t, l, NewEntry("kb_a"), "owner_a", T0.Add(time.Second))
		if e.Attempts != 1 || !e.LeaseUntil.Equal(T0.Add(time.Second+Lease)) {
			t.Fatalf("reclaim = %+v", e)
		}
	})
	t.Run("TakeoverExpired", func(t *testing.T) {
		// The worker died between claim and Stripe: at its lease's end
		// another takes over, with the same key, one attempt more.
		l := open(t)
		MustClaim(t, l, NewEntry("kb_a"), "owner_a", T0)
		e := MustClaim(t, l, NewEntry("kb_a"), "owner_b", T0.Add(Lease))
		if e.Attempts != 2 || e.LeaseOwner != "owner_b" || !e.FirstAttemptAt.Equal(T0) || !e.LeaseUntil.Equal(T0.Add(2*Lease)) {
			t.Fatalf("takeover = %+v", e)
		}
		// The old owner lost everything.
		_, err := l.Finish(ctx, keybrake.FinishArgs{Key: "kb_a", Owner: "owner_a", State: keybrake.EntryCharged, ChargeID: "ch_1", Now: T0.Add(Lease)})
		MustCode(t, err, keybrake.ECONFLICT)
		_, err = l.Extend(ctx, "kb_a", "owner_a", T0.Add(Lease), T0.Add(3*Lease))
		MustCode(t, err, keybrake.ECONFLICT)
		_, err = l.Release(ctx, "kb_a", "owner_a", "timeout", T0.Add(Lease))
		MustCode(t, err, keybrake.ECONFLICT)
		if e := MustFind(t, l, "kb_a"); e.LeaseOwner != "owner_b" || e.State != keybrake.EntryPending {
			t.Fatalf("after the old owner's attempts = %+v", e)
		}
	})
	t.Run("Terminal", func(t *testing.T) {
		for _, state := range []string{keybrake.EntryCharged, keybrake.EntryDeclined, keybrake.EntryFailed} {
			t.Run(state, func(t *testing.T) {
				l := open(t)
				MustClaim(t, l, NewEntry("kb_a"), "owner_a", T0)
				done := MustFinish(t, l, keybrake.FinishArgs{Key: "kb_a", Owner: "owner_a", State: state, ChargeID: "ch_1", Reason: "r", Now: T0})
				res := Claim(t, l, NewEntry("kb_a"), "owner_b", T0.Add(48*time.Hour))
				if res.Claimed || res.Conflict != nil {
					t.Fatalf("claim of a %s entry = %+v", state, res)
				}
				sameEntry(t, "terminal entry", res.Entry, done)
			})
		}
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		l := open(t)
		for name, args := range map[string]keybrake.ClaimArgs{
			"NoEntry":       {Owner: "o", Now: T0, Until: T0.Add(Lease)},
			"NoKey":         {Entry: &keybrake.LedgerEntry{Fingerprint: "f", Amount: 1, Currency: "usd"}, Owner: "o", Now: T0, Until: T0.Add(Lease)},
			"NoFingerprint": {Entry: &keybrake.LedgerEntry{Key: "k", Amount: 1, Currency: "usd"}, Owner: "o", Now: T0, Until: T0.Add(Lease)},
			"ZeroAmount":    {Entry: &keybrake.LedgerEntry{Key: "k", Fingerprint: "f", Currency: "usd"}, Owner: "o", Now: T0, Until: T0.Add(Lease)},
			"NoOwner":       {Entry: NewEntry("k"), Now: T0, Until: T0.Add(Lease)},
			"UntilNotAfter": {Entry: NewEntry("k"), Owner: "o", Now: T0, Until: T0},
		} {
			t.Run(name, func(t *testing.T) {
				_, err := l.Claim(ctx, args)
				MustCode(t, err, keybrake.EINVALID)
			})
		}
		if _, err := l.FindEntry(ctx, "k"); keybrake.ErrorCode(err) != keybrake.ENOTFOUND {
			t.Fatalf("an invalid claim wrote an entry: %v", err)
		}
	})
	t.Run("FindEntry", func(t *testing.T) {
		t.Run("ErrNotFound", func(t *testing.T) {
			_, err := open(t).FindEntry(ctx, "kb_missing")
			MustCode(t, err, keybrake.ENOTFOUND)
		})
	})
}

func testFinish(t *testing.T, open func(t *testing.T) keybrake.Ledger) {
	ctx := context.Background()
	finish := func(state, charge, reason string) keybrake.FinishArgs {
		return keybrake.FinishArgs{Key: "kb_a", Owner: "owner_a", State: state, ChargeID: charge, Reason: reason, Now: T0.Add(time.Second)}
	}
	for _, tc := range []struct{ name, state, charge, reason string }{
		{"Charged", keybrake.EntryCharged, "ch_1", ""},
		{"Declined", keybrake.EntryDeclined, "ch_declined", "card_declined/insufficient_funds"},
		{"Failed", keybrake.EntryFailed, "", "idempotency_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := open(t)
			MustClaim(t, l, NewEntry("kb_a"), "owner_a", T0)
			e := MustFinish(t, l, finish(tc.state, tc.charge, tc.reason))
			if e.State != tc.state || e.ChargeID != tc.charge || e.Reason != tc.reason || e.LeaseOwner != "" ||
				!e.LeaseUntil.IsZero() || !e.UpdatedAt.Equal(T0.Add(time.Second)) || e.Attempts != 1 {
				t.Fatalf("finished = %+v", e)
			}
			sameEntry(t, "stored", MustFind(t, l, "kb_a"), e)

			// The same outcome again (a retried Finish) is accepted…
			again := MustFinish(t, l, finish(tc.state, tc.charge, tc.reason))
			sameEntry(t, "finished again", again, e)
			// …another one is not, nor anything else on a final entry.
			_, err := l.Finish(ctx, finish(keybrake.EntryCharged, "ch_other", ""))
			MustCode(t, err, keybrake.ECONFLICT)
			_, err = l.Release(ctx, "kb_a", "owner_a", "x", T0)
			MustCode(t, err, keybrake.ECONFLICT)
			_, err = l.Extend(ctx, "kb_a", "owner_a", T0, T0.Add(Lease))
			MustCode(t, err, keybrake.ECONFLICT)
		})
	}
	t.Run("AfterExpiryNobodyTookOver", func(t *testing.T) {
		// A slow worker whose lease ran out still records what Stripe said.
		l := open(t)
		MustClaim(t, l, NewEntry("kb_a"), "owner_a", T0)
		args := finish(keybrake.EntryCharged, "ch_1", "")
		args.Now = T0.Add(10 * Lease)
		if e := MustFinish(t, l, args); e.State != keybrake.EntryCharged {
			t.Fatalf("finished = %+v", e)
		}
	})
	t.Run("ErrConflictNotHolder", func(t *testing.T) {
		l := open(t)
		MustClaim(t, l, NewEntry("kb_a"), "owner_a", T0)
		args := finish(keybrake.EntryCharged, "ch_1", "")
		args.Owner = "owner_b"
		_, err := l.Finish(ctx, args)
		MustCode(t, err, keybrake.ECONFLICT)
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		l := open(t)
		MustClaim(t, l, NewEntry("kb_a"), "owner_a", T0)
		for name, args := range map[string]keybrake.FinishArgs{
			"Pending":         finish(keybrake.EntryPending, "", ""),
			"Unknown":         finish("settled", "ch_1", ""),
			"ChargedNoCharge": finish(keybrake.EntryCharged, "", ""),
		} {
			t.Run(name, func(t *testing.T) {
				_, err := l.Finish(ctx, args)
				MustCode(t, err, keybrake.EINVALID)
			})
		}
		if e := MustFind(t, l, "kb_a"); e.State != keybrake.EntryPending {
			t.Fatalf("after invalid finishes = %+v", e)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		_, err := open(t).Finish(ctx, finish(keybrake.EntryCharged, "ch_1", ""))
		MustCode(t, err, keybrake.ENOTFOUND)
	})
}

func testExtend(t *testing.T, open func(t *testing.T) keybrake.Ledger) {
	ctx := context.Background()
	t.Run("OK", func(t *testing.T) {
		// A slow call keeps its lease: past the first lease's end nobody
		// takes over.
		l := open(t)
		MustClaim(t, l, NewEntry("kb_a"), "owner_a", T0)
		e, err := l.Extend(ctx, "kb_a", "owner_a", T0.Add(50*time.Second), T0.Add(50*time.Second+Lease))
		if err != nil || !e.LeaseUntil.Equal(T0.Add(50*time.Second+Lease)) || e.LeaseOwner != "owner_a" || e.Attempts != 1 {
			t.Fatalf("Extend = %+v, %v", e, err)
		}
		if res := Claim(t, l, NewEntry("kb_a"), "owner_b", T0.Add(Lease)); res.Claimed {
			t.Fatalf("claim during an extended lease = %+v", res.Entry)
		}
		if res := Claim(t, l, NewEntry("kb_a"), "owner_b", T0.Add(50*time.Second+Lease)); !res.Claimed {
			t.Fatalf("claim after the extended lease = %+v", res.Entry)
		}
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		l := open(t)
		MustClaim(t, l, NewEntry("kb_a"), "owner_a", T0)
		_, err := l.Extend(ctx, "kb_a", "owner_a", T0, T0)
		MustCode(t, err, keybrake.EINVALID)
	})
	t.Run("ErrConflict", func(t *testing.T) {
		l := open(t)
		MustClaim(t, l, NewEntry("kb_a"), "owner_a", T0)
		_, err := l.Extend(ctx, "kb_a", "owner_b", T0, T0.Add(Lease))
		MustCode(t, err, keybrake.ECONFLICT)
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		_, err := open(t).Extend(ctx, "kb_missing", "owner_a", T0, T0.Add(Lease))
		MustCode(t, err, keybrake.ENOTFOUND)
	})
}

func testRelease(t *testing.T, open func(t *testing.T) keybrake.Ledger) {
	ctx := context.Background()
	t.Run("OK", func(t *testing.T) {
		// A transient failure: still pending, nobody holds it, and the next
		// claim takes it at once, with the same first attempt.
		l := open(t)
		MustClaim(t, l, NewEntry("kb_a"), "owner_a", T0)
		e, err := l.Release(ctx, "kb_a", "owner_a", "429 keybrake_spend_cap_exceeded", T0.Add(time.Second))
		if err != nil || e.State != keybrake.EntryPending || e.LeaseOwner != "" || !e.LeaseUntil.IsZero() ||
			e.Reason != "429 keybrake_spend_cap_exceeded" || e.Leased(T0) {
			t.Fatalf("Release = %+v, %v", e, err)
		}
		sameEntry(t, "stored", MustFind(t, l, "kb_a"), e)
		next := MustClaim(t, l, NewEntry("kb_a"), "owner_b", T0.Add(2*time.Second))
		if next.Attempts != 2 || !next.FirstAttemptAt.Equal(T0) {
			t.Fatalf("claim after release = %+v", next)
		}
	})
	t.Run("ErrConflict", func(t *testing.T) {
		l := open(t)
		MustClaim(t, l, NewEntry("kb_a"), "owner_a", T0)
		_, err := l.Release(ctx, "kb_a", "owner_b", "x", T0)
		MustCode(t, err, keybrake.ECONFLICT)
		if _, err := l.Release(ctx, "kb_a", "owner_a", "x", T0); err != nil {
			t.Fatal(err)
		}
		_, err = l.Release(ctx, "kb_a", "owner_a", "x", T0)
		MustCode(t, err, keybrake.ECONFLICT)
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		_, err := open(t).Release(ctx, "kb_missing", "owner_a", "x", T0)
		MustCode(t, err, keybrake.ENOTFOUND)
	})
}

func testMismatch(t *testing.T, open func(t *testing.T) keybrake.Ledger) {
	ctx := context.Background()
	other := func() *keybrake.LedgerEntry {
		e := NewEntry("kb_a")
		e.Fingerprint, e.Amount = "fp_other", 9900
		return e
	}
	for _, state := range []string{keybrake.EntryPending, keybrake.EntryCharged} {
		t.Run(state, func(t *testing.T) {
			// Same key, another amount: recorded as a failed conflict, the
			// first entry untouched whatever its state, never claimable.
			l := open(t)
			orig := MustClaim(t, l, NewEntry("kb_a"), "owner_a", T0)
			if state == keybrake.EntryCharged {
				orig = MustFinish(t, l, keybrake.FinishArgs{Key: "kb_a", Owner: "owner_a", State: state, ChargeID: "ch_1", Now: T0})
			}
			res := Claim(t, l, other(), "owner_b", T0.Add(2*Lease))
			if res.Claimed || res.Conflict == nil {
				t.Fatalf("mismatched claim = %+v", res)
			}
			c := res.Conflict
			if c.ID == 0 || c.Key != "kb_a" || c.Fingerprint != "fp_other" || c.Amount != 9900 || c.Deliveries != 1 || c.Reason == "" {
				t.Fatalf("conflict = %+v", c)
			}
			sameEntry(t, "entry returned", res.Entry, orig)
			sameEntry(t, "entry stored", MustFind(t, l, "kb_a"), orig)

			// The conflicting event delivered again: one row, two deliveries.
			res2 := Claim(t, l, other(), "owner_c", T0.Add(3*Lease))
			if res2.Claimed || res2.Conflict == nil || res2.Conflict.ID != c.ID || res2.Conflict.Deliveries != 2 {
				t.Fatalf("second mismatched claim = %+v", res2.Conflict)
			}
			cs, more, err := l.FindConflicts(ctx, keybrake.ConflictFilter{Key: "kb_a"})
			if err != nil || more || len(cs) != 1 || cs[0].Deliveries != 2 || cs[0].Reason != c.Reason {
				t.Fatalf("FindConflicts = %+v, %v, %v", cs, more, err)
			}
			if cs, _, _ := l.FindConflicts(ctx, keybrake.ConflictFilter{Key: "kb_b"}); len(cs) != 0 {
				t.Fatalf("conflicts of another key = %+v", cs)
			}
			// The original event still proceeds normally.
			if state == keybrake.EntryPending {
				if res := Claim(t, l, NewEntry("kb_a"), "owner_d", T0.Add(4*Lease)); !res.Claimed {
					t.Fatalf("original after a conflict = %+v", res)
				}
			}
		})
	}
	t.Run("FindConflicts", func(t *testing.T) {
		l := open(t)
		for i := range 3 {
			key := fmt.Sprintf("kb_%d", i)
			MustClaim(t, l, NewEntry(key), "owner_a", T0)
			e := NewEntry(key)
			e.Fingerprint = "fp_other"
			Claim(t, l, e, "owner_b", T0)
		}
		page, more, err := l.FindConflicts(ctx, keybrake.ConflictFilter{Limit: 2})
		if err != nil || !more || len(page) != 2 || page[0].Key != "kb_0" || page[1].Key != "kb_1" {
			t.Fatalf("page 1 = %+v, %v, %v", page, more, err)
		}
		page, more, err = l.FindConflicts(ctx, keybrake.ConflictFilter{Limit: 2, StartingAfter: page[1].ID})
		if err != nil || more || len(page) != 1 || page[0].Key != "kb_2" {
			t.Fatalf("page 2 = %+v, %v, %v", page, more, err)
		}
		_, _, err = l.FindConflicts(ctx, keybrake.ConflictFilter{Limit: -1})
		MustCode(t, err, keybrake.EINVALID)
	})
}

func testFindEntries(t *testing.T, open func(t *testing.T) keybrake.Ledger) {
	ctx := context.Background()
	l := open(t)
	// kb_0 pending, kb_1 charged, kb_2 pending, kb_3 declined, kb_4 pending (released).
	for i := range 5 {
		MustClaim(t, l, NewEntry(fmt.Sprintf("kb_%d", i)), "owner_a", T0)
	}
	MustFinish(t, l, keybrake.FinishArgs{Key: "kb_1", Owner: "owner_a", State: keybrake.EntryCharged, ChargeID: "ch_1", Now: T0})
	MustFinish(t, l, keybrake.FinishArgs{Key: "kb_3", Owner: "owner_a", State: keybrake.EntryDeclined, Reason: "declined", Now: T0})
	if _, err := l.Release(ctx, "kb_4", "owner_a", "503", T0); err != nil {
		t.Fatal(err)
	}
	keys := func(f keybrake.EntryFilter) ([]string, bool) {
		t.Helper()
		es, more, err := l.FindEntries(ctx, f)
		if err != nil {
			t.Fatalf("FindEntries(%+v): %v", f, err)
		}
		out := []string{}
		for _, e := range es {
			out = append(out, e.Key)
		}
		return out, more
	}
	for _, tc := range []struct {
		name string
		f    keybrake.EntryFilter
		want []string
		more bool
	}{
		{"All", keybrake.EntryFilter{}, []string{"kb_0", "kb_1", "kb_2", "kb_3", "kb_4"}, false},
		{"Pending", keybrake.EntryFilter{State: keybrake.EntryPending}, []string{"kb_0", "kb_2", "kb_4"}, false},
		{"PendingPage1", keybrake.EntryFilter{State: keybrake.EntryPending, Limit: 2}, []string{"kb_0", "kb_2"}, true},
		{"PendingPage2", keybrake.EntryFilter{State: keybrake.EntryPending, Limit: 2, StartingAfter: "kb_2"}, []string{"kb_4"}, false},
		{"Charged", keybrake.EntryFilter{State: keybrake.EntryCharged}, []string{"kb_1"}, false},
		{"Failed", keybrake.EntryFilter{State: keybrake.EntryFailed}, []string{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, more := keys(tc.f)
			if !reflect.DeepEqual(got, tc.want) || more != tc.more {
				t.Fatalf("= %v (more %v), want %v (more %v)", got, more, tc.want, tc.more)
			}
		})
	}
	t.Run("ErrInvalid", func(t *testing.T) {
		_, _, err := l.FindEntries(ctx, keybrake.EntryFilter{State: "settled"})
		MustCode(t, err, keybrake.EINVALID)
		_, _, err = l.FindEntries(ctx, keybrake.EntryFilter{Limit: -1})
		MustCode(t, err, keybrake.EINVALID)
	})
}

func testConcurrency(t *testing.T, open func(t *testing.T) keybrake.Ledger) {
	t.Run("OneOfFiftyClaims", func(t *testing.T) {
		// 50 deliveries of one event at once: exactly one holds the lease.
		l := open(t)
		const n = 50
		var wg sync.WaitGroup
		results := make(chan *keybrake.ClaimResult, n)
		errs := make(chan error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := l.Claim(context.Background(), keybrake.ClaimArgs{Entry: NewEntry("kb_a"),
					Owner: fmt.Sprintf("owner_%d", i), Now: T0, Until: T0.Add(Lease)})
				if err != nil {
					errs <- err
					return
				}
				results <- res
			}()
		}
		wg.Wait()
		close(results)
		close(errs)
		for err := range errs {
			t.Fatalf("Claim: %v", err)
		}
		claimed := []string{}
		for res := range results {
			if res.Claimed {
				claimed = append(claimed, res.Entry.LeaseOwner)
			}
		}
		if len(claimed) != 1 {
			t.Fatalf("claimed by %v, want exactly one owner", claimed)
		}
		if e := MustFind(t, l, "kb_a"); e.LeaseOwner != claimed[0] || e.Attempts != 1 {
			t.Fatalf("stored = %+v, claimed by %s", e, claimed[0])
		}
	})
	t.Run("OneTakeoverOfFifty", func(t *testing.T) {
		// An expired lease and 50 workers racing to take it over.
		l := open(t)
		MustClaim(t, l, NewEntry("kb_a"), "dead_worker", T0)
		const n = 50
		var wg sync.WaitGroup
		var mu sync.Mutex
		claimed := 0
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := l.Claim(context.Background(), keybrake.ClaimArgs{Entry: NewEntry("kb_a"),
					Owner: fmt.Sprintf("owner_%d", i), Now: T0.Add(Lease), Until: T0.Add(2 * Lease)})
				if err != nil {
					t.Errorf("Claim: %v", err)
					return
				}
				if res.Claimed {
					mu.Lock()
					claimed++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if e := MustFind(t, l, "kb_a"); claimed != 1 || e.Attempts != 2 {
			t.Fatalf("%d takeovers, entry %+v; want 1 and 2 attempts", claimed, e)
		}
	})
}
