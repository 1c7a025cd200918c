package postgres

import (
	"context"
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
	object_id, upstream_status, attempts, lease_owner, lease_until, created_at, updated_at,
	customer, dup_key`

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
	if err := s.checkClock(ctx, args.Now); err != nil { // guard_clock.go
		return keybrake.ReserveResult{}, err
	}
	res, err := s.reserve(ctx, in, args.KeyVersion, args.Now)
	if err != nil {
		return keybrake.ReserveResult{}, s.wrap(fmt.Sprintf("reserve on %s", in.KeyID), err)
	}
	return res, nil
}

// reserve decides a reservation in its lane's next batch (reserve_batch.go):
// keybrake_reserve_many, or keybrake_reserve for a batch of one, takes the
// key row lock, looks up the replay, checks the caps and guards and inserts
// the reservation with its counters, in one statement and one implicit
// transaction. The lock is held only while the server runs it and commits,
// never across a round trip to this process.
// version is the key version the request was decided on ("" checks none).
func (s *Store) reserve(ctx context.Context, in *keybrake.Reservation, version string, now time.Time) (keybrake.ReserveResult, error) {
	loc, err := s.location(ctx, in.KeyID)
	if err != nil {
		return keybrake.ReserveResult{}, err
	}
	r := *in
	if r.ID == "" {
		r.ID = keybrake.NewReservationID(now)
	}
	r.State = keybrake.StateReserved
	r.Day, r.Month = keybrake.Buckets(now, loc)
	r.SettledMicros = 0
	r.CreatedAt, r.UpdatedAt = ts(now), ts(now)
	r.LeaseOwner, r.LeaseUntil, r.Attempts = "", time.Time{}, 0
	r.ObjectID, r.UpstreamStatus = "", 0

	var out reserveOutcome
	if r.CountKind != "" && r.Count > 0 {
		var over *keybrake.OverCount
		out, over, err = s.reserveCounted(ctx, &r, version, now, loc)
		if err == nil && over != nil {
			return keybrake.ReserveResult{OverCount: over}, nil
		}
	} else {
		out, err = s.reserveQueued(&reserveOp{ctx: ctx, r: r, version: version, done: make(chan struct{})})
	}
	if err != nil {
		return keybrake.ReserveResult{}, err
	}
	switch out.status {
	case "unusable":
		return keybrake.ReserveResult{}, s.unusable(ctx, in.KeyID, now)
	case "stale":
		return keybrake.ReserveResult{Stale: true}, nil
	case "replay":
		if out.replayID == nil {
			// The insert's arbiter met the reservation of this Idempotency-Key,
			// and it was gone before the function read its id: only the
			// retention prune deletes one, past the idempotency window. Nothing
			// was reserved; the client's retry reserves anew.
			return keybrake.ReserveResult{}, keybrake.Errorf(keybrake.EUNAVAILABLE, "The reservation this Idempotency-Key names was being pruned; nothing was reserved. Retry the request.")
		}
		prev, err := scanReservation(s.pool.QueryRow(ctx, `SELECT `+reservationColumns+` FROM reservations WHERE id = $1`, *out.replayID))
		if err != nil {
			return keybrake.ReserveResult{}, err
		}
		return keybrake.ReserveResult{Reservation: prev, Replay: true}, nil
	case "over":
		oc := &keybrake.OverCap{Window: *out.window, Cap: keybrake.Micros(*out.limit), Spent: keybrake.Micros(*out.spent), Requested: in.Micros}
		switch oc.Window {
		case keybrake.WindowDaily:
			t := keybrake.DayReset(now, loc)
			oc.ResetsAt = &t
		case keybrake.WindowMonthly:
			t := keybrake.MonthReset(now, loc)
			oc.ResetsAt = &t
		}
		return keybrake.ReserveResult{OverCap: oc}, nil
	case "guard":
		return keybrake.ReserveResult{Guard: out.guard}, nil
	case "ok":
		*in = r
		return keybrake.ReserveResult{Reservation: in}, nil
	}
	return keybrake.ReserveResult{}, fmt.Errorf("keybrake_reserve: unexpected status %q", out.status)
}

// location returns the key's calendar zone, read once per key and kept: a
// key's timezone is set at creation and never changes (KeyUpdate has no
// timezone), so the cached zone cannot go stale. Returns ENOTFOUND.
func (s *Store) location(ctx context.Context, keyID string) (*time.Location, error) {
	if loc, ok := s.locs.Load(keyID); ok {
		return loc.(*time.Location), nil
	}
	var tz string
	if err := s.queryRow(ctx, `SELECT timezone FROM keys WHERE id = $1`, keyID).Scan(&tz); err != nil {
		return nil, notFound(err, "No such key: %s.", keyID)
	}
	loc, err := (&keybrake.Key{Timezone: tz}).Location()
	if err != nil {
		return nil, err
	}
	s.locs.Store(keyID, loc)
	return loc, nil
}

// rememberZone keeps the calendar zone of a key read for another reason
// (the proxy's lookup by secret), so the key's first reservation on this
// replica does not read it again: a round trip saved on the request path
// of every key a replica has not reserved on yet.
func (s *Store) rememberZone(k *keybrake.Key) {
	if _, ok := s.locs.Load(k.ID); ok {
		return
	}
	if loc, err := k.Location(); err == nil {
		s.locs.Store(k.ID, loc)
	}
}

// unusable returns the EUNAUTHORIZED error of a key that keybrake_reserve
// found revoked or expired, saying which and since when.
func (s *Store) unusable(ctx context.Context, keyID string, now time.Time) error {
	if k, err := s.FindKeyByID(ctx, keyID); err == nil {
		if err := k.Usable(now); err != nil {
			return err
		}
	}
	return keybrake.Errorf(keybrake.EUNAUTHORIZED, "This vault key can no longer be used.")
}

// counters is what a key has spent in the windows a reservation counts in.
type counters struct {
	day, month, total, uncertain keybrake.Micros
}

// readCounters reads the key's counters for the day and month buckets in
// one statement.
func (s *Store) readCounters(ctx context.Context, keyID, day, month string) (counters, error) {
	rows, err := s.pool.Query(ctx, `SELECT window_name, micros FROM spend_counters
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

// Settle moves a reservation to settled, released or uncertain and adjusts
// the counters of the reservation's own buckets by the change in what it
// counts. Settled and released are final: settling them again returns
// ECONFLICT. Returns ENOTFOUND for an unknown ID and EINVALID for another
// state or a negative amount.
func (s *Store) Settle(ctx context.Context, args keybrake.SettleArgs) (*keybrake.Reservation, error) {
	switch args.State {
	case keybrake.StateSettled, keybrake.StateReleased, keybrake.StateUncertain, keybrake.StateHeld:
	default:
		return nil, keybrake.ErrorParam("state", "Cannot settle a reservation to %q.", args.State)
	}
	if args.SettledMicros < 0 {
		return nil, keybrake.ErrorParam("settled_usd", "A settled amount cannot be negative (%s).", args.SettledMicros)
	}
	// keybrake_settle (migrations/0002_one_round_trip.sql) locks the
	// reservation's row, checks, updates it and its counters: one statement.
	// Concurrent settlements run together, in keybrake_settle_batch
	// (settle_batch.go): still one statement, and one commit for the batch.
	r, err := s.settleQueued(&settleOp{ctx: ctx, args: args, done: make(chan struct{})})
	if err != nil {
		return nil, s.wrap("settle "+args.ID, err)
	}
	return r, nil
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
	if !f.CreatedFrom.IsZero() {
		args = append(args, ts(f.CreatedFrom))
		where = append(where, fmt.Sprintf("created_at >= $%d", len(args)))
	}
	if !f.CreatedBefore.IsZero() {
		args = append(args, ts(f.CreatedBefore))
		where = append(where, fmt.Sprintf("created_at < $%d", len(args)))
	}
	if f.ObjectID != "" {
		// The literal terms match the partial index reservations_object
		// (0030): Twilio's reservations only (keybrake.ReservationFilter).
		args = append(args, f.ObjectID)
		where = append(where, fmt.Sprintf("object_id <> '' AND operation LIKE 'twilio.%%' AND object_id = $%d", len(args)))
	}
	if f.Operation != "" {
		args = append(args, f.Operation)
		where = append(where, fmt.Sprintf("operation = $%d", len(args)))
		if strings.HasPrefix(f.Operation, "twilio.") {
			// Implied by the term above; it matches the partial index
			// reservations_open_operation (0037), Twilio's alone.
			where = append(where, "operation LIKE 'twilio.%'")
		}
	}
	if f.Open {
		where = append(where, "state IN ('reserved', 'uncertain')") // reservations_open, reservations_open_operation
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

// LeaseHeld leases the due held reservations of args.Operations: those
// whose lease is free or expired at args.Now, never leased first, then the
// longest due, through the partial index reservations_held_due. FOR UPDATE
// SKIP LOCKED lets several replicas lease at once without sharing one.
func (s *Store) LeaseHeld(ctx context.Context, args keybrake.LeaseHeldArgs) ([]*keybrake.Reservation, error) {
	if len(args.Operations) == 0 {
		return nil, nil
	}
	limit := args.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, `WITH picked AS (
			SELECT id, lease_until AS due FROM reservations
			WHERE state = 'held' AND operation = ANY($1)
			  AND (lease_until IS NULL OR lease_until <= $2)
			ORDER BY lease_until NULLS FIRST, seq
			LIMIT $3
			FOR UPDATE SKIP LOCKED
		), leased AS (
			UPDATE reservations r
			SET lease_owner = $4, lease_until = $5
			FROM picked WHERE r.id = picked.id
			RETURNING r.*, picked.due
		)
		SELECT `+reservationColumns+` FROM leased ORDER BY due NULLS FIRST, seq`,
		args.Operations, ts(args.Now), limit, args.Owner, ts(args.Until))
	if err != nil {
		return nil, s.wrap("lease held", err)
	}
	rs, err := collectReservations(rows)
	if err != nil {
		return nil, s.wrap("lease held", err)
	}
	return rs, nil
}

// Spend returns the key's spend in the day and month buckets named, read in
// one statement (one snapshot). An unknown key has spent nothing.
func (s *Store) Spend(ctx context.Context, keyID, day, month string) (keybrake.Spend, error) {
	c, err := s.readCounters(ctx, keyID, day, month)
	if err != nil {
		return keybrake.Spend{}, s.wrap("spend of "+keyID, err)
	}
	sp := keybrake.Spend{Day: c.day, Month: c.month, Total: c.total, Uncertain: c.uncertain}
	if err := s.queryRow(ctx, `SELECT COALESCE(SUM(micros), 0)::bigint FROM reservations WHERE key_id = $1 AND state = 'held'`, keyID).Scan(&sp.Held); err != nil {
		return keybrake.Spend{}, s.wrap("spend of "+keyID, err)
	}
	return sp, nil
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
		&r.ObjectID, &r.UpstreamStatus, &r.Attempts, &r.LeaseOwner, &leaseUntil, &r.CreatedAt, &r.UpdatedAt,
		&r.Customer, &r.DupKey)
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
