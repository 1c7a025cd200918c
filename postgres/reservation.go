package postgres

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
)

// reservationColumns are the columns scanReservation reads, in its order.
const reservationColumns = `id, seq, key_id, idempotency_key, fingerprint, operation,
	amount, currency, micros, settled_micros, state, day, month,
	req_method, req_path, req_body, req_stripe_account, req_stripe_version,
	object_id, upstream_status, attempts, lease_owner, lease_until, created_at, updated_at`

// Spend counter rows besides the calendar windows: the uncertain row tracks
// the part of the total whose outcome is not known yet.
const (
	windowUncertain = "uncertain"
	bucketNone      = ""
)

// Reserve checks every cap of the key, reading the key's current policy
// inside the same transaction, and records the reservation. A replayed
// Idempotency-Key returns the existing reservation with Replay set. Over a
// cap it records nothing and returns OverCap. Returns EINVALID for a
// negative amount or a missing Idempotency-Key, EUNAUTHORIZED if the key was
// revoked or expired, ENOTFOUND if it does not exist.
//
// On success the store fills in the ID (if empty), State, Day, Month and the
// timestamps of args.Reservation and returns it as the result's Reservation.
func (s *Store) Reserve(ctx context.Context, args keybrake.ReserveArgs) (keybrake.ReserveResult, error) {
	in := args.Reservation
	if in == nil {
		return keybrake.ReserveResult{}, keybrake.Errorf(keybrake.EINVALID, "No reservation given.")
	}
	if in.Micros < 0 {
		return keybrake.ReserveResult{}, keybrake.Errorf(keybrake.EINVALID, "A reservation cannot be negative (%s).", in.Micros)
	}
	if in.IdempotencyKey == "" {
		return keybrake.ReserveResult{}, keybrake.ErrorParam("idempotency_key", "A reservation needs an Idempotency-Key.")
	}
	var res keybrake.ReserveResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		res, err = reserve(ctx, tx, in, args.Now)
		return err
	})
	if err != nil {
		return keybrake.ReserveResult{}, s.wrap(fmt.Sprintf("reserve on %s", in.KeyID), err)
	}
	return res, nil
}

// reserve is Reserve's transaction. The key row lock taken first serialises
// it with every other reservation, settlement and policy change of the key.
func reserve(ctx context.Context, tx pgx.Tx, in *keybrake.Reservation, now time.Time) (keybrake.ReserveResult, error) {
	k, err := lockKey(ctx, tx, in.KeyID)
	if err != nil {
		return keybrake.ReserveResult{}, err
	}
	if err := k.Usable(now); err != nil {
		return keybrake.ReserveResult{}, err
	}
	loc, err := k.Location()
	if err != nil {
		return keybrake.ReserveResult{}, err
	}

	// The reads come in a statement of their own, after the lock is granted:
	// at READ COMMITTED each statement sees what was committed before it
	// started, so this one sees everything the previous holder of the lock
	// wrote. (Reading them in the locking statement itself would use a
	// snapshot taken before the lock wait, and miss the previous holder's
	// increments.)
	day, month := keybrake.Buckets(now, loc)
	var replayID *string
	var c counters
	if err := tx.QueryRow(ctx, `SELECT
		(SELECT id FROM reservations WHERE key_id = $1 AND idempotency_key = $2),
		COALESCE((SELECT micros FROM spend_counters WHERE key_id = $1 AND window_name = 'daily' AND bucket = $3), 0),
		COALESCE((SELECT micros FROM spend_counters WHERE key_id = $1 AND window_name = 'monthly' AND bucket = $4), 0),
		COALESCE((SELECT micros FROM spend_counters WHERE key_id = $1 AND window_name = 'total' AND bucket = ''), 0)`,
		k.ID, in.IdempotencyKey, day, month).Scan(&replayID, (*int64)(&c.day), (*int64)(&c.month), (*int64)(&c.total)); err != nil {
		return keybrake.ReserveResult{}, err
	}

	// A replay was counted when first reserved: return it, never refuse it.
	if replayID != nil {
		prev, err := scanReservation(tx.QueryRow(ctx, `SELECT `+reservationColumns+` FROM reservations WHERE id = $1`, *replayID))
		if err != nil {
			return keybrake.ReserveResult{}, err
		}
		return keybrake.ReserveResult{Reservation: prev, Replay: true}, nil
	}
	if oc := checkCaps(k, c, in.Micros, now, loc); oc != nil {
		return keybrake.ReserveResult{OverCap: oc}, nil
	}

	r := *in
	if r.ID == "" {
		r.ID = newReservationID()
	}
	r.State = keybrake.StateReserved
	r.Day, r.Month = day, month
	r.SettledMicros = 0
	r.CreatedAt, r.UpdatedAt = ts(now), ts(now)
	r.LeaseOwner, r.LeaseUntil, r.Attempts = "", time.Time{}, 0
	// The reservation and its counters in one statement: one round trip
	// less while the key is locked.
	if _, err := tx.Exec(ctx, `WITH ins AS (
		INSERT INTO reservations (id, key_id, idempotency_key, fingerprint, operation,
			amount, currency, micros, settled_micros, state, day, month,
			req_method, req_path, req_body, req_stripe_account, req_stripe_version,
			object_id, upstream_status, attempts, lease_owner, lease_until, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24)
		)
		`+addCountersSQL(25),
		r.ID, r.KeyID, r.IdempotencyKey, r.Fingerprint, r.Operation,
		r.Amount, r.Currency, int64(r.Micros), int64(r.SettledMicros), r.State, r.Day, r.Month,
		r.Request.Method, r.Request.Path, []byte(r.Request.Body), r.Request.StripeAccount, r.Request.StripeVersion,
		r.ObjectID, r.UpstreamStatus, r.Attempts, r.LeaseOwner, nullTime(r.LeaseUntil), r.CreatedAt, r.UpdatedAt,
		r.KeyID, r.Day, r.Month, int64(r.Micros), int64(0)); err != nil {
		return keybrake.ReserveResult{}, err
	}
	*in = r
	return keybrake.ReserveResult{Reservation: in}, nil
}

// counters is what a key has spent in the windows a reservation counts in.
type counters struct {
	day, month, total, uncertain keybrake.Micros
}

// readCounters reads the key's counters for the day and month buckets. The
// caller holds the key row lock, so they cannot change before it commits.
func readCounters(ctx context.Context, tx pgx.Tx, keyID, day, month string) (counters, error) {
	rows, err := tx.Query(ctx, `SELECT window_name, micros FROM spend_counters
		WHERE key_id = $1 AND (
			(window_name = 'daily' AND bucket = $2) OR
			(window_name = 'monthly' AND bucket = $3) OR
			(window_name IN ('total', 'uncertain') AND bucket = ''))`, keyID, day, month)
	if err != nil {
		return counters{}, err
	}
	defer rows.Close()
	var c counters
	for rows.Next() {
		var window string
		var m int64
		if err := rows.Scan(&window, &m); err != nil {
			return counters{}, err
		}
		switch window {
		case keybrake.WindowDaily:
			c.day = keybrake.Micros(m)
		case keybrake.WindowMonthly:
			c.month = keybrake.Micros(m)
		case keybrake.WindowTotal:
			c.total = keybrake.Micros(m)
		case windowUncertain:
			c.uncertain = keybrake.Micros(m)
		}
	}
	return c, rows.Err()
}

// checkCaps returns the first window, in the order per request, daily,
// monthly, total, whose cap amount would exceed, or nil.
func checkCaps(k *keybrake.Key, c counters, amount keybrake.Micros, now time.Time, loc *time.Location) *keybrake.OverCap {
	dayReset, monthReset := keybrake.DayReset(now, loc), keybrake.MonthReset(now, loc)
	for _, w := range []struct {
		window string
		cap    *keybrake.Micros
		spent  keybrake.Micros
		resets *time.Time
	}{
		{keybrake.WindowPerRequest, k.PerRequest, 0, nil},
		{keybrake.WindowDaily, k.Daily, c.day, &dayReset},
		{keybrake.WindowMonthly, k.Monthly, c.month, &monthReset},
		{keybrake.WindowTotal, k.Total, c.total, nil},
	} {
		if w.cap == nil {
			continue
		}
		if sum, ok := keybrake.AddMicros(w.spent, amount); !ok || sum > *w.cap {
			return &keybrake.OverCap{Window: w.window, Cap: *w.cap, Spent: w.spent, Requested: amount, ResetsAt: w.resets}
		}
	}
	return nil
}

// addCountersSQL returns the statement that adds a delta to a key's day,
// month and total counters and an uncertain delta to its uncertain counter,
// creating rows as needed, with the rows in a fixed order. Its parameters,
// numbered from n, are key ID, day, month, delta and uncertain delta.
func addCountersSQL(n int) string {
	return fmt.Sprintf(`INSERT INTO spend_counters AS c (key_id, window_name, bucket, micros)
		VALUES ($%[1]d, 'daily', $%[2]d, $%[4]d::bigint), ($%[1]d, 'monthly', $%[3]d, $%[4]d::bigint),
		       ($%[1]d, 'total', '', $%[4]d::bigint), ($%[1]d, 'uncertain', '', $%[5]d::bigint)
		ON CONFLICT (key_id, window_name, bucket) DO UPDATE SET micros = c.micros + EXCLUDED.micros`,
		n, n+1, n+2, n+3, n+4)
}

// Settle moves a reservation to settled, released or uncertain and adjusts
// the counters of the reservation's own buckets by the change in what it
// counts. Settled and released are final: settling them again returns
// ECONFLICT. Returns ENOTFOUND for an unknown ID and EINVALID for another
// state or a negative amount.
func (s *Store) Settle(ctx context.Context, args keybrake.SettleArgs) (*keybrake.Reservation, error) {
	switch args.State {
	case keybrake.StateSettled, keybrake.StateReleased, keybrake.StateUncertain:
	default:
		return nil, keybrake.ErrorParam("state", "Cannot settle a reservation to %q.", args.State)
	}
	if args.SettledMicros < 0 {
		return nil, keybrake.ErrorParam("settled_usd", "A settled amount cannot be negative (%s).", args.SettledMicros)
	}
	var r *keybrake.Reservation
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		r, err = settle(ctx, tx, args)
		return err
	})
	if err != nil {
		return nil, s.wrap("settle "+args.ID, err)
	}
	return r, nil
}

// settle is Settle's transaction. It takes the key row lock before touching
// the counters, like reserve, so a reservation's check never reads counters
// that a settlement is about to change.
func settle(ctx context.Context, tx pgx.Tx, args keybrake.SettleArgs) (*keybrake.Reservation, error) {
	var one int
	if err := tx.QueryRow(ctx, `SELECT 1 FROM keys
		WHERE id = (SELECT key_id FROM reservations WHERE id = $1) FOR UPDATE`, args.ID).Scan(&one); err != nil {
		return nil, notFound(err, "No such reservation: %s.", args.ID)
	}
	// FOR UPDATE here too: a resolver's lease changes the row without the
	// key lock, and this transaction must not write back a stale lease.
	r, err := scanReservation(tx.QueryRow(ctx, `SELECT `+reservationColumns+` FROM reservations WHERE id = $1 FOR UPDATE`, args.ID))
	if err != nil {
		return nil, notFound(err, "No such reservation: %s.", args.ID)
	}
	if r.State == keybrake.StateSettled || r.State == keybrake.StateReleased {
		return nil, keybrake.Errorf(keybrake.ECONFLICT, "Reservation %s is already %s.", r.ID, r.State)
	}

	before, uncertainBefore := counted(r)
	switch args.State {
	case keybrake.StateSettled:
		r.SettledMicros = args.SettledMicros
		r.Amount = args.Amount
		if args.Currency != "" {
			r.Currency = args.Currency
		}
		r.LeaseOwner, r.LeaseUntil = "", time.Time{}
	case keybrake.StateReleased:
		r.SettledMicros = 0
		r.LeaseOwner, r.LeaseUntil = "", time.Time{}
	}
	r.State = args.State
	if args.ObjectID != "" {
		r.ObjectID = args.ObjectID
	}
	if args.UpstreamStatus != 0 {
		r.UpstreamStatus = args.UpstreamStatus
	}
	r.UpdatedAt = ts(args.Now)
	after, uncertainAfter := counted(r)

	if _, err := tx.Exec(ctx, `WITH upd AS (
		UPDATE reservations SET state = $2, settled_micros = $3, amount = $4, currency = $5,
			object_id = $6, upstream_status = $7, lease_owner = $8, lease_until = $9, updated_at = $10
		WHERE id = $1
		)
		`+addCountersSQL(11),
		r.ID, r.State, int64(r.SettledMicros), r.Amount, r.Currency,
		r.ObjectID, r.UpstreamStatus, r.LeaseOwner, nullTime(r.LeaseUntil), r.UpdatedAt,
		r.KeyID, r.Day, r.Month, int64(after-before), int64(uncertainAfter-uncertainBefore)); err != nil {
		return nil, err
	}
	return r, nil
}

// counted returns what r counts against its key's caps, and how much of that
// is uncertain.
func counted(r *keybrake.Reservation) (total, uncertain keybrake.Micros) {
	switch r.State {
	case keybrake.StateSettled:
		return r.SettledMicros, 0
	case keybrake.StateReleased:
		return 0, 0
	case keybrake.StateUncertain:
		return r.Micros, r.Micros
	}
	return r.Micros, 0
}

// FindReservationByID returns a reservation. Returns ENOTFOUND.
func (s *Store) FindReservationByID(ctx context.Context, id string) (*keybrake.Reservation, error) {
	r, err := scanReservation(s.pool.QueryRow(ctx, `SELECT `+reservationColumns+` FROM reservations WHERE id = $1`, id))
	if err != nil {
		return nil, s.wrap("find reservation "+id, notFound(err, "No such reservation: %s.", id))
	}
	return r, nil
}

// FindReservations returns reservations matching f, oldest first. A zero
// Limit returns them all.
func (s *Store) FindReservations(ctx context.Context, f keybrake.ReservationFilter) ([]*keybrake.Reservation, error) {
	var where []string
	var args []any
	if f.KeyID != "" {
		args = append(args, f.KeyID)
		where = append(where, fmt.Sprintf("key_id = $%d", len(args)))
	}
	if f.State != "" {
		args = append(args, f.State)
		where = append(where, fmt.Sprintf("state = $%d", len(args)))
	}
	q := `SELECT ` + reservationColumns + ` FROM reservations`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY seq`
	if f.Limit > 0 {
		args = append(args, f.Limit)
		q += fmt.Sprintf(" LIMIT $%d", len(args))
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, s.wrap("find reservations", err)
	}
	rs, err := collectReservations(rows)
	if err != nil {
		return nil, s.wrap("find reservations", err)
	}
	return rs, nil
}

// LeaseUncertain takes a lease until `until` on up to limit reservations that
// are uncertain, or reserved and older than staleBefore (a crashed request),
// whose lease is free or expired at now, and returns them oldest first with
// Attempts incremented. FOR UPDATE SKIP LOCKED lets the resolvers of several
// replicas lease at once without ever taking the same reservation: a row
// another resolver is leasing is skipped, not waited for.
func (s *Store) LeaseUncertain(ctx context.Context, owner string, now, staleBefore, until time.Time, limit int) ([]*keybrake.Reservation, error) {
	if limit <= 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `WITH picked AS (
			SELECT id FROM reservations
			WHERE (state = 'uncertain' OR (state = 'reserved' AND created_at < $2))
			  AND (lease_until IS NULL OR lease_until <= $3)
			ORDER BY seq
			LIMIT $5
			FOR UPDATE SKIP LOCKED
		), leased AS (
			UPDATE reservations r
			SET lease_owner = $1, lease_until = $4, attempts = r.attempts + 1
			FROM picked WHERE r.id = picked.id
			RETURNING r.*
		)
		SELECT `+reservationColumns+` FROM leased ORDER BY seq`,
		owner, ts(staleBefore), ts(now), ts(until), limit)
	if err != nil {
		return nil, s.wrap("lease uncertain", err)
	}
	rs, err := collectReservations(rows)
	if err != nil {
		return nil, s.wrap("lease uncertain", err)
	}
	return rs, nil
}

// Spend returns the key's spend in the day and month buckets named. Returns
// ENOTFOUND if the key does not exist.
func (s *Store) Spend(ctx context.Context, keyID, day, month string) (keybrake.Spend, error) {
	var c counters
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM keys WHERE id = $1)`, keyID).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return keybrake.Errorf(keybrake.ENOTFOUND, "No such key: %s.", keyID)
		}
		var err error
		c, err = readCounters(ctx, tx, keyID, day, month)
		return err
	})
	if err != nil {
		return keybrake.Spend{}, s.wrap("spend of "+keyID, err)
	}
	return keybrake.Spend{Day: c.day, Month: c.month, Total: c.total, Uncertain: c.uncertain}, nil
}

func collectReservations(rows pgx.Rows) ([]*keybrake.Reservation, error) {
	defer rows.Close()
	var rs []*keybrake.Reservation
	for rows.Next() {
		r, err := scanReservation(rows)
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
	}
	return rs, rows.Err()
}

// scanReservation reads one row of reservationColumns.
func scanReservation(row pgx.Row) (*keybrake.Reservation, error) {
	var r keybrake.Reservation
	var seq, micros, settled int64
	var body []byte
	var leaseUntil *time.Time
	err := row.Scan(&r.ID, &seq, &r.KeyID, &r.IdempotencyKey, &r.Fingerprint, &r.Operation,
		&r.Amount, &r.Currency, &micros, &settled, &r.State, &r.Day, &r.Month,
		&r.Request.Method, &r.Request.Path, &body, &r.Request.StripeAccount, &r.Request.StripeVersion,
		&r.ObjectID, &r.UpstreamStatus, &r.Attempts, &r.LeaseOwner, &leaseUntil, &r.CreatedAt, &r.UpdatedAt)
	if err != nil {
		return nil, err
	}
	r.Micros, r.SettledMicros = keybrake.Micros(micros), keybrake.Micros(settled)
	r.Request.Body = string(body)
	if leaseUntil != nil {
		r.LeaseUntil = ts(*leaseUntil)
	}
	r.CreatedAt, r.UpdatedAt = ts(r.CreatedAt), ts(r.UpdatedAt)
	return &r, nil
}

// nullTime stores the zero time as SQL NULL.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	v := ts(t)
	return &v
}

// newReservationID returns a random reservation ID, "rsv_" and 26 base32
// characters (130 bits).
func newReservationID() string {
	return "rsv_" + strings.ToLower(rand.Text())
}
