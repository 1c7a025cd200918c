package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
)

// resColumns lists the reservations table's columns in scanReservation's
// order.
const resColumns = `id, key_id, idempotency_key, fingerprint, operation, amount, currency,
	micros, settled_micros, state, day, month,
	req_method, req_path, req_body, req_account, req_version,
	object_id, upstream_status, attempts, lease_owner, lease_until, created_at, updated_at`

// Reserve checks every cap of the key against its counters and records the
// reservation, all in one write transaction that also reads the key's
// current policy. A replayed Idempotency-Key returns the existing reservation
// with Replay set, even over a cap. Over a cap it records nothing and returns
// OverCap for the first window exceeded, in the order per_request, daily,
// monthly, total. Returns ENOTFOUND for an unknown key, EUNAUTHORIZED for a
// revoked or expired one, EINVALID for a negative amount or a missing
// Idempotency-Key, ECONFLICT for a given ID already taken.
func (s *Store) Reserve(ctx context.Context, args keybrake.ReserveArgs) (keybrake.ReserveResult, error) {
	in := args.Reservation
	if err := validateReservation(in); err != nil {
		return keybrake.ReserveResult{}, err
	}
	now := args.Now
	if now.IsZero() {
		now = s.now()
	}
	now = dbTime(now)

	tx, err := s.beginWrite(ctx)
	if err != nil {
		return keybrake.ReserveResult{}, err
	}
	defer tx.Rollback()

	res, err := s.reserve(ctx, tx, in, now)
	if err != nil || res.Replay || res.OverCap != nil {
		return res, err
	}
	if err := tx.Commit(); err != nil {
		return keybrake.ReserveResult{}, wrap(err, "reserve on key %s", in.KeyID)
	}
	*in = *res.Reservation
	res.Reservation = in
	return res, nil
}

func validateReservation(in *keybrake.Reservation) error {
	switch {
	case in == nil:
		return keybrake.Errorf(keybrake.EINVALID, "No reservation given.")
	case in.IdempotencyKey == "":
		return keybrake.ErrorParam("idempotency_key", "A reservation needs an Idempotency-Key.")
	case in.Micros < 0:
		return keybrake.ErrorParam("amount", "A reservation cannot be negative.")
	}
	return nil
}

// reserve is Reserve inside tx; the caller commits only a new reservation.
func (s *Store) reserve(ctx context.Context, tx *sql.Tx, in *keybrake.Reservation, now time.Time) (keybrake.ReserveResult, error) {
	k, err := findPolicy(ctx, tx, in.KeyID)
	if err != nil {
		return keybrake.ReserveResult{}, err
	}
	if err := k.Usable(now); err != nil {
		return keybrake.ReserveResult{}, err
	}

	prev, err := scanReservation(tx.QueryRowContext(ctx, `SELECT `+resColumns+` FROM reservations
		WHERE key_id = ? AND idempotency_key = ?`, in.KeyID, in.IdempotencyKey))
	if err == nil {
		return keybrake.ReserveResult{Reservation: prev, Replay: true}, nil
	} else if !errors.Is(err, sql.ErrNoRows) {
		return keybrake.ReserveResult{}, wrap(err, "reserve on key %s", in.KeyID)
	}

	loc, err := location(k.Timezone)
	if err != nil {
		return keybrake.ReserveResult{}, err
	}
	day, month := keybrake.Buckets(now, loc)
	var sp keybrake.Spend
	if err := tx.QueryRowContext(ctx, spendQuery(false), in.KeyID, day, month).Scan(&sp.Day, &sp.Month, &sp.Total); err != nil {
		return keybrake.ReserveResult{}, wrap(err, "reserve on key %s", in.KeyID)
	}
	if oc := overCap(k.Caps, sp, in.Micros, now, loc); oc != nil {
		return keybrake.ReserveResult{OverCap: oc}, nil
	}

	r := *in
	if r.ID == "" {
		r.ID = newID("res_")
	}
	r.State, r.SettledMicros = keybrake.StateReserved, 0
	r.Day, r.Month = day, month
	r.Attempts, r.LeaseOwner, r.LeaseUntil = 0, "", time.Time{}
	r.CreatedAt, r.UpdatedAt = now, now
	if _, err := tx.ExecContext(ctx, `INSERT INTO reservations (`+resColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, reservationArgs(&r)...); err != nil {
		if isUnique(err) {
			return keybrake.ReserveResult{}, keybrake.Errorf(keybrake.ECONFLICT, "Reservation %s already exists.", r.ID)
		}
		return keybrake.ReserveResult{}, wrap(err, "reserve on key %s", in.KeyID)
	}
	if err := addSpend(ctx, tx, r.KeyID, day, month, r.Micros); err != nil {
		return keybrake.ReserveResult{}, err
	}
	return keybrake.ReserveResult{Reservation: &r}, nil
}

// findPolicy reads only what Reserve needs of a key: caps, zone, validity.
func findPolicy(ctx context.Context, tx *sql.Tx, id string) (*keybrake.Key, error) {
	var (
		k                keybrake.Key
		caps             [4]sql.NullInt64
		expires, revoked sql.NullInt64
	)
	err := tx.QueryRowContext(ctx, `SELECT id, secret_prefix, timezone, cap_per_request, cap_daily, cap_monthly, cap_total,
		expires_at, revoked_at FROM keys WHERE id = ?`, id).Scan(
		&k.ID, &k.SecretPrefix, &k.Timezone, &caps[0], &caps[1], &caps[2], &caps[3], &expires, &revoked)
	if err != nil {
		return nil, wrapKeyErr(err, "reserve on key %s", id)
	}
	for i, p := range []**keybrake.Micros{&k.PerRequest, &k.Daily, &k.Monthly, &k.Total} {
		if caps[i].Valid {
			m := keybrake.Micros(caps[i].Int64)
			*p = &m
		}
	}
	k.ExpiresAt, k.RevokedAt = timePtr(expires), timePtr(revoked)
	return &k, nil
}

// spendQuery reads a key's counters for a day and a month bucket (and, with
// uncertain, the uncertain sum) in one statement, so in one snapshot.
func spendQuery(uncertain bool) string {
	q := `SELECT
		COALESCE((SELECT micros FROM spend_counters WHERE key_id = ?1 AND period = 'daily' AND bucket = ?2), 0),
		COALESCE((SELECT micros FROM spend_counters WHERE key_id = ?1 AND period = 'monthly' AND bucket = ?3), 0),
		COALESCE((SELECT micros FROM spend_counters WHERE key_id = ?1 AND period = 'total' AND bucket = ''), 0)`
	if uncertain {
		q += `,
		COALESCE((SELECT SUM(micros) FROM reservations WHERE key_id = ?1 AND state = 'uncertain'), 0)`
	}
	return q
}

// overCap returns the first window in which spent plus m would exceed the
// key's cap, or nil when every cap holds. Landing exactly on a cap passes.
func overCap(caps keybrake.Caps, spent keybrake.Spend, m keybrake.Micros, now time.Time, loc *time.Location) *keybrake.OverCap {
	dayReset, monthReset := keybrake.DayReset(now, loc), keybrake.MonthReset(now, loc)
	windows := []struct {
		name   string
		cap    *keybrake.Micros
		spent  keybrake.Micros
		resets *time.Time
	}{
		{keybrake.WindowPerRequest, caps.PerRequest, 0, nil},
		{keybrake.WindowDaily, caps.Daily, spent.Day, &dayReset},
		{keybrake.WindowMonthly, caps.Monthly, spent.Month, &monthReset},
		{keybrake.WindowTotal, caps.Total, spent.Total, nil},
	}
	for _, w := range windows {
		if w.cap == nil {
			continue
		}
		if sum, ok := keybrake.AddMicros(w.spent, m); !ok || sum > *w.cap {
			return &keybrake.OverCap{Window: w.name, Cap: *w.cap, Spent: w.spent, Requested: m, ResetsAt: w.resets}
		}
	}
	return nil
}

// addSpend adds delta (which may be negative) to the key's total counter
// and to the given day and month buckets.
func addSpend(ctx context.Context, tx *sql.Tx, keyID, day, month string, delta keybrake.Micros) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO spend_counters (key_id, period, bucket, micros)
		VALUES (?1, 'total', '', ?4), (?1, 'daily', ?2, ?4), (?1, 'monthly', ?3, ?4)
		ON CONFLICT (key_id, period, bucket) DO UPDATE SET micros = micros + excluded.micros`,
		keyID, day, month, int64(delta)); err != nil {
		return wrap(err, "count spend of key %s", keyID)
	}
	return nil
}

// counted is what a reservation in its current state counts against caps.
func counted(r *keybrake.Reservation) keybrake.Micros {
	switch r.State {
	case keybrake.StateSettled:
		return r.SettledMicros
	case keybrake.StateReleased:
		return 0
	default: // reserved, uncertain
		return r.Micros
	}
}

// Settle moves a reservation to settled, released or uncertain and moves
// the counters of the reservation's own day and month by the change in what
// it counts: a settled amount replaces the reserved one (even above a cap:
// the charge happened), released counts nothing, uncertain keeps the
// reserved amount. Settled and released are final: returns ECONFLICT for
// them, ENOTFOUND for an unknown ID, EINVALID for any other target state or
// a negative settled amount.
func (s *Store) Settle(ctx context.Context, args keybrake.SettleArgs) (*keybrake.Reservation, error) {
	switch args.State {
	case keybrake.StateSettled, keybrake.StateReleased, keybrake.StateUncertain:
	default:
		return nil, keybrake.ErrorParam("state", "Cannot settle a reservation to %q.", args.State)
	}
	if args.SettledMicros < 0 {
		return nil, keybrake.ErrorParam("settled_usd", "A settled amount cannot be negative.")
	}
	now := args.Now
	if now.IsZero() {
		now = s.now()
	}

	tx, err := s.beginWrite(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()

	r, err := scanReservation(tx.QueryRowContext(ctx, `SELECT `+resColumns+` FROM reservations WHERE id = ?`, args.ID))
	if err != nil {
		return nil, wrapResErr(err, "settle %s", args.ID)
	}
	if r.State == keybrake.StateSettled || r.State == keybrake.StateReleased {
		return nil, keybrake.Errorf(keybrake.ECONFLICT, "Reservation %s is already %s.", r.ID, r.State)
	}
	before := counted(r)
	applySettle(r, args, dbTime(now))
	if delta := counted(r) - before; delta != 0 {
		if err := addSpend(ctx, tx, r.KeyID, r.Day, r.Month, delta); err != nil {
			return nil, err
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE reservations SET state = ?, settled_micros = ?, amount = ?, currency = ?,
		object_id = ?, upstream_status = ?, updated_at = ? WHERE id = ?`,
		r.State, int64(r.SettledMicros), r.Amount, r.Currency, r.ObjectID, r.UpstreamStatus, r.UpdatedAt.UnixMicro(), r.ID); err != nil {
		return nil, wrap(err, "settle %s", args.ID)
	}
	if err := tx.Commit(); err != nil {
		return nil, wrap(err, "settle %s", args.ID)
	}
	return r, nil
}

// applySettle moves r to args.State. Amount and Currency change only when
// a settlement names the currency; ObjectID and UpstreamStatus only when
// given.
func applySettle(r *keybrake.Reservation, args keybrake.SettleArgs, now time.Time) {
	r.State = args.State
	switch args.State {
	case keybrake.StateSettled:
		r.SettledMicros = args.SettledMicros
		if args.Currency != "" {
			r.Amount, r.Currency = args.Amount, args.Currency
		}
	default:
		r.SettledMicros = 0
	}
	if args.ObjectID != "" {
		r.ObjectID = args.ObjectID
	}
	if args.UpstreamStatus != 0 {
		r.UpstreamStatus = args.UpstreamStatus
	}
	r.UpdatedAt = now
}

// FindReservationByID returns a reservation. Returns ENOTFOUND.
func (s *Store) FindReservationByID(ctx context.Context, id string) (*keybrake.Reservation, error) {
	r, err := scanReservation(s.reader.QueryRowContext(ctx, `SELECT `+resColumns+` FROM reservations WHERE id = ?`, id))
	if err != nil {
		return nil, wrapResErr(err, "find reservation %s", id)
	}
	return r, nil
}

// FindReservations returns reservations matching f, oldest first. A zero
// Limit returns them all.
func (s *Store) FindReservations(ctx context.Context, f keybrake.ReservationFilter) ([]*keybrake.Reservation, error) {
	var (
		where []string
		args  []any
	)
	if f.KeyID != "" {
		where, args = append(where, "key_id = ?"), append(args, f.KeyID)
	}
	if f.State != "" {
		where, args = append(where, "state = ?"), append(args, f.State)
	}
	q := `SELECT ` + resColumns + ` FROM reservations`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	limit := f.Limit
	if limit <= 0 {
		limit = -1
	}
	q += ` ORDER BY created_at, rowid LIMIT ?`
	args = append(args, limit)

	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, wrap(err, "find reservations")
	}
	return collectReservations(rows, "find reservations")
}

// LeaseUncertain leases to owner, until `until`, up to limit reservations
// that are uncertain, or still reserved though created before staleBefore
// (the request that made them died), and whose lease is free or expired at
// now; oldest first, Attempts incremented. A limit of 0 means 100.
func (s *Store) LeaseUncertain(ctx context.Context, owner string, now, staleBefore, until time.Time, limit int) ([]*keybrake.Reservation, error) {
	if limit <= 0 {
		limit = 100
	}
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()

	// The literal IN term lets SQLite use the partial index reservations_open.
	rows, err := tx.QueryContext(ctx, `SELECT `+resColumns+` FROM reservations
		WHERE state IN ('reserved', 'uncertain')
		AND (state = 'uncertain' OR created_at < ?)
		AND (lease_until IS NULL OR lease_until <= ?)
		ORDER BY created_at, rowid LIMIT ?`, staleBefore.UnixMicro(), now.UnixMicro(), limit)
	if err != nil {
		return nil, wrap(err, "lease uncertain")
	}
	rs, err := collectReservations(rows, "lease uncertain")
	if err != nil {
		return nil, err
	}
	until = dbTime(until)
	for _, r := range rs {
		r.LeaseOwner, r.LeaseUntil, r.Attempts = owner, until, r.Attempts+1
		if _, err := tx.ExecContext(ctx, `UPDATE reservations SET lease_owner = ?, lease_until = ?, attempts = ? WHERE id = ?`,
			r.LeaseOwner, r.LeaseUntil.UnixMicro(), r.Attempts, r.ID); err != nil {
			return nil, wrap(err, "lease %s", r.ID)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, wrap(err, "lease uncertain")
	}
	return rs, nil
}

// Spend returns the key's spend in the named day and month buckets, its
// total, and the uncertain part of the total, read in one snapshot. An
// unknown key has spent nothing.
func (s *Store) Spend(ctx context.Context, keyID, day, month string) (keybrake.Spend, error) {
	var sp keybrake.Spend
	if err := s.reader.QueryRowContext(ctx, spendQuery(true), keyID, day, month).Scan(&sp.Day, &sp.Month, &sp.Total, &sp.Uncertain); err != nil {
		return keybrake.Spend{}, wrap(err, "spend of key %s", keyID)
	}
	return sp, nil
}

// reservationArgs returns r's column values in resColumns order.
func reservationArgs(r *keybrake.Reservation) []any {
	var leaseUntil any
	if !r.LeaseUntil.IsZero() {
		leaseUntil = r.LeaseUntil.UnixMicro()
	}
	return []any{r.ID, r.KeyID, r.IdempotencyKey, r.Fingerprint, r.Operation, r.Amount, r.Currency,
		int64(r.Micros), int64(r.SettledMicros), r.State, r.Day, r.Month,
		r.Request.Method, r.Request.Path, r.Request.Body, r.Request.StripeAccount, r.Request.StripeVersion,
		r.ObjectID, r.UpstreamStatus, r.Attempts, r.LeaseOwner, leaseUntil, r.CreatedAt.UnixMicro(), r.UpdatedAt.UnixMicro()}
}

// scanReservation reads one row of resColumns.
func scanReservation(row scanner) (*keybrake.Reservation, error) {
	var (
		r                keybrake.Reservation
		leaseUntil       sql.NullInt64
		created, updated int64
	)
	if err := row.Scan(&r.ID, &r.KeyID, &r.IdempotencyKey, &r.Fingerprint, &r.Operation, &r.Amount, &r.Currency,
		&r.Micros, &r.SettledMicros, &r.State, &r.Day, &r.Month,
		&r.Request.Method, &r.Request.Path, &r.Request.Body, &r.Request.StripeAccount, &r.Request.StripeVersion,
		&r.ObjectID, &r.UpstreamStatus, &r.Attempts, &r.LeaseOwner, &leaseUntil, &created, &updated); err != nil {
		return nil, err
	}
	if leaseUntil.Valid {
		r.LeaseUntil = fromMicros(leaseUntil.Int64)
	}
	r.CreatedAt, r.UpdatedAt = fromMicros(created), fromMicros(updated)
	return &r, nil
}

// collectReservations scans and closes rows.
func collectReservations(rows *sql.Rows, what string) ([]*keybrake.Reservation, error) {
	defer rows.Close()
	var rs []*keybrake.Reservation
	for rows.Next() {
		r, err := scanReservation(rows)
		if err != nil {
			return nil, wrap(err, "%s", what)
		}
		rs = append(rs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(err, "%s", what)
	}
	return rs, nil
}

// wrapResErr maps "no row" to ENOTFOUND.
func wrapResErr(err error, format string, args ...any) error {
	if errors.Is(err, sql.ErrNoRows) {
		return keybrake.Errorf(keybrake.ENOTFOUND, "No such reservation.")
	}
	return wrap(err, format, args...)
}

// newID returns prefix followed by 24 random hex digits.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return prefix + hex.EncodeToString(b[:])
}
