package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
)

// resColumns lists the reservations table's columns in scanReservation's
// order.
const resColumns = `id, key_id, idempotency_key, fingerprint, operation, amount, currency,
	micros, settled_micros, state, day, month,
	req_method, req_path, req_body, req_account, req_version,
	object_id, upstream_status, attempts, lease_owner, lease_until, created_at, updated_at,
	customer, dup_key`

// The hot statements of a proxied request, prepared once at Open.
var (
	// qReserveRead reads in one statement everything Reserve decides on:
	// the key's policy, an earlier reservation under the same
	// Idempotency-Key, and the counters of the day and month buckets
	// (computed by the caller in the key's zone).
	qReserveRead       = qReserveReadList + qReserveReadFrom
	qReservationByID   = `SELECT ` + resColumns + ` FROM reservations WHERE id = ?`
	qSpend             = spendQuery
	qInsertReservation = `INSERT INTO reservations (` + resColumns + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	// qSettle moves an unresolved reservation to its new state; a final
	// one matches no row. Amount and currency change only when a settlement
	// names a currency, object ID and upstream status only when set.
	// A hold (?2 = 'held') grows to ?3 and never shrinks; its amount and
	// currency follow only when it grows. SET expressions read the row as
	// it was before the UPDATE.
	qSettle = `UPDATE reservations SET state = ?2,
		settled_micros = CASE WHEN ?2 = 'settled' THEN ?3 ELSE 0 END,
		micros = CASE WHEN ?2 = 'held' AND ?3 > micros THEN ?3 ELSE micros END,
		amount = CASE WHEN ?5 <> '' AND (?2 = 'settled' OR (?2 = 'held' AND ?3 > micros)) THEN ?4 ELSE amount END,
		currency = CASE WHEN ?5 <> '' AND (?2 = 'settled' OR (?2 = 'held' AND ?3 > micros)) THEN ?5 ELSE currency END,
		object_id = CASE WHEN ?6 <> '' THEN ?6 ELSE object_id END,
		upstream_status = CASE WHEN ?7 <> 0 THEN ?7 ELSE upstream_status END,
		lease_owner = CASE WHEN ?2 IN ('settled', 'released', 'held') THEN '' ELSE lease_owner END,
		lease_until = CASE WHEN ?2 IN ('settled', 'released', 'held') THEN NULL ELSE lease_until END,
		updated_at = ?8
		WHERE id = ?1 AND state IN ('reserved', 'uncertain', 'held')
		RETURNING ` + resColumns
)

// qReserveRead's select list and the rest, apart so that a guarded key's
// probe can join the list (guard_plan.go).
const (
	qReserveReadList = `SELECT k.secret_prefix, k.timezone, k.cap_per_request, k.cap_daily, k.cap_monthly, k.cap_total,
		k.expires_at, k.revoked_at, k.guards, k.suspended_at, k.suspended_reason,
		(SELECT r.id FROM reservations r WHERE r.key_id = ?1 AND r.idempotency_key = ?2),
		COALESCE((SELECT micros FROM spend_counters WHERE key_id = ?1 AND period = 'daily' AND bucket = ?3), 0),
		COALESCE((SELECT micros FROM spend_counters WHERE key_id = ?1 AND period = 'monthly' AND bucket = ?4), 0),
		COALESCE((SELECT micros FROM spend_counters WHERE key_id = ?1 AND period = 'total' AND bucket = ''), 0),
		k.version`
	qReserveReadFrom = `
		FROM keys k WHERE k.id = ?1`
)

// Reserve checks every cap of the key against its counters and records the
// reservation, all in one write transaction that also reads the key's
// current policy. A replayed Idempotency-Key returns the existing reservation
// with Replay set, even over a cap. Over a cap it records nothing and returns
// OverCap for the first window exceeded, in the order per_request, daily,
// monthly, total. Returns ENOTFOUND for an unknown key, EUNAUTHORIZED for a
// revoked or expired one, EINVALID for a negative amount or a missing
// Idempotency-Key, ECONFLICT for a given ID already taken.
//
// With args.KeyVersion set, a key that is no longer that version (an
// operator changed it while the request was being decided) reserves and
// counts nothing, a replay included, and the result is Stale.
func (s *Store) Reserve(ctx context.Context, args keybrake.ReserveArgs) (keybrake.ReserveResult, error) {
	return s.decide(ctx, args, "reserve", func(ctx context.Context, tx *sql.Tx, in *keybrake.Reservation, now time.Time) (keybrake.ReserveResult, error) {
		return s.reserve(ctx, tx, in, args.KeyVersion, now)
	})
}

// decide runs a reservation decision (reserve or rearm) for args in the
// next group commit. A reservation it records or changes is copied back
// into args.Reservation, which the result then holds.
func (s *Store) decide(ctx context.Context, args keybrake.ReserveArgs, op string,
	fn func(context.Context, *sql.Tx, *keybrake.Reservation, time.Time) (keybrake.ReserveResult, error)) (keybrake.ReserveResult, error) {
	in := args.Reservation
	if err := validateReservation(in); err != nil {
		return keybrake.ReserveResult{}, err
	}
	now := args.Now
	if now.IsZero() {
		now = s.now()
	}
	now = dbTime(now)

	var res keybrake.ReserveResult
	err := s.batch.write(ctx, func(tx *sql.Tx) error {
		var err error
		res, err = fn(context.Background(), tx, in, now)
		return err
	})
	if err != nil {
		if keybrake.ErrorCode(err) == keybrake.EINTERNAL {
			err = wrap(err, "%s on key %s", op, in.KeyID)
		}
		return keybrake.ReserveResult{}, err
	}
	if res.Guard != nil && res.Guard.Suspended {
		s.notifyKey(in.KeyID)
	}
	if s.probeMisses.Load() {
		s.probeMisses.Store(false)
		s.prepareProbes()
	}
	if res.Stale || res.Replay || res.OverCap != nil || res.Guard != nil || res.OverCount != nil {
		return res, nil
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
// version is the key version the request was decided on ("" checks none):
// compared with the row read in this write transaction, so no update of
// the key can come between the check and the reservation.
func (s *Store) reserve(ctx context.Context, tx *sql.Tx, in *keybrake.Reservation, version string, now time.Time) (keybrake.ReserveResult, error) {
	st, err := s.usableState(ctx, tx, in, now)
	if err != nil {
		return keybrake.ReserveResult{}, err
	}
	if version != "" && st.key.Version != version {
		return keybrake.ReserveResult{Stale: true}, nil
	}
	if st.replayID.Valid {
		prev, err := scanReservation(s.txQueryRow(ctx, tx, qReservationByID, st.replayID.String))
		if err != nil {
			return keybrake.ReserveResult{}, wrap(err, "reserve on key %s", in.KeyID)
		}
		return keybrake.ReserveResult{Reservation: prev, Replay: true}, nil
	}
	if oc := overCap(st.key.Caps, st.spent, in.Micros, now, st.loc); oc != nil {
		return keybrake.ReserveResult{OverCap: oc}, nil
	}
	if oc, err := s.checkCount(ctx, tx, in, st.day, st.month, now, st.loc); err != nil || oc != nil {
		return keybrake.ReserveResult{OverCount: oc}, err
	}
	g, counted, err := s.checkGuards(ctx, tx, st, in, now)
	if err != nil || g != nil {
		return keybrake.ReserveResult{Guard: g}, err
	}

	r := *in
	if r.ID == "" {
		r.ID = keybrake.NewReservationID(now)
	}
	r.State, r.SettledMicros = keybrake.StateReserved, 0
	r.Day, r.Month = st.day, st.month
	r.Attempts, r.LeaseOwner, r.LeaseUntil = 0, "", time.Time{}
	r.CreatedAt, r.UpdatedAt = now, now
	if _, err := s.insertReservation(ctx, tx, &r, counted); err != nil {
		if isUnique(err) {
			return keybrake.ReserveResult{}, keybrake.Errorf(keybrake.ECONFLICT, "Reservation %s already exists.", r.ID)
		}
		return keybrake.ReserveResult{}, wrap(err, "reserve on key %s", in.KeyID)
	}
	if err := s.recordCount(ctx, tx, &r); err != nil {
		return keybrake.ReserveResult{}, err
	}
	return keybrake.ReserveResult{Reservation: &r}, nil
}

// usableState reads, inside tx, what a reservation of in at now decides on,
// and returns EUNAUTHORIZED if the key can no longer be used. The buckets
// depend on the key's zone, which the read returns: it is guessed from the
// last reservation on this key, and read again if it changed.
func (s *Store) usableState(ctx context.Context, tx *sql.Tx, in *keybrake.Reservation, now time.Time) (*reserveState, error) {
	tz, _ := s.zones.Load(in.KeyID)
	guess, _ := tz.(string)
	st, err := s.readForReserve(ctx, tx, in, guess, now)
	if err != nil {
		return nil, err
	}
	if st.key.Timezone != guess {
		s.zones.Store(in.KeyID, st.key.Timezone)
		if st, err = s.readForReserve(ctx, tx, in, st.key.Timezone, now); err != nil {
			return nil, err
		}
	}
	if err := st.key.Usable(now); err != nil {
		return nil, err
	}
	return st, nil
}

// reserveState is what Reserve reads before deciding.
type reserveState struct {
	key        keybrake.Key
	plan       *guardPlan  // the key's guards, decoded once per guards text
	probe      *guardProbe // the guards' probe, read with the key when its guards were guessed right
	probeGuess string      // the guards text probe was built for
	loc        *time.Location
	day, month string
	replayID   sql.NullString
	spent      keybrake.Spend
}

// readForReserve runs qReserveRead with the buckets of now in zone tz.
// Returns ENOTFOUND for an unknown key.
func (s *Store) readForReserve(ctx context.Context, tx *sql.Tx, in *keybrake.Reservation, tz string, now time.Time) (*reserveState, error) {
	var (
		st               reserveState
		caps             [4]sql.NullInt64
		expires, revoked sql.NullInt64
		guards           string
		suspended        sql.NullInt64
		version          int64
		err              error
	)
	if st.loc, err = location(tz); err != nil {
		return nil, err
	}
	st.day, st.month = keybrake.Buckets(now, st.loc)
	k := &st.key
	err = s.readReserve(ctx, tx, &st, in, now, []any{ // guard_plan.go: the guards' probe rides along
		&k.SecretPrefix, &k.Timezone, &caps[0], &caps[1], &caps[2], &caps[3], &expires, &revoked,
		&guards, &suspended, &k.SuspendedReason,
		&st.replayID, &st.spent.Day, &st.spent.Month, &st.spent.Total, &version})
	if err != nil {
		return nil, wrapKeyErr(err, "reserve on key %s", in.KeyID)
	}
	k.ID = in.KeyID
	k.Version = strconv.FormatInt(version, 10)
	for i, p := range []**keybrake.Micros{&k.PerRequest, &k.Daily, &k.Monthly, &k.Total} {
		if caps[i].Valid {
			m := keybrake.Micros(caps[i].Int64)
			*p = &m
		}
	}
	k.ExpiresAt, k.RevokedAt, k.SuspendedAt = timePtr(expires), timePtr(revoked), timePtr(suspended)
	if st.plan, err = s.planOf(guards); err != nil {
		return nil, wrap(err, "reserve on key %s: decode guards", in.KeyID)
	}
	s.guessedGuards(&st, in.KeyID, guards)
	if st.plan != nil {
		k.Guards = st.plan.g
	}
	return &st, nil
}

// spendQuery reads a key's counters for a day and a month bucket and the
// uncertain sum in one statement, so in one snapshot.
const spendQuery = `SELECT
	COALESCE((SELECT micros FROM spend_counters WHERE key_id = ?1 AND period = 'daily' AND bucket = ?2), 0),
	COALESCE((SELECT micros FROM spend_counters WHERE key_id = ?1 AND period = 'monthly' AND bucket = ?3), 0),
	COALESCE((SELECT micros FROM spend_counters WHERE key_id = ?1 AND period = 'total' AND bucket = ''), 0),
	COALESCE((SELECT SUM(micros) FROM reservations WHERE key_id = ?1 AND state = 'uncertain'), 0),
	COALESCE((SELECT SUM(micros) FROM reservations WHERE key_id = ?1 AND state = 'held'), 0)`

// overCap returns the first window in which spent plus m would exceed the
// key's cap, or nil when every cap holds. Landing exactly on a cap passes.
func overCap(caps keybrake.Caps, spent keybrake.Spend, m keybrake.Micros, now time.Time, loc *time.Location) *keybrake.OverCap {
	return keybrake.CheckCaps(caps, spent, m, now, loc)
}

// Settle moves a reservation to settled, released or uncertain; the
// counters of the reservation's own day and month move by the change in what
// it counts: a settled amount replaces the reserved one (even above a cap:
// the charge happened), released counts nothing, uncertain keeps the
// reserved amount. Settled and released are final: returns ECONFLICT for
// them, ENOTFOUND for an unknown ID, EINVALID for any other target state or
// a negative settled amount.
func (s *Store) Settle(ctx context.Context, args keybrake.SettleArgs) (*keybrake.Reservation, error) {
	switch args.State {
	case keybrake.StateSettled, keybrake.StateReleased, keybrake.StateUncertain, keybrake.StateHeld:
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

	settled := args.SettledMicros

	// One statement, committed in a batch: the trigger
	// reservations_count_update moves the counters in the same statement.
	var r *keybrake.Reservation
	params := []any{args.ID, args.State, int64(settled), args.Amount, args.Currency, args.ObjectID, args.UpstreamStatus, dbTime(now).UnixMicro()}
	err := s.batch.writeAlone(ctx, func(tx *sql.Tx) error {
		var err error
		r, err = scanReservation(tx.Stmt(s.wstmts[qSettle]).QueryRow(params...))
		return err
	}, func() error {
		var err error
		r, err = scanReservation(s.wstmts[qSettle].QueryRow(params...))
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, s.settleMiss(ctx, args.ID)
	} else if err != nil {
		return nil, wrap(err, "settle %s", args.ID)
	}
	return r, nil
}

// settleMiss explains why qSettle matched no row: ENOTFOUND, or ECONFLICT
// for a reservation already settled or released. States only move forward,
// so a final state read now was final then.
func (s *Store) settleMiss(ctx context.Context, id string) error {
	var state string
	err := s.reader.QueryRowContext(ctx, `SELECT state FROM reservations WHERE id = ?`, id).Scan(&state)
	if err != nil {
		return wrapResErr(err, "settle %s", id)
	}
	if state == keybrake.StateSettled || state == keybrake.StateReleased {
		return keybrake.Errorf(keybrake.ECONFLICT, "Reservation %s is already %s.", id, state)
	}
	// Inserted after the UPDATE looked: it did not exist then.
	return keybrake.Errorf(keybrake.ENOTFOUND, "No such reservation.")
}

// FindReservationByID returns a reservation. Returns ENOTFOUND.
func (s *Store) FindReservationByID(ctx context.Context, id string) (*keybrake.Reservation, error) {
	r, err := scanReservation(s.queryRow(ctx, qReservationByID, id))
	if err != nil {
		return nil, wrapResErr(err, "find reservation %s", id)
	}
	return r, nil
}

// objectOperations is the operations whose reservations
// ReservationFilter.ObjectID finds: the condition of the partial index
// reservations_object (0025), written as it is there.
const objectOperations = "operation LIKE 'twilio.%'"

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
	if !f.CreatedFrom.IsZero() {
		where, args = append(where, "created_at >= ?"), append(args, f.CreatedFrom.UnixMicro())
	}
	if !f.CreatedBefore.IsZero() {
		where, args = append(where, "created_at < ?"), append(args, f.CreatedBefore.UnixMicro())
	}
	if f.ObjectID != "" {
		// The literal terms let SQLite use the partial index reservations_object.
		where, args = append(where, "object_id <> '' AND "+objectOperations+" AND object_id = ?"), append(args, f.ObjectID)
	}
	if f.Operation != "" {
		where, args = append(where, "operation = ?"), append(args, f.Operation)
	}
	if f.Open {
		where = append(where, "state IN ('reserved', 'uncertain')") // reservations_open
	}
	q := `SELECT ` + resColumns + ` FROM reservations`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	limit := f.Limit
	if limit <= 0 {
		limit = -1
	}
	q += ` ORDER BY created_at, id LIMIT ?`
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
		ORDER BY created_at, id LIMIT ?`, staleBefore.UnixMicro(), now.UnixMicro(), limit)
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

// LeaseHeld leases the due held reservations of args.Operations: those
// whose lease is free or expired at args.Now, never leased first, then the
// longest due. Each operation's never-leased and expired ones are read as
// two ranges of the partial index reservations_held_due, each cut at the
// limit, so a pass reads at most what it may lease, never every held
// reservation.
func (s *Store) LeaseHeld(ctx context.Context, args keybrake.LeaseHeldArgs) ([]*keybrake.Reservation, error) {
	if len(args.Operations) == 0 {
		return nil, nil
	}
	limit := args.Limit
	if limit <= 0 {
		limit = 100
	}
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()

	var rs []*keybrake.Reservation
	for _, op := range args.Operations {
		for _, q := range []struct {
			cond string
			args []any
		}{
			{"lease_until IS NULL", []any{op, limit}},
			{"lease_until <= ?", []any{op, args.Now.UnixMicro(), limit}},
		} {
			rows, err := tx.QueryContext(ctx, `SELECT `+resColumns+` FROM reservations
				WHERE state = 'held' AND operation = ? AND `+q.cond+`
				ORDER BY lease_until, created_at, id LIMIT ?`, q.args...)
			if err != nil {
				return nil, wrap(err, "lease held")
			}
			some, err := collectReservations(rows, "lease held")
			if err != nil {
				return nil, err
			}
			rs = append(rs, some...)
		}
	}
	sort.Slice(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		switch {
		case a.LeaseUntil.IsZero() != b.LeaseUntil.IsZero():
			return a.LeaseUntil.IsZero()
		case !a.LeaseUntil.Equal(b.LeaseUntil):
			return a.LeaseUntil.Before(b.LeaseUntil)
		case !a.CreatedAt.Equal(b.CreatedAt):
			return a.CreatedAt.Before(b.CreatedAt)
		}
		return a.ID < b.ID
	})
	rs = rs[:min(len(rs), limit)]
	until := dbTime(args.Until)
	for _, r := range rs {
		r.LeaseOwner, r.LeaseUntil = args.Owner, until
		if _, err := tx.ExecContext(ctx, `UPDATE reservations SET lease_owner = ?, lease_until = ? WHERE id = ?`,
			r.LeaseOwner, r.LeaseUntil.UnixMicro(), r.ID); err != nil {
			return nil, wrap(err, "lease %s", r.ID)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, wrap(err, "lease held")
	}
	return rs, nil
}

// Spend returns the key's spend in the named day and month buckets, its
// total, and the uncertain part of the total, read in one snapshot. An
// unknown key has spent nothing.
func (s *Store) Spend(ctx context.Context, keyID, day, month string) (keybrake.Spend, error) {
	var sp keybrake.Spend
	if err := s.queryRow(ctx, qSpend, keyID, day, month).Scan(&sp.Day, &sp.Month, &sp.Total, &sp.Uncertain, &sp.Held); err != nil {
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
		r.ObjectID, r.UpstreamStatus, r.Attempts, r.LeaseOwner, leaseUntil, r.CreatedAt.UnixMicro(), r.UpdatedAt.UnixMicro(),
		r.Customer, r.DupKey}
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
		&r.ObjectID, &r.UpstreamStatus, &r.Attempts, &r.LeaseOwner, &leaseUntil, &created, &updated,
		&r.Customer, &r.DupKey); err != nil {
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
