package keybrake

import (
	"context"
	"time"
)

// Reservation states. Reserved, uncertain and settled amounts all count
// against the caps; released amounts do not.
const (
	StateReserved  = "reserved"  // held while the request is upstream
	StateSettled   = "settled"   // upstream succeeded; holds the actual amount
	StateReleased  = "released"  // upstream refused (4xx); nothing counted
	StateUncertain = "uncertain" // upstream outcome unknown; still counted until resolved
	StateHeld      = "held"      // the object upstream can still move money without keybrake; counted in full (see HoldService)
)

// UpstreamRequest is what the proxy forwarded, kept so the resolver can
// replay the identical request with the same Idempotency-Key.
type UpstreamRequest struct {
	Method        string `json:"method"`
	Path          string `json:"path"` // e.g. /v1/charges
	Body          string `json:"body"` // form-encoded, exactly as forwarded
	StripeAccount string `json:"stripe_account,omitempty"`
	StripeVersion string `json:"stripe_version,omitempty"`
}

// Reservation is an amount held against a key's caps for one money-moving
// request, identified by the request's Idempotency-Key.
type Reservation struct {
	ID             string          `json:"id"`
	KeyID          string          `json:"key_id"`
	IdempotencyKey string          `json:"idempotency_key"`
	Fingerprint    string          `json:"-"` // hash of the request, to tell a replay from a reuse
	Operation      string          `json:"operation"`
	Amount         int64           `json:"amount"`   // minor units of Currency
	Currency       string          `json:"currency"` // lower-case ISO code
	Micros         Micros          `json:"usd"`      // reserved, in USD
	SettledMicros  Micros          `json:"settled_usd"`
	State          string          `json:"state"`
	Day            string          `json:"day"`   // the daily bucket the amount counts in
	Month          string          `json:"month"` // the monthly bucket the amount counts in
	Request        UpstreamRequest `json:"-"`
	ObjectID       string          `json:"object_id,omitempty"`
	UpstreamStatus int             `json:"upstream_status,omitempty"`
	Attempts       int             `json:"attempts"`
	Customer       string          `json:"customer,omitempty"`   // the customer, else the payment method, the request names: what velocity limits count per customer
	DupKey         string          `json:"-"`                    // what the duplicate guard compares (GuardKey), "" for nothing
	Override       bool            `json:"-"`                    // the request asks past the duplicate guard (OverrideHeader); honoured only if the key allows it
	CountKind      string          `json:"count_kind,omitempty"` // what the daily count caps count (CountMessages…), "" for nothing
	Count          int64           `json:"count,omitempty"`      // how many of CountKind the request sends
	LeaseOwner     string          `json:"-"`
	LeaseUntil     time.Time       `json:"-"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
}

// OverCap describes the first window a reservation would exceed.
type OverCap struct {
	Window    string     `json:"window"`
	Cap       Micros     `json:"cap_usd"`
	Spent     Micros     `json:"spent_usd"` // settled + reserved + uncertain in the window
	Requested Micros     `json:"requested_usd"`
	ResetsAt  *time.Time `json:"resets_at"` // nil for the per-request and total windows
}

// Remaining returns what is left under the cap, never negative.
func (o *OverCap) Remaining() Micros {
	if r := o.Cap - o.Spent; r > 0 {
		return r
	}
	return 0
}

// ReserveArgs asks to hold Reservation.Micros against every cap of the key.
// The store fills in ID (if empty), State, Day, Month and the timestamps.
type ReserveArgs struct {
	Reservation *Reservation
	Now         time.Time
	// KeyVersion is the Key.Version the request was decided on. When set
	// and the key is now another version, nothing is reserved and the
	// result is Stale: the caller decides again on the key as it is now.
	// "" checks nothing (a caller that read no key, or a store without
	// versions). Rearm ignores it.
	KeyVersion string
}

// ReserveResult is the store's decision on a reservation.
type ReserveResult struct {
	// Reservation is the new reservation, or for a replay the existing one.
	Reservation *Reservation
	// Replay is true when the key already has a reservation for this
	// Idempotency-Key: nothing new was counted.
	Replay bool
	// OverCap is set, and nothing recorded, when a cap would be exceeded.
	OverCap *OverCap
	// Guard is set, and nothing reserved, when one of the key's guards
	// refuses the reservation (guard.go); the caps held.
	Guard *GuardRefusal
	// OverCount is set, and nothing recorded, when a daily count cap
	// would be exceeded (vendor.go); the USD caps held.
	OverCount *OverCount
	// Stale is set, and nothing reserved or counted, when the key is no
	// longer the ReserveArgs.KeyVersion the request was decided on.
	Stale bool
}

// SettleArgs moves a reservation to a new state.
type SettleArgs struct {
	ID             string
	State          string // StateSettled, StateReleased, StateUncertain or StateHeld
	SettledMicros  Micros // for StateSettled: the actual amount in USD; for StateHeld: what the object can still move (the hold grows to it, never shrinks)
	Amount         int64  // for StateSettled and StateHeld: the amount in minor units
	Currency       string
	ObjectID       string
	UpstreamStatus int
	Now            time.Time
}

// ReservationFilter selects reservations.
type ReservationFilter struct {
	KeyID       string
	State       string
	Limit       int
	CreatedFrom time.Time // when set, only reservations created at or after it
	// CreatedBefore, when set, keeps only reservations created before it.
	CreatedBefore time.Time
	// ObjectID, when set, keeps only Twilio reservations (operation
	// "twilio.…") linked to that upstream object (a Twilio sid): who already
	// accounts for it. Other vendors' objects (a Stripe charge ID) are not
	// found by it: the stores index Twilio's alone, so that a Stripe
	// settlement writes no page at a random place of a large index.
	ObjectID string
	// Operation, when set, keeps only that operation
	// ("twilio.messages.create").
	Operation string
	// Open keeps only reservations still reserved or uncertain.
	Open bool
}

// LeaseHeldArgs asks for the held reservations of some operations that are
// due for another look upstream (a Twilio price not reported yet).
type LeaseHeldArgs struct {
	Operations []string // e.g. "twilio.messages.create"; none leases nothing
	Owner      string
	Now        time.Time
	// Until ends the lease; it is also when the reservation is next due,
	// on any replica.
	Until time.Time
	Limit int // 0 means 100
}

// Spend is what counts against a key's caps in the windows containing a time.
type Spend struct {
	Day       Micros `json:"daily_usd"`
	Month     Micros `json:"monthly_usd"`
	Total     Micros `json:"total_usd"`
	Uncertain Micros `json:"uncertain_usd"` // part of Total whose outcome is not yet known
	Held      Micros `json:"held_usd"`      // part of Total held on objects that can still move money (see HoldService)
}

// SpendService holds the money ledger of the proxy. Every method is atomic.
type SpendService interface {
	// Reserve checks every cap of the key, reading the key's current policy
	// inside the same transaction, and records the reservation. A replayed
	// Idempotency-Key returns the existing reservation with Replay set. Over a
	// cap it records nothing and returns OverCap. Returns EUNAUTHORIZED if the
	// key was revoked or expired meanwhile, ENOTFOUND if it does not exist.
	Reserve(ctx context.Context, args ReserveArgs) (ReserveResult, error)

	// Rearm reserves again, in place, the key's released reservation for
	// args.Reservation.IdempotencyKey: after an answer Stripe does not save
	// (a 400 before processing, a 429 rate limit) a retry under the same key
	// runs anew at Stripe, so it must be counted anew. In one transaction it
	// reads the key's policy, checks every cap against the new amount in
	// the windows of args.Now, and moves the reservation back to reserved
	// with the new request, amount and fingerprint. Over a cap it changes
	// nothing and returns OverCap. Returns ENOTFOUND if the key has no
	// reservation under that Idempotency-Key, ECONFLICT if it is not
	// released, EUNAUTHORIZED if the key was revoked or expired.
	Rearm(ctx context.Context, args ReserveArgs) (ReserveResult, error)

	// Settle moves a reservation to settled, released, uncertain or held
	// and adjusts the counters. Settled and released are final: settling
	// them again returns ECONFLICT. Settling to held keeps the larger of
	// the reserved amount and SettledMicros (a hold never shrinks while its
	// object lives); settling a held reservation to settled counts what
	// moved and releases the rest. Returns ENOTFOUND for an unknown ID.
	Settle(ctx context.Context, args SettleArgs) (*Reservation, error)

	// FindReservationByID returns a reservation. Returns ENOTFOUND.
	FindReservationByID(ctx context.Context, id string) (*Reservation, error)

	// FindReservations returns reservations matching f, oldest first.
	FindReservations(ctx context.Context, f ReservationFilter) ([]*Reservation, error)

	// LeaseUncertain takes a lease until `until` on up to limit reservations
	// that are uncertain, or reserved and older than staleBefore (a crashed
	// request), whose lease is free or expired at now, and returns them with
	// Attempts incremented.
	LeaseUncertain(ctx context.Context, owner string, now, staleBefore, until time.Time, limit int) ([]*Reservation, error)

	// LeaseHeld takes a lease until args.Until on up to args.Limit held
	// reservations of args.Operations whose lease is free or expired at
	// args.Now, never-leased and longest-due first, and returns them. The
	// lease is the due time: a reservation leased now is not returned
	// again, to any owner, before Until, so a pass reads only what is due
	// and never every held reservation.
	LeaseHeld(ctx context.Context, args LeaseHeldArgs) ([]*Reservation, error)

	// Spend returns the key's spend in the day and month buckets named.
	Spend(ctx context.Context, keyID, day, month string) (Spend, error)
}

// Store is everything the proxy keeps durably.
type Store interface {
	KeyService
	SpendService
	HoldService
	EventService
	StatsService
	AuditChainService
	AlertService
	GuardService
	DelegationService
	ApprovalService
	RetentionService
	SentService
	// Ping returns EUNAVAILABLE if the store cannot be reached.
	Ping(ctx context.Context) error
	// Close releases the store's resources.
	Close() error
}

// RaiseBuckets returns the day and month in which a raise of hold r at now
// counts: now's, in loc, when later than the hold's own; else the hold's.
// A hold raised on a later day moves into it whole: the raise makes its
// whole new amount movable that day, and counting only the difference
// there (or nothing, in the day the hold was made) let one calendar day
// move its daily cap several times over (an intent held at 23:30 and
// another at 23:50 on the day before, both raised after midnight). The
// stores move the hold's counters and its day and month, then raise it.
func RaiseBuckets(r *Reservation, now time.Time, loc *time.Location) (day, month string) {
	day, month = Buckets(now, loc)
	if day < r.Day {
		day = r.Day
	}
	if month < r.Month {
		month = r.Month
	}
	return day, month
}

// RaiseSpend is spent, read in the day and month a raise counts in
// (RaiseBuckets), as CheckRaise takes it: a window the hold moves into
// does not count it yet, so the raise's whole target is checked there.
func RaiseSpend(spent Spend, r *Reservation, day, month string) Spend {
	if day != r.Day {
		spent.Day += r.Micros
	}
	if month != r.Month {
		spent.Month += r.Micros
	}
	return spent
}

// CheckRaise is CheckCaps for raising a hold from held to target micros:
// the windows count the difference (spent as RaiseSpend gives it), but the per-request cap bounds the
// whole target, since the object is one payment however many raises it
// took (a $40 intent raised $49 at a time must not reach $1,000 under a
// $50 per-request cap).
func CheckRaise(caps Caps, spent Spend, held, target Micros, now time.Time, loc *time.Location) *OverCap {
	if caps.PerRequest != nil && target > *caps.PerRequest {
		return &OverCap{Window: WindowPerRequest, Cap: *caps.PerRequest, Requested: target}
	}
	caps.PerRequest = nil
	return CheckCaps(caps, spent, target-held, now, loc)
}

// CheckCaps returns the first window, in the order per request, daily,
// monthly, total, in which spent plus m would exceed the cap, or nil when
// every cap holds. Landing exactly on a cap passes. Daily and monthly reset
// at the next calendar day and month of now in loc.
func CheckCaps(caps Caps, spent Spend, m Micros, now time.Time, loc *time.Location) *OverCap {
	dayReset, monthReset := DayReset(now, loc), MonthReset(now, loc)
	windows := []struct {
		name   string
		cap    *Micros
		spent  Micros
		resets *time.Time
	}{
		{WindowPerRequest, caps.PerRequest, 0, nil},
		{WindowDaily, caps.Daily, spent.Day, &dayReset},
		{WindowMonthly, caps.Monthly, spent.Month, &monthReset},
		{WindowTotal, caps.Total, spent.Total, nil},
	}
	for _, w := range windows {
		if w.cap == nil {
			continue
		}
		if sum, ok := AddMicros(w.spent, m); !ok || sum > *w.cap {
			return &OverCap{Window: w.name, Cap: *w.cap, Spent: w.spent, Requested: m, ResetsAt: w.resets}
		}
	}
	return nil
}
