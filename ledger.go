package keybrake

import (
	"context"
	"fmt"
	"time"
)

// Ledger entry states. Pending is the only state that changes; charged,
// declined and failed are final.
const (
	EntryPending  = "pending"  // claimed; the charge may or may not exist yet
	EntryCharged  = "charged"  // Stripe created the charge (ChargeID)
	EntryDeclined = "declined" // the card was declined (Reason); no money moved
	EntryFailed   = "failed"   // a permanent failure (Reason), e.g. an idempotency_error
)

// LedgerEntry is the durable record of one billing event, identified by its
// content idempotency key. It is written before Stripe is called, so a worker
// that dies mid-call leaves a pending entry for another worker to recover
// with the same key, instead of nothing (a lost charge) or a row that says
// "done" (the seeds' "skip if the row exists").
type LedgerEntry struct {
	Key         string `json:"key"`      // the content idempotency key, also Stripe's Idempotency-Key
	State       string `json:"state"`    // EntryPending, EntryCharged, EntryDeclined or EntryFailed
	Amount      int64  `json:"amount"`   // minor units of Currency
	Currency    string `json:"currency"` // lower-case ISO code
	Customer    string `json:"customer"` // the Stripe customer, "" when paid by source or payment method alone
	Fingerprint string `json:"fingerprint"`
	ChargeID    string `json:"charge_id,omitempty"`
	Reason      string `json:"reason,omitempty"` // why declined or failed; for pending, the last transient failure

	// Attempts counts the claims that took the lease: the first claim and
	// every takeover of a released or expired lease.
	Attempts int `json:"attempts"`
	// LeaseOwner holds the entry while LeaseUntil is in the future; "" with
	// a zero LeaseUntil when nobody does.
	LeaseOwner string    `json:"lease_owner,omitempty"`
	LeaseUntil time.Time `json:"lease_until"`
	// FirstAttemptAt is when the entry was first claimed. Stripe forgets an
	// Idempotency-Key 24 hours after its first use, which is never earlier
	// than this, so past ~23 hours a worker must look the charge up by
	// metadata before creating one.
	FirstAttemptAt time.Time `json:"first_attempt_at"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// Terminal reports whether the entry reached a final state.
func (e *LedgerEntry) Terminal() bool { return e.State != EntryPending }

// Leased reports whether someone holds a live lease on the entry at now.
func (e *LedgerEntry) Leased(now time.Time) bool {
	return e.LeaseOwner != "" && now.Before(e.LeaseUntil)
}

// LedgerConflict records a billing event that arrived under the key of an
// existing entry with another fingerprint: the same customer and period with
// another amount, currency, payer or description. Such an event is failed,
// never charged: the first event to claim a key owns it, and the entry it
// created is left exactly as it was. A conflict row is the failed record of
// the later event; one row per (key, fingerprint), counting deliveries.
type LedgerConflict struct {
	ID          int64     `json:"id"`
	Key         string    `json:"key"`
	Fingerprint string    `json:"fingerprint"` // the conflicting event's fingerprint
	Amount      int64     `json:"amount"`
	Currency    string    `json:"currency"`
	Customer    string    `json:"customer"`
	Reason      string    `json:"reason"`
	Deliveries  int       `json:"deliveries"` // how many times the conflicting event arrived
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// ClaimArgs asks for the lease on an event's entry.
type ClaimArgs struct {
	// Entry carries the event: Key, Fingerprint, Amount, Currency and
	// Customer. The other fields are ignored.
	Entry *LedgerEntry
	// Owner identifies the claimant. It must be unique per attempt (per
	// processing of one delivery), not per process: two goroutines of one
	// worker are two owners.
	Owner string
	Now   time.Time
	Until time.Time // the lease expiry; must be after Now
}

// ClaimResult is the ledger's answer to a claim.
type ClaimResult struct {
	// Entry is the entry as stored after the claim.
	Entry *LedgerEntry
	// Claimed is true when the caller now holds the lease and must call
	// Stripe with Entry.Key, then Finish or Release. It is false when the
	// entry is final, when another owner holds a live lease, or on a
	// conflict.
	Claimed bool
	// Conflict is set, and Claimed false, when the key's entry has another
	// fingerprint; the conflict is recorded (failed) before Claim returns.
	Conflict *LedgerConflict
}

// FinishArgs moves a pending entry held by Owner to a final state.
type FinishArgs struct {
	Key      string
	Owner    string
	State    string // EntryCharged, EntryDeclined or EntryFailed
	ChargeID string // required for EntryCharged; the declined charge, if any, for EntryDeclined
	Reason   string
	Now      time.Time
}

// EntryFilter selects a page of entries ordered by key.
type EntryFilter struct {
	State         string // "" for every state
	Limit         int    // at most this many; 0 means the default of 10, at most 1000
	StartingAfter string // the key of the last entry of the previous page
}

// ConflictFilter selects a page of conflicts ordered by ID.
type ConflictFilter struct {
	Key           string // "" for every key
	Limit         int    // at most this many; 0 means the default of 10, at most 1000
	StartingAfter int64  // the ID of the last conflict of the previous page
}

// Ledger is the durable state machine of the exactly-once billing consumer:
//
//	(absent) --Claim--> pending(lease) --Finish--> charged | declined | failed
//	pending, lease released or expired --Claim--> pending(new lease), Attempts+1
//
// Every method is atomic, and safe for concurrent use by several workers
// (goroutines, processes and, for PostgreSQL, hosts). Times are passed in,
// never read from a clock, and kept to the microsecond.
type Ledger interface {
	// Claim inserts a pending entry leased to Owner until Until, or takes
	// over a pending entry whose lease is released or expired at Now
	// (incrementing Attempts). A final entry, or a pending one whose live
	// lease another owner holds, is returned with Claimed false. Claiming
	// again with the owner that holds the live lease moves Until and
	// returns Claimed true, so a claim whose commit was lost can be
	// retried. An entry with another fingerprint is left alone; the event
	// is recorded as a LedgerConflict and returned in Conflict. Returns
	// EINVALID if a field is missing or Until is not after Now.
	Claim(ctx context.Context, args ClaimArgs) (*ClaimResult, error)

	// Extend moves the lease of a pending entry held by owner to until, so
	// a slow Stripe call does not let another worker take over mid-call.
	// Returns ENOTFOUND if there is no entry, ECONFLICT if the entry is
	// final or owner no longer holds it (another owner took it, or it was
	// released), and EINVALID if until is not after now.
	Extend(ctx context.Context, key, owner string, now, until time.Time) (*LedgerEntry, error)

	// Finish records the final outcome of a pending entry held by Owner
	// and clears the lease. An expired lease nobody took over still counts
	// as held: the outcome is true whoever learned it. Finishing an entry
	// that already has the same State and ChargeID returns it unchanged,
	// so a Finish whose commit was lost can be retried. Returns ENOTFOUND
	// if there is no entry, ECONFLICT if another owner holds it, it was
	// released, or it is final with another outcome, and EINVALID for a
	// state that is not final or a charged state without ChargeID.
	Finish(ctx context.Context, args FinishArgs) (*LedgerEntry, error)

	// Release gives up owner's lease after a transient failure (5xx,
	// timeout, over cap): the entry stays pending with no lease, reason is
	// kept, and the next Claim takes it at once. Returns ENOTFOUND if there
	// is no entry and ECONFLICT if it is final or owner does not hold it.
	Release(ctx context.Context, key, owner, reason string, now time.Time) (*LedgerEntry, error)

	// FindEntry returns the entry of key. Returns ENOTFOUND if none.
	FindEntry(ctx context.Context, key string) (*LedgerEntry, error)

	// FindEntries returns a page of entries, ordered by key, and whether
	// more follow; for reconciliation (pending entries nobody holds, the
	// charged entries of a period). Returns EINVALID for an unknown state
	// or a negative limit.
	FindEntries(ctx context.Context, f EntryFilter) ([]*LedgerEntry, bool, error)

	// FindConflicts returns a page of conflicts, ordered by ID, and whether
	// more follow. Returns EINVALID for a negative limit.
	FindConflicts(ctx context.Context, f ConflictFilter) ([]*LedgerConflict, bool, error)
}

// ValidEntryState reports whether s is one of the entry states.
func ValidEntryState(s string) bool {
	switch s {
	case EntryPending, EntryCharged, EntryDeclined, EntryFailed:
		return true
	}
	return false
}

// Validate returns EINVALID naming the first missing or unacceptable field
// of a claim.
func (a *ClaimArgs) Validate() error {
	switch {
	case a.Entry == nil:
		return ErrorParam("entry", "A claim needs an entry.")
	case a.Entry.Key == "":
		return ErrorParam("key", "A ledger entry needs a key.")
	case len(a.Entry.Key) > 255:
		return ErrorParam("key", "A ledger key is at most 255 characters.")
	case a.Entry.Fingerprint == "":
		return ErrorParam("fingerprint", "A ledger entry needs a fingerprint.")
	case a.Entry.Amount <= 0:
		return ErrorParam("amount", "A ledger entry needs a positive amount.")
	case a.Entry.Currency == "":
		return ErrorParam("currency", "A ledger entry needs a currency.")
	case a.Owner == "":
		return ErrorParam("owner", "A claim needs an owner.")
	case !a.Until.After(a.Now):
		return ErrorParam("until", "The lease must end after now.")
	}
	return nil
}

// Validate returns EINVALID naming the first missing or unacceptable field
// of a finish.
func (a *FinishArgs) Validate() error {
	switch {
	case a.Key == "":
		return ErrorParam("key", "Finish needs a key.")
	case a.Owner == "":
		return ErrorParam("owner", "Finish needs an owner.")
	case a.State != EntryCharged && a.State != EntryDeclined && a.State != EntryFailed:
		return ErrorParam("state", "Finish needs a final state (charged, declined or failed), not %q.", a.State)
	case a.State == EntryCharged && a.ChargeID == "":
		return ErrorParam("charge_id", "A charged entry needs its charge ID.")
	}
	return nil
}

// The transitions below are the state machine itself, shared by every Ledger
// implementation: a store reads the current entry under its lock, applies
// one of them, and writes the result in the same transaction.

// Apply returns what a claim makes of cur (nil when the key has no entry):
// the entry to store (nil when nothing changes), and whether the claimant
// holds the lease. A conflict (cur has another fingerprint) is the caller's
// to detect first, with Conflicts.
func (a *ClaimArgs) Apply(cur *LedgerEntry) (next *LedgerEntry, claimed bool) {
	if cur == nil {
		e := *a.Entry
		e.State, e.ChargeID, e.Reason = EntryPending, "", ""
		e.Attempts = 1
		e.LeaseOwner, e.LeaseUntil = a.Owner, a.Until
		e.FirstAttemptAt, e.CreatedAt, e.UpdatedAt = a.Now, a.Now, a.Now
		return &e, true
	}
	if cur.Terminal() {
		return nil, false
	}
	e := *cur
	switch {
	case cur.Leased(a.Now) && cur.LeaseOwner != a.Owner:
		return nil, false
	case cur.Leased(a.Now):
		// The holder claims again (its first claim's answer was lost).
	default:
		e.Attempts++
	}
	e.LeaseOwner, e.LeaseUntil, e.UpdatedAt = a.Owner, a.Until, a.Now
	return &e, true
}

// Conflicts reports whether a claim for the key of cur carries another
// fingerprint, and if so returns the conflict to record (Deliveries 1, no
// ID; a store that already has one for the fingerprint adds a delivery).
func (a *ClaimArgs) Conflicts(cur *LedgerEntry) (*LedgerConflict, bool) {
	if cur == nil || cur.Fingerprint == a.Entry.Fingerprint {
		return nil, false
	}
	in := a.Entry
	return &LedgerConflict{
		Key: cur.Key, Fingerprint: in.Fingerprint, Amount: in.Amount, Currency: in.Currency, Customer: in.Customer,
		Reason: fmt.Sprintf("billing event for key %s conflicts with the recorded one: %d %s for customer %q, "+
			"but the key's entry (%s) is %d %s for customer %q; the same key with other contents is never charged",
			cur.Key, in.Amount, in.Currency, in.Customer, cur.State, cur.Amount, cur.Currency, cur.Customer),
		Deliveries: 1, CreatedAt: a.Now, UpdatedAt: a.Now,
	}, true
}

// Apply returns what finishing makes of cur, or the error Ledger.Finish
// documents. next is nil when cur already has the outcome.
func (a *FinishArgs) Apply(cur *LedgerEntry) (next *LedgerEntry, err error) {
	if cur.Terminal() {
		if cur.State == a.State && cur.ChargeID == a.ChargeID {
			return nil, nil
		}
		return nil, Errorf(ECONFLICT, "The ledger entry %s is already %s.", cur.Key, cur.State)
	}
	if cur.LeaseOwner != a.Owner {
		return nil, Errorf(ECONFLICT, "The lease on ledger entry %s was lost: %s does not hold it.", cur.Key, a.Owner)
	}
	e := *cur
	e.State, e.ChargeID, e.Reason = a.State, a.ChargeID, a.Reason
	e.LeaseOwner, e.LeaseUntil, e.UpdatedAt = "", time.Time{}, a.Now
	return &e, nil
}

// ApplyExtend returns what Ledger.Extend makes of cur, or its error.
func ApplyExtend(cur *LedgerEntry, owner string, now, until time.Time) (*LedgerEntry, error) {
	if !until.After(now) {
		return nil, ErrorParam("until", "The lease must end after now.")
	}
	if err := holds(cur, owner); err != nil {
		return nil, err
	}
	e := *cur
	e.LeaseUntil, e.UpdatedAt = until, now
	return &e, nil
}

// ApplyRelease returns what Ledger.Release makes of cur, or its error.
func ApplyRelease(cur *LedgerEntry, owner, reason string, now time.Time) (*LedgerEntry, error) {
	if err := holds(cur, owner); err != nil {
		return nil, err
	}
	e := *cur
	e.LeaseOwner, e.LeaseUntil, e.Reason, e.UpdatedAt = "", time.Time{}, reason, now
	return &e, nil
}

// holds returns ECONFLICT unless cur is pending and leased to owner.
func holds(cur *LedgerEntry, owner string) error {
	switch {
	case cur.Terminal():
		return Errorf(ECONFLICT, "The ledger entry %s is already %s.", cur.Key, cur.State)
	case owner == "" || cur.LeaseOwner != owner:
		return Errorf(ECONFLICT, "The lease on ledger entry %s was lost: %q does not hold it.", cur.Key, owner)
	}
	return nil
}
