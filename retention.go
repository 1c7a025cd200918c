package keybrake

import (
	"context"
	"time"
)

// IdempotencyWindow is how long Stripe remembers an Idempotency-Key. A
// reservation created or changed within it may still be replayed (by its
// client or the resolver) and must stay findable, so retention never
// deletes it, whatever the configured age.
const IdempotencyWindow = 24 * time.Hour

// MinRetention is the shortest retention keybrake accepts: past Stripe's
// idempotency window with a day to spare, so a key's whole current day is
// always kept.
const MinRetention = 2 * IdempotencyWindow

// DefaultRetention is how long keybrake keeps audit events, final
// reservations and alerts unless told otherwise.
const DefaultRetention = 90 * 24 * time.Hour

// DefaultSentRetention is how long keybrake keeps the record of which key
// sent each message, call and email (SentService) unless told otherwise:
// the 13 months (400 days) Twilio's Messages API shows a message by
// default. Past it a key's request for the id is answered as for an
// unknown id, which Twilio answers too by then; Resend keeps emails for
// less.
const DefaultSentRetention = 400 * 24 * time.Hour

// MinSentRetention is the shortest sent-object retention keybrake accepts:
// Twilio schedules a message up to 35 days ahead (Resend an email up to 30),
// and its sender must still be able to cancel it, then read how it went,
// through keybrake.
const MinSentRetention = 40 * 24 * time.Hour

// MonthlyCounterMonths is how many months of monthly spend buckets are kept
// before compaction drops them; the total counter is never dropped.
const MonthlyCounterMonths = 13

// PruneArgs bounds one retention batch.
type PruneArgs struct {
	Before time.Time // only rows older than this are deleted
	Now    time.Time // the store's clock: the idempotency window ends at Now
	Limit  int       // at most this many rows; 0 means DefaultPruneBatch
}

// DefaultPruneBatch is a retention batch's size when PruneArgs sets none:
// small enough that one batch's transaction is short beside the request
// path's.
const DefaultPruneBatch = 500

// CompactArgs bounds one batch of spend counter compaction.
type CompactArgs struct {
	DayBefore   string // daily buckets ("2006-01-02") before this one may go
	MonthBefore string // monthly buckets ("2006-01") before this one may go
	Limit       int    // at most this many counters; 0 means DefaultPruneBatch
}

// RetentionService deletes, a small batch per call, what keybrake no longer
// needs. Every method returns how many rows it deleted; 0 means nothing is
// left to do for these arguments, so a caller loops until it gets 0. Each
// call is one short transaction and calling it again is harmless.
type RetentionService interface {
	// PruneReservations deletes up to Limit reservations that are settled
	// or released, were created and last changed before Before and more
	// than IdempotencyWindow before Now, and that no holds row links to. A
	// reserved, held or uncertain reservation is never deleted. Deleting a
	// final reservation changes no spend counter.
	PruneReservations(ctx context.Context, args PruneArgs) (int64, error)

	// CompactCounters deletes up to Limit daily and monthly spend counters
	// of buckets before DayBefore and MonthBefore, except a bucket that a
	// reserved, held or uncertain reservation still counts in (settling it
	// later would recreate the bucket). The total counter is never deleted.
	// Only the current day and month are ever read, so this changes no
	// decision.
	CompactCounters(ctx context.Context, args CompactArgs) (int64, error)

	// PruneAlerts deletes up to Limit alerts created before Before whose
	// deliveries are all delivered or failed (none pending), with their
	// deliveries and delivery attempts; an alert not yet claimed by the
	// sender is kept.
	PruneAlerts(ctx context.Context, args PruneArgs) (int64, error)

	// PruneHolds deletes up to Limit holds rows that hold nothing any more:
	// no lock unexpired at Before, a hold end (if any) before Before, and a
	// link to no reservation or to a settled or released one last changed
	// before Before. The reservation it linked to becomes prunable.
	PruneHolds(ctx context.Context, args PruneArgs) (int64, error)

	// PruneGuardCounters deletes up to Limit guard counters (velocity and
	// spend-rate buckets) that no window reads after Now: their expiry is
	// in the past.
	PruneGuardCounters(ctx context.Context, args PruneArgs) (int64, error)

	// PruneSent deletes up to Limit records of sent objects (SentService)
	// made before Before, and never one made less than MinSentRetention
	// before Now, whatever Before says. A pruned object is refused to
	// every key as one keybrake has no record of.
	PruneSent(ctx context.Context, args PruneArgs) (int64, error)
}

// CounterCutoffs returns the buckets before which daily and monthly
// counters may be compacted when rows older than before are pruned at now:
// the day of before and the month MonthlyCounterMonths before now, both in
// the earliest zone (UTC-12), so no key's zone still counts in them.
func CounterCutoffs(before, now time.Time) (day, month string) {
	earliest := time.FixedZone("UTC-12", -12*3600)
	day = before.In(earliest).AddDate(0, 0, -1).Format("2006-01-02")
	m := now.In(earliest)
	month = time.Date(m.Year(), m.Month()-MonthlyCounterMonths, 1, 0, 0, 0, 0, time.UTC).Format("2006-01")
	return day, month
}

// SentCutoff is the instant before which PruneSent deletes a sent object's
// record: args.Before, or MinSentRetention before args.Now when that is
// earlier, so a caller's short retention never takes a record its sender
// may still need (a message scheduled weeks ahead).
func SentCutoff(args PruneArgs) time.Time {
	if w := args.Now.Add(-MinSentRetention); w.Before(args.Before) {
		return w
	}
	return args.Before
}
