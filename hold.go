package keybrake

import (
	"context"
	"time"
)

// A hold is a reservation on an upstream object that can still move money
// without passing keybrake again: a payment intent that its client secret
// can confirm, an authorization that can be captured. keybrake reserves the
// most the object can move when the object becomes movable, keeps it counted
// in full while the object lives (StateHeld), and settles or releases it
// when the object moves or ends.
//
// The lifecycle of a hold, one line per transition:
//
//	(none)    --create request reserved-->            reserved
//	reserved  --upstream 2xx, object still movable--> held        (linked to the object)
//	reserved  --upstream 2xx, money moved-->          settled
//	held      --write through keybrake raises it-->   held        (RaiseHold: the difference, under every cap)
//	held      --confirm/capture moved money-->        settled     (at what moved; the rest is released)
//	held      --cancel, expiry, sweep-->              released
//
// A hold never shrinks while its object lives: lowering an intent's amount
// frees nothing until the intent moves or ends. Writes to one object through
// keybrake are serialised by the object's lock (LockObject), on every
// replica sharing the store, so the amount reserved and the amount executed
// cannot diverge.
type HoldService interface {
	// LockObject takes the lock of the key's object for args.Owner until
	// args.Until and returns the reservation that holds the object for the
	// key, or nil when none does. The lock is the object's, whichever key
	// asks: returns ECONFLICT when another owner holds a lock on the same
	// object, for this key or another, that has not expired at args.Now.
	// Acting on a held object can move money (confirm, capture), so the
	// key is read in the same transaction: returns EFORBIDDEN for a
	// suspended key and EUNAUTHORIZED for a revoked or expired one (as
	// Key.Usable), whatever a replica's key cache still says, and
	// ENOTFOUND for an unknown key.
	LockObject(ctx context.Context, args LockArgs) (*Reservation, error)

	// UnlockObject releases owner's lock of the key's object. A lock that
	// another owner holds, or none, is left as it is.
	UnlockObject(ctx context.Context, keyID, objectID, owner string) error

	// LinkHold records that reservationID holds the key's object objectID
	// until holdUntil, when keybrake ends the hold. An existing link to a
	// live reservation (reserved, held, uncertain) other than reservationID
	// is kept and LinkHold returns ECONFLICT; a link to a final one is
	// replaced. Returns ENOTFOUND for an unknown reservation.
	LinkHold(ctx context.Context, keyID, objectID, reservationID string, holdUntil time.Time) error

	// HeldObjects returns which of objectIDs the key holds: those linked
	// (LinkHold) to a live reservation (reserved, held or uncertain) of
	// the key. It reads and locks nothing; an object another key holds, or
	// none, is not in the result. At most 1000 objects are asked at once:
	// returns EINVALID for more.
	HeldObjects(ctx context.Context, keyID string, objectIDs []string) (map[string]bool, error)

	// RaiseHold raises a live reservation (reserved, held or uncertain) to
	// args.Micros, counting only the difference, checked against every cap
	// of the key in the reservation's own day and month (CheckRaise: the
	// per-request cap against the whole of args.Micros, as the object is
	// one payment), in one transaction that reads the key's current policy. An amount at or below what is
	// held changes nothing. Over a cap it changes nothing and returns
	// OverCap. The breaker's spend-rate rule decides the difference as a
	// reservation of it: a raise that trips it changes nothing, suspends
	// the key in the same transaction and returns Guard. Returns ENOTFOUND for an unknown reservation, ECONFLICT for a
	// settled or released one, EUNAUTHORIZED if the key was revoked or
	// expired.
	RaiseHold(ctx context.Context, args RaiseArgs) (ReserveResult, error)

	// LeaseHolds locks, for owner until `until`, up to limit objects whose
	// hold is held and ended before now (holdUntil), and whose lock is free
	// or expired at now, and returns their reservations, oldest hold end
	// first. It also returns held reservations of an object that another
	// reservation of the key holds (a lost answer resolved after a later
	// request became the object's hold) last changed before orphanedBefore,
	// so no held reservation outlives its object. A limit of 0 means 100.
	LeaseHolds(ctx context.Context, owner string, now, orphanedBefore, until time.Time, limit int) ([]*Reservation, error)

	// RenewHoldLease extends, to args.Until, the lock that args.Owner took
	// on the key's object with LeaseHolds, before the owner acts on the
	// object upstream: the lease may have expired meanwhile (a slow
	// retrieval), and a request may then have taken the object and moved
	// its money. Returns ECONFLICT, changing nothing, when the object's
	// lock is no longer args.Owner's (a request took it, whether or not it
	// still holds it), when another owner holds an unexpired lock on the
	// object for another key, or when reservation args.ReservationID is no
	// longer held; ENOTFOUND for an unknown reservation. The key's status
	// does not matter: a revoked key's holds are swept too.
	RenewHoldLease(ctx context.Context, args RenewArgs) error
}

// RenewArgs asks to extend a sweeper's lease of a held object.
type RenewArgs struct {
	KeyID         string
	ObjectID      string
	ReservationID string // the held reservation leased with the object
	Owner         string // who leased it
	Now           time.Time
	Until         time.Time
}

// MaxHeldObjects is the most objects HeldObjects answers for at once: more
// than a Stripe list page (100) with every object expanded.
const MaxHeldObjects = 1000

// LockArgs asks for the lock of one object of a key.
type LockArgs struct {
	KeyID    string
	ObjectID string // the upstream object: pi_…, ch_…
	Owner    string // who locks it: the request's ID
	Now      time.Time
	Until    time.Time // the lock expires then, so a crashed owner frees it
}

// RaiseArgs raises a hold to a new amount.
type RaiseArgs struct {
	ID       string // the reservation
	Amount   int64  // the new amount in minor units of Currency
	Currency string
	Micros   Micros // the new amount in USD
	Now      time.Time
}

// Live reports whether a reservation still counts its reserved amount and
// may still change: reserved, held or uncertain.
func (r *Reservation) Live() bool {
	switch r.State {
	case StateReserved, StateHeld, StateUncertain:
		return true
	}
	return false
}
