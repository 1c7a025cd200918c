package keybrake

import (
	"context"
	"strings"
	"time"
)

// Refusal kinds: why keybrake refused a request, as the operator console
// counts refusals.
const (
	RefusalCap    = "cap"    // a spend cap would have been exceeded (429)
	RefusalAuth   = "auth"   // the vault key was revoked or expired (401)
	RefusalPolicy = "policy" // any other refusal: allowlist, scope, unpriced, card data, malformed
)

// RefusalCapMarker is the text every over-cap refusal's reason contains
// ("… would exceed the daily cap of $25.00 …", "… is over the per-request
// cap of $5.00 …"); stores match it to count refusals by kind.
const RefusalCapMarker = "cap of $"

// RefusalKind classifies a deny event by its Reason: "revoked" and
// "expired" are the reasons the proxy records for a key that may no longer
// authenticate; a reason containing RefusalCapMarker is an over-cap
// refusal; every other refusal is policy.
func RefusalKind(reason string) string {
	switch {
	case reason == "revoked" || reason == "expired":
		return RefusalAuth
	case strings.Contains(reason, RefusalCapMarker):
		return RefusalCap
	}
	return RefusalPolicy
}

// StatsFilter selects what a summary covers: one key or every key (KeyID
// ""), and a time range [From, To).
type StatsFilter struct {
	KeyID string
	From  time.Time
	To    time.Time
}

// EventCounts counts audit events by decision, and refusals by kind.
type EventCounts struct {
	Calls         int64 `json:"calls"`    // requests answered: allow + deny + replay (resolutions are not calls)
	Allowed       int64 `json:"allowed"`  // forwarded upstream
	Replayed      int64 `json:"replayed"` // replays of an Idempotency-Key, not counted again
	Resolved      int64 `json:"resolved"` // uncertain outcomes the resolver settled
	RefusedCap    int64 `json:"refused_cap"`
	RefusedAuth   int64 `json:"refused_auth"`
	RefusedPolicy int64 `json:"refused_policy"`
}

// Refused returns every refusal, whatever its kind.
func (c EventCounts) Refused() int64 { return c.RefusedCap + c.RefusedAuth + c.RefusedPolicy }

// SpendPoint is the spend of the reservations created within one hour.
type SpendPoint struct {
	Start  time.Time `json:"start"` // the hour's first instant, UTC
	Micros Micros    `json:"usd"`
}

// OpenAmounts is money counted against caps whose fate is not final yet.
type OpenAmounts struct {
	Uncertain       int64  `json:"uncertain"`     // reservations whose upstream outcome is unknown
	UncertainMicros Micros `json:"uncertain_usd"` // what they count
	Held            int64  `json:"held"`          // holds on objects that can still move money
	HeldMicros      Micros `json:"held_usd"`      // what they count
}

// StatsService summarises the ledger and the audit log for the operator
// console. Every method only reads.
type StatsService interface {
	// CountEvents counts the events of f.KeyID (every key for "") whose
	// Time is in [f.From, f.To), by decision, and the refusals by
	// RefusalKind.
	CountEvents(ctx context.Context, f StatsFilter) (EventCounts, error)

	// SpendByHour returns what the reservations of f.KeyID (every key for
	// "") created in [f.From, f.To) count against the caps now — settled:
	// the settled amount; reserved, uncertain and held: the reserved
	// amount; released: nothing — summed per UTC hour of their creation.
	// Only hours with at least one such reservation are returned, oldest
	// first, even when their sum is zero.
	SpendByHour(ctx context.Context, f StatsFilter) ([]SpendPoint, error)

	// OpenAmounts returns the uncertain and held reservations of keyID
	// (every key for "") and what they count.
	OpenAmounts(ctx context.Context, keyID string) (OpenAmounts, error)
}
