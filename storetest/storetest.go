// Package storetest is the conformance suite for keybrake.Store. Every
// implementation (sqlite, postgres) runs the same Run from its own tests, so
// the money ledger behaves identically whichever store backs the proxy.
//
// The suite never sleeps and never reads the wall clock: every time it passes
// to the store is derived from the fixed instant T0.
//
// Where the interface comments in the root package leave a detail open, the
// suite fixes it, so every store answers the same:
//
//   - Times round-trip to the microsecond, as instants (any zone in, any
//     zone out). Lists and metadata round-trip exactly: nil stays nil, empty
//     stays empty (an empty allowlist must not turn into "no allowlist").
//   - CreateKey returns EINVALID for an empty ID, an empty SecretHash or an
//     unknown Timezone.
//   - Reserve checks, in order: the key exists (ENOTFOUND), is usable at Now
//     (EUNAUTHORIZED, even for a replay), the Idempotency-Key was not used
//     before on this key (Replay, even if now over a cap), then the caps in
//     the order per_request, daily, monthly, total; the first exceeded is
//     reported with Spent as the window's counted sum (0 for per_request).
//     An empty IdempotencyKey or a negative amount is EINVALID. A new
//     reservation gets ID (if empty), State, Day, Month, CreatedAt and
//     UpdatedAt (= Now) filled in; Attempts is 0.
//   - Settle to a state other than settled, released or uncertain, or with
//     a negative SettledMicros, is EINVALID. Uncertain may be repeated.
//     Amount and Currency change only when settling with a Currency; ObjectID
//     and UpstreamStatus only when non-zero. A settled amount above the
//     reserved one counts in full, even past a cap.
//   - SettleLater (keybrake.LaterSettler, which every store implements)
//     takes only settlements to settled, refusing others with EINVALID and
//     queueing nothing; its done callback gets what Settle would have
//     returned, and Close returns only once queued settlements are answered.
//   - FindReservations with Limit 0 returns every match; ties in CreatedAt
//     may come in any order.
//   - LeaseUncertain skips any live lease (LeaseUntil after now), whoever
//     holds it; a lease that ends at now has expired.
//   - Spend of an unknown key or bucket is zero, not an error.
//   - Events need no existing key (a refused unknown vault key is audited
//     with KeyID ""); FindEvents with Limit 0 returns 10.
package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// T0 is the fixed instant the suite's clocks start from. It carries
// microseconds so that stores are checked for microsecond round-trips.
var T0 = time.Date(2026, 11, 29, 15, 4, 5, 123456000, time.UTC)

// Run runs the conformance suite. open must return a fresh, empty, migrated
// store each time it is called (the suite calls it once per subtest); the
// suite closes the store with t.Cleanup, so open must not close it itself
// (it may register its own cleanups, e.g. to drop a schema, which then run
// after the store is closed).
func Run(t *testing.T, open func(t *testing.T) keybrake.Store) {
	o := func(t *testing.T) keybrake.Store {
		t.Helper()
		s := open(t)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	t.Run("Ping", func(t *testing.T) {
		t.Run("OK", func(t *testing.T) {
			if err := o(t).Ping(context.Background()); err != nil {
				t.Fatalf("Ping: %v", err)
			}
		})
	})
	t.Run("Key", func(t *testing.T) { testKeys(t, o) })
	t.Run("Reserve", func(t *testing.T) { testReserve(t, o) })
	t.Run("Settle", func(t *testing.T) { testSettle(t, o) })
	t.Run("SettleLater", func(t *testing.T) { testSettleLater(t, o) })
	t.Run("Rearm", func(t *testing.T) { testRearm(t, o) })
	t.Run("Holds", func(t *testing.T) { testHolds(t, o) })
	t.Run("Windows", func(t *testing.T) { testWindows(t, o) })
	t.Run("Reservations", func(t *testing.T) { testFindReservations(t, o) })
	t.Run("LeaseUncertain", func(t *testing.T) { testLease(t, o) })
	t.Run("Event", func(t *testing.T) { testEvents(t, o) })
	t.Run("Stats", func(t *testing.T) { testStats(t, o) })
	t.Run("AuditChain", func(t *testing.T) { testAuditChain(t, o) })
	t.Run("Concurrency", func(t *testing.T) { testConcurrency(t, o) })
	t.Run("Alerts", func(t *testing.T) { testAlerts(t, o) })
	t.Run("Guards", func(t *testing.T) { testGuards(t, o) })
	t.Run("Admin", func(t *testing.T) { testAdmin(t, o) })
	t.Run("Lifecycle", func(t *testing.T) { testLifecycle(t, o) })
	t.Run("KeyChange", func(t *testing.T) { testKeyChange(t, o) })
	t.Run("Delegation", func(t *testing.T) { testDelegation(t, o) })
	t.Run("Approvals", func(t *testing.T) { testApprovals(t, o) })
	t.Run("Retention", func(t *testing.T) { testRetention(t, o) })
	t.Run("ApprovalAlerts", func(t *testing.T) { testApprovalAlerts(t, o) })
	t.Run("ApprovalParams", func(t *testing.T) { testApprovalParams(t, o) })
	t.Run("DriftAlerts", func(t *testing.T) { testDriftAlerts(t, o) })
	t.Run("Counts", func(t *testing.T) { testCounts(t, o) })
	t.Run("CountsRearm", func(t *testing.T) { testCountsRearm(t, o) })
	t.Run("CountsMonthly", func(t *testing.T) { testCountsMonthly(t, o) })
	t.Run("Scope", func(t *testing.T) { testScopeRoundTrip(t, o) })
	t.Run("VendorResolve", func(t *testing.T) { testVendorResolve(t, o) })
	t.Run("Sent", func(t *testing.T) { testSent(t, o) })
	t.Run("SentPrune", func(t *testing.T) { testSentPrune(t, o) })
	t.Run("KeyVersion", func(t *testing.T) { testKeyVersion(t, o) })
}

// opener is what the test groups receive: open plus the close cleanup.
type opener = func(t *testing.T) keybrake.Store

// USD returns n whole dollars in Micros.
func USD(n int64) keybrake.Micros { return keybrake.Micros(n) * keybrake.MicrosPerUSD }

// Ptr returns a pointer to m, for caps.
func Ptr(m keybrake.Micros) *keybrake.Micros { return &m }

// NewKey returns a valid key with no caps, in UTC, created at T0. Its secret
// hash is derived from id, so distinct ids never collide.
func NewKey(id string) *keybrake.Key {
	sum := sha256.Sum256([]byte(keybrake.VaultKeyPrefix + id))
	return &keybrake.Key{
		ID:           id,
		Vendor:       keybrake.VendorStripe,
		Label:        "test key " + id,
		SecretHash:   hex.EncodeToString(sum[:]),
		SecretPrefix: keybrake.VaultKeyPrefix + "abcd",
		Timezone:     "UTC",
		CreatedAt:    T0,
		UpdatedAt:    T0,
	}
}

// NewReservation returns a reservation request of m USD micros for a charge
// on keyID under the given Idempotency-Key.
func NewReservation(keyID, idem string, m keybrake.Micros) *keybrake.Reservation {
	return &keybrake.Reservation{
		KeyID:          keyID,
		IdempotencyKey: idem,
		Fingerprint:    "fp-" + idem,
		Operation:      "charges.create",
		Amount:         int64(m / 10_000),
		Currency:       "usd",
		Micros:         m,
		Request: keybrake.UpstreamRequest{
			Method: "POST",
			Path:   "/v1/charges",
			Body:   "amount=100&currency=usd&metadata[order]=" + idem,
		},
	}
}

// MustCreateKey stores k or fails the test.
func MustCreateKey(tb testing.TB, s keybrake.Store, k *keybrake.Key) *keybrake.Key {
	tb.Helper()
	if err := s.CreateKey(context.Background(), k); err != nil {
		tb.Fatalf("CreateKey(%s): %v", k.ID, err)
	}
	return k
}

// MustCreateCappedKey stores a fresh key with the given caps and zone.
func MustCreateCappedKey(tb testing.TB, s keybrake.Store, id, tz string, caps keybrake.Caps) *keybrake.Key {
	tb.Helper()
	k := NewKey(id)
	k.Caps = caps
	k.Timezone = tz
	return MustCreateKey(tb, s, k)
}

// MustReserve reserves m on keyID at now and fails the test unless the
// reservation was recorded (not a replay, not over a cap).
func MustReserve(tb testing.TB, s keybrake.Store, keyID, idem string, m keybrake.Micros, now time.Time) *keybrake.Reservation {
	tb.Helper()
	res, err := s.Reserve(context.Background(), keybrake.ReserveArgs{Reservation: NewReservation(keyID, idem, m), Now: now})
	if err != nil {
		tb.Fatalf("Reserve(%s, %s): %v", keyID, idem, err)
	}
	if res.OverCap != nil {
		tb.Fatalf("Reserve(%s, %s): over cap: %+v", keyID, idem, *res.OverCap)
	}
	if res.Replay {
		tb.Fatalf("Reserve(%s, %s): unexpected replay", keyID, idem)
	}
	return res.Reservation
}

// MustOverCap reserves m on keyID at now and fails the test unless it was
// refused; it returns the refusal.
func MustOverCap(tb testing.TB, s keybrake.Store, keyID, idem string, m keybrake.Micros, now time.Time) *keybrake.OverCap {
	tb.Helper()
	res, err := s.Reserve(context.Background(), keybrake.ReserveArgs{Reservation: NewReservation(keyID, idem, m), Now: now})
	if err != nil {
		tb.Fatalf("Reserve(%s, %s): %v", keyID, idem, err)
	}
	if res.OverCap == nil {
		tb.Fatalf("Reserve(%s, %s) of %s: want over cap, got %+v", keyID, idem, m, res.Reservation)
	}
	return res.OverCap
}

// MustSettle applies args or fails the test.
func MustSettle(tb testing.TB, s keybrake.Store, args keybrake.SettleArgs) *keybrake.Reservation {
	tb.Helper()
	r, err := s.Settle(context.Background(), args)
	if err != nil {
		tb.Fatalf("Settle(%s, %s): %v", args.ID, args.State, err)
	}
	return r
}

// MustSpend returns the key's spend in the buckets of t in loc.
func MustSpend(tb testing.TB, s keybrake.Store, keyID string, t time.Time, loc *time.Location) keybrake.Spend {
	tb.Helper()
	day, month := keybrake.Buckets(t, loc)
	sp, err := s.Spend(context.Background(), keyID, day, month)
	if err != nil {
		tb.Fatalf("Spend(%s, %s, %s): %v", keyID, day, month, err)
	}
	return sp
}

// MustLocation loads a zone or fails the test.
func MustLocation(tb testing.TB, name string) *time.Location {
	tb.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		tb.Fatalf("LoadLocation(%q): %v", name, err)
	}
	return loc
}

// wantCode fails the test unless err carries the keybrake error code.
func wantCode(tb testing.TB, err error, code string) {
	tb.Helper()
	if got := keybrake.ErrorCode(err); got != code {
		tb.Fatalf("error code = %q (%v), want %q", got, err, code)
	}
}

// wantSpend fails the test unless got equals want.
func wantSpend(tb testing.TB, got, want keybrake.Spend) {
	tb.Helper()
	if got != want {
		tb.Fatalf("spend = %+v, want %+v", got, want)
	}
}

// wantTime fails the test unless got and want are the same instant.
func wantTime(tb testing.TB, name string, got, want time.Time) {
	tb.Helper()
	if !got.Equal(want) {
		tb.Fatalf("%s = %v, want %v", name, got, want)
	}
}

// wantTimePtr is wantTime for optional times.
func wantTimePtr(tb testing.TB, name string, got, want *time.Time) {
	tb.Helper()
	switch {
	case got == nil && want == nil:
	case got == nil || want == nil:
		tb.Fatalf("%s = %v, want %v", name, got, want)
	default:
		wantTime(tb, name, *got, *want)
	}
}
