package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/keybrake/keybrake"
)

// qRearmBuckets moves a released reservation to the windows of its new
// request first: released counts nothing, so no counter moves yet.
const qRearmBuckets = `UPDATE reservations SET day = ?2, month = ?3 WHERE id = ?1 AND state = 'released'`

// qRearm reserves it again; the trigger reservations_count_update adds the
// new amount to the (new) day and month buckets and the total.
const qRearm = `UPDATE reservations SET state = 'reserved', micros = ?2, settled_micros = 0,
	fingerprint = ?3, operation = ?4, amount = ?5, currency = ?6,
	req_method = ?7, req_path = ?8, req_body = ?9, req_account = ?10, req_version = ?11,
	object_id = '', upstream_status = 0, attempts = 0, lease_owner = '', lease_until = NULL,
	created_at = ?12, updated_at = ?12, counted = ?13, count_kind = ?14, count = ?15
	WHERE id = ?1 AND state = 'released'
	RETURNING ` + resColumns

// Rearm reserves again, in place, the key's released reservation for the
// Idempotency-Key, checking every cap against the new amount in the windows
// of args.Now. See keybrake.SpendService.
func (s *Store) Rearm(ctx context.Context, args keybrake.ReserveArgs) (keybrake.ReserveResult, error) {
	return s.decide(ctx, args, "rearm", s.rearm)
}

func (s *Store) rearm(ctx context.Context, tx *sql.Tx, in *keybrake.Reservation, now time.Time) (keybrake.ReserveResult, error) {
	st, err := s.usableState(ctx, tx, in, now)
	if err != nil {
		return keybrake.ReserveResult{}, err
	}
	if !st.replayID.Valid {
		return keybrake.ReserveResult{}, keybrake.Errorf(keybrake.ENOTFOUND, "No reservation under this Idempotency-Key.")
	}
	if oc := overCap(st.key.Caps, st.spent, in.Micros, now, st.loc); oc != nil {
		return keybrake.ReserveResult{OverCap: oc}, nil
	}
	// The retry sends anew, so it counts anew, under the count caps of
	// now; released, the reservation counts in no window yet.
	if oc, err := s.checkCount(ctx, tx, in, st.day, st.month, now, st.loc); err != nil || oc != nil {
		return keybrake.ReserveResult{OverCount: oc}, err
	}
	// A retry Stripe runs anew is a new attempt: the breaker and the
	// velocity limits decide it as a new reservation, and it counts in
	// the counters of now (the trigger takes it out of none: released,
	// it counted in none).
	g, cs, err := s.checkGuards(ctx, tx, st, in, now)
	if err != nil || g != nil {
		return keybrake.ReserveResult{Guard: g}, err
	}
	id := st.replayID.String
	r, err := s.txExec(ctx, tx, qRearmBuckets, id, st.day, st.month)
	if err != nil {
		return keybrake.ReserveResult{}, wrap(err, "rearm %s", id)
	}
	if n, _ := r.RowsAffected(); n == 0 {
		return keybrake.ReserveResult{}, keybrake.Errorf(keybrake.ECONFLICT, "Reservation %s is not released.", id)
	}
	q := in.Request
	out, err := scanReservation(tx.QueryRowContext(ctx, qRearm, id, int64(in.Micros), in.Fingerprint, in.Operation, in.Amount, in.Currency,
		q.Method, q.Path, q.Body, q.StripeAccount, q.StripeVersion, now.UnixMicro(), encodeCounters(cs), countKind(in), max(in.Count, 0)))
	if err != nil {
		return keybrake.ReserveResult{}, wrap(err, "rearm %s", id)
	}
	out.CountKind, out.Count = countKind(in), max(in.Count, 0)
	return keybrake.ReserveResult{Reservation: out}, nil
}
