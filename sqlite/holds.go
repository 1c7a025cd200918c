package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/keybrake/keybrake"
)

var _ keybrake.HoldService = (*Store)(nil)

// LockObject takes the lock of the key's object for args.Owner until
// args.Until and returns the reservation holding the object, or nil. Returns
// ECONFLICT while another owner's lock has not expired at args.Now.
func (s *Store) LockObject(ctx context.Context, args keybrake.LockArgs) (*keybrake.Reservation, error) {
	if args.KeyID == "" || args.ObjectID == "" || args.Owner == "" {
		return nil, keybrake.Errorf(keybrake.EINVALID, "A lock needs a key, an object and an owner.")
	}
	now, until := dbTime(args.Now), dbTime(args.Until)
	var out *keybrake.Reservation
	err := s.batch.write(ctx, func(tx *sql.Tx) error {
		ctx := context.WithoutCancel(ctx) // a batch runs without its callers' contexts (batch.go)
		if err := keyUsableIn(ctx, tx, args.KeyID, now); err != nil {
			return err
		}
		var (
			rsvID, owner string
			lockUntil    sql.NullInt64
		)
		err := tx.QueryRowContext(ctx, `SELECT reservation_id, lock_owner, lock_until FROM holds WHERE key_id = ? AND object_id = ?`,
			args.KeyID, args.ObjectID).Scan(&rsvID, &owner, &lockUntil)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			if err := otherKeyLock(ctx, tx, args, now); err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO holds (key_id, object_id, reservation_id, hold_until, lock_owner, lock_until)
				VALUES (?, ?, '', NULL, ?, ?)`, args.KeyID, args.ObjectID, args.Owner, until.UnixMicro())
			return wrapKeyErr(err, "lock %s", args.ObjectID)
		case err != nil:
			return wrap(err, "lock %s", args.ObjectID)
		}
		if owner != "" && owner != args.Owner && lockUntil.Valid && lockUntil.Int64 > now.UnixMicro() {
			return keybrake.Errorf(keybrake.ECONFLICT, "Object %s is locked by another request.", args.ObjectID)
		}
		return s.lockRow(ctx, tx, args, now, until, rsvID, &out)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// lockRow takes the lock of the key's existing holds row unless another
// key's request holds the object, and reads the linked reservation.
func (s *Store) lockRow(ctx context.Context, tx *sql.Tx, args keybrake.LockArgs, now, until time.Time, rsvID string, out **keybrake.Reservation) error {
	{
		if err := otherKeyLock(ctx, tx, args, now); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE holds SET lock_owner = ?, lock_until = ? WHERE key_id = ? AND object_id = ?`,
			args.Owner, until.UnixMicro(), args.KeyID, args.ObjectID); err != nil {
			return wrap(err, "lock %s", args.ObjectID)
		}
		if rsvID == "" {
			return nil
		}
		r, err := scanReservation(tx.QueryRowContext(ctx, qReservationByID, rsvID))
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		*out = r
		return wrap(err, "lock %s", args.ObjectID)
	}
}

// otherKeyLock returns ECONFLICT when a request of another key holds an
// unexpired lock on the object: the lock is the object's, not the key's.
func otherKeyLock(ctx context.Context, tx *sql.Tx, args keybrake.LockArgs, now time.Time) error {
	var n int
	err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM holds WHERE object_id = ? AND key_id <> ?
		AND lock_owner <> '' AND lock_owner <> ? AND lock_until > ?`,
		args.ObjectID, args.KeyID, args.Owner, now.UnixMicro()).Scan(&n)
	if err != nil {
		return wrap(err, "lock %s", args.ObjectID)
	}
	if n > 0 {
		return keybrake.Errorf(keybrake.ECONFLICT, "Object %s is locked by another request.", args.ObjectID)
	}
	return nil
}

// UnlockObject releases owner's lock of the key's object.
func (s *Store) UnlockObject(ctx context.Context, keyID, objectID, owner string) error {
	return s.batch.write(ctx, func(tx *sql.Tx) error {
		ctx := context.WithoutCancel(ctx) // a batch runs without its callers' contexts (batch.go)
		_, err := tx.ExecContext(ctx, `UPDATE holds SET lock_owner = '', lock_until = NULL
			WHERE key_id = ? AND object_id = ? AND lock_owner = ?`, keyID, objectID, owner)
		return wrap(err, "unlock %s", objectID)
	})
}

// LinkHold records that reservationID holds the key's object until
// holdUntil. A link to another live reservation is kept (ECONFLICT).
func (s *Store) LinkHold(ctx context.Context, keyID, objectID, reservationID string, holdUntil time.Time) error {
	if keyID == "" || objectID == "" || reservationID == "" {
		return keybrake.Errorf(keybrake.EINVALID, "A hold needs a key, an object and a reservation.")
	}
	return s.batch.write(ctx, func(tx *sql.Tx) error {
		ctx := context.WithoutCancel(ctx) // a batch runs without its callers' contexts (batch.go)
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM reservations WHERE id = ? AND key_id = ?`, reservationID, keyID).Scan(&n); err != nil {
			return wrap(err, "link %s", objectID)
		} else if n == 0 {
			return keybrake.Errorf(keybrake.ENOTFOUND, "No such reservation.")
		}
		var current string
		err := tx.QueryRowContext(ctx, `SELECT h.reservation_id FROM holds h JOIN reservations r ON r.id = h.reservation_id
			WHERE h.key_id = ? AND h.object_id = ? AND r.state IN ('reserved', 'held', 'uncertain')`, keyID, objectID).Scan(&current)
		if err == nil && current != reservationID {
			return keybrake.Errorf(keybrake.ECONFLICT, "Object %s is already held by reservation %s.", objectID, current)
		} else if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return wrap(err, "link %s", objectID)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO holds (key_id, object_id, reservation_id, hold_until, lock_owner, lock_until)
			VALUES (?1, ?2, ?3, ?4, '', NULL)
			ON CONFLICT (key_id, object_id) DO UPDATE SET reservation_id = ?3, hold_until = ?4`,
			keyID, objectID, reservationID, dbTime(holdUntil).UnixMicro())
		return wrap(err, "link %s", objectID)
	})
}

// RaiseHold raises a live reservation to args.Micros, checking the
// difference against every cap in the reservation's own windows.
func (s *Store) RaiseHold(ctx context.Context, args keybrake.RaiseArgs) (keybrake.ReserveResult, error) {
	if args.Micros < 0 || args.Amount < 0 {
		return keybrake.ReserveResult{}, keybrake.ErrorParam("amount", "A hold cannot be negative.")
	}
	now := dbTime(args.Now)
	var res keybrake.ReserveResult
	err := s.batch.write(ctx, func(tx *sql.Tx) error {
		ctx := context.WithoutCancel(ctx) // a batch runs without its callers' contexts (batch.go)
		r, err := scanReservation(tx.QueryRowContext(ctx, qReservationByID, args.ID))
		if err != nil {
			return wrapResErr(err, "raise %s", args.ID)
		}
		if !r.Live() {
			return keybrake.Errorf(keybrake.ECONFLICT, "Reservation %s is already %s.", r.ID, r.State)
		}
		if args.Micros <= r.Micros {
			res = keybrake.ReserveResult{Reservation: r}
			return nil
		}
		st, err := s.readForReserve(ctx, tx, &keybrake.Reservation{KeyID: r.KeyID}, "", now)
		if err != nil {
			return err
		}
		if st.key.Timezone != "" {
			if st, err = s.readForReserve(ctx, tx, &keybrake.Reservation{KeyID: r.KeyID}, st.key.Timezone, now); err != nil {
				return err
			}
		}
		if err := st.key.Usable(now); err != nil {
			return err
		}
		day, month := keybrake.RaiseBuckets(r, now, st.loc)
		var spent keybrake.Spend
		if err := tx.QueryRowContext(ctx, qSpend, r.KeyID, day, month).Scan(&spent.Day, &spent.Month, &spent.Total, &spent.Uncertain, &spent.Held); err != nil {
			return wrap(err, "raise %s", r.ID)
		}
		if oc := keybrake.CheckRaise(st.key.Caps, keybrake.RaiseSpend(spent, r, day, month), r.Micros, args.Micros, now, st.loc); oc != nil {
			res = keybrake.ReserveResult{OverCap: oc}
			return nil
		}
		if st.plan != nil && st.plan.g.Breaker != nil && st.plan.g.Breaker.SpendMultiple > 0 {
			reason, err := s.spendRateOnRaise(ctx, tx, r.KeyID, st.plan.g.Breaker, args.Micros-r.Micros, now)
			if err != nil {
				return err
			}
			if reason != "" {
				res = keybrake.ReserveResult{Guard: &keybrake.GuardRefusal{Guard: keybrake.GuardBreaker, Rule: keybrake.BreakerSpendRate, Suspended: true}}
				return s.suspendIn(ctx, tx, r.KeyID, reason, now)
			}
		}
		if err := moveHold(ctx, tx, r, day, month); err != nil {
			return wrap(err, "raise %s", r.ID)
		}
		r.Micros, r.Amount, r.Currency, r.UpdatedAt = args.Micros, args.Amount, args.Currency, now
		// The counting triggers move the hold's (new) day and month by the
		// difference.
		if _, err := tx.ExecContext(ctx, `UPDATE reservations SET micros = ?, amount = ?, currency = ?, updated_at = ? WHERE id = ?`,
			int64(r.Micros), r.Amount, r.Currency, now.UnixMicro(), r.ID); err != nil {
			return wrap(err, "raise %s", r.ID)
		}
		res = keybrake.ReserveResult{Reservation: r}
		return nil
	})
	if err != nil {
		return keybrake.ReserveResult{}, err
	}
	return res, nil
}

// moveHold moves hold r, raised on a later day or month than it was made,
// into day and month (keybrake.RaiseBuckets): its counted micros leave the
// old buckets' counters and join the new ones', and the row names the new
// buckets, which its settlement, sweep and later raises then move. The
// counting triggers fire on micros and state, not on day or month, so the
// counters are moved here.
func moveHold(ctx context.Context, tx *sql.Tx, r *keybrake.Reservation, day, month string) error {
	if day == r.Day && month == r.Month {
		return nil
	}
	for _, w := range []struct{ period, from, to string }{{"daily", r.Day, day}, {"monthly", r.Month, month}} {
		if w.from == w.to {
			continue // a day moved within its month leaves the month's counter as it is
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO spend_counters (key_id, period, bucket, micros)
			VALUES (?1, ?2, ?3, -?5), (?1, ?2, ?4, ?5)
			ON CONFLICT (key_id, period, bucket) DO UPDATE SET micros = micros + excluded.micros`,
			r.KeyID, w.period, w.from, w.to, int64(r.Micros)); err != nil {
			return err
		}
		// The move can carry the new bucket's counter across a threshold of
		// its cap. The counting triggers see only the raise that follows,
		// by its difference, so they would miss it; here the move is
		// checked as a reservation of r.Micros in that bucket is.
		if _, err := tx.ExecContext(ctx, qMovedThreshold, r.KeyID, w.period, w.to, int64(r.Micros)); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE reservations SET day = ?, month = ? WHERE id = ?`, day, month, r.ID); err != nil {
		return err
	}
	r.Day, r.Month = day, month
	return nil
}

// qMovedThreshold writes the threshold alerts of key ?1's counter of period
// ?2 and bucket ?3, just moved up by ?4 micros (moveHold): every rule whose
// share of the window's cap the counter reached from below, once per
// alert_key, as the counting triggers (0023, 0024) write a reservation's.
const qMovedThreshold = `INSERT INTO alerts (id, alert_key, kind, key_id, window_name, bucket, percent, cap_micros, threshold_micros,
		spent_micros, reserved_micros, reservation_id, count, endpoint_id, detail, created_at)
	SELECT 'alt_' || lower(hex(randomblob(12))),
		'threshold:' || ?1 || ':' || t.period || ':' || t.bucket || ':' || t.percent,
		'threshold', ?1, t.period, t.bucket, t.percent, t.cap, t.threshold, t.micros, 0, '', 0, '', '',
		CAST(unixepoch('subsec') * 1000000 AS INTEGER)
	FROM (
		SELECT w.*, (w.cap / 100) * w.percent + ((w.cap % 100) * w.percent + 99) / 100 AS threshold
		FROM (
			SELECT c.period AS period, c.bucket AS bucket, c.micros AS micros, r.percent AS percent,
				(CASE c.period WHEN 'daily' THEN k.cap_daily WHEN 'monthly' THEN k.cap_monthly ELSE k.cap_total END) AS cap
			FROM alert_rules r CROSS JOIN keys k CROSS JOIN spend_counters c
			WHERE r.kind = 'threshold' AND r.enabled = 1
			AND r.key_id = (CASE WHEN EXISTS (SELECT 1 FROM alert_rules x WHERE x.kind = 'threshold' AND x.key_id = ?1) THEN ?1 ELSE '' END)
			AND k.id = ?1 AND c.key_id = ?1 AND c.period = ?2 AND c.bucket = ?3
			AND r.window_name IN ('', c.period)
		) AS w
	) AS t
	WHERE ?4 > 0 AND t.cap IS NOT NULL AND t.threshold > 0
	AND t.micros - ?4 < t.threshold AND t.micros >= t.threshold
	ON CONFLICT (alert_key) DO NOTHING`

// LeaseHolds locks, for owner until `until`, up to limit objects whose held
// reservation's hold ended before now, and returns those reservations.
func (s *Store) LeaseHolds(ctx context.Context, owner string, now, orphanedBefore, until time.Time, limit int) ([]*keybrake.Reservation, error) {
	if limit <= 0 {
		limit = 100
	}
	now, until = dbTime(now), dbTime(until)
	var out []*keybrake.Reservation
	err := s.batch.write(ctx, func(tx *sql.Tx) error {
		ctx := context.WithoutCancel(ctx) // a batch runs without its callers' contexts (batch.go)
		// A held reservation is due when its link's hold ended, or, not
		// linked (an orphan), when it last changed before orphanedBefore.
		// No request of any key may be writing the object.
		rows, err := tx.QueryContext(ctx, `SELECT h.key_id, h.object_id, r.id FROM reservations r
			JOIN holds h ON h.key_id = r.key_id AND h.object_id = r.object_id
			WHERE r.state = 'held'
			AND ((h.reservation_id = r.id AND h.hold_until IS NOT NULL AND h.hold_until < ?1)
			  OR (h.reservation_id <> r.id AND r.updated_at < ?3))
			AND NOT EXISTS (SELECT 1 FROM holds o WHERE o.object_id = h.object_id
				AND o.lock_owner <> '' AND o.lock_until > ?1)
			ORDER BY r.updated_at LIMIT ?2`, now.UnixMicro(), limit, dbTime(orphanedBefore).UnixMicro())
		if err != nil {
			return wrap(err, "lease holds")
		}
		type held struct{ key, object, rsv string }
		var hs []held
		for rows.Next() {
			var h held
			if err := rows.Scan(&h.key, &h.object, &h.rsv); err != nil {
				rows.Close()
				return wrap(err, "lease holds")
			}
			hs = append(hs, h)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return wrap(err, "lease holds")
		}
		out = out[:0]
		for _, h := range hs {
			if _, err := tx.ExecContext(ctx, `UPDATE holds SET lock_owner = ?, lock_until = ? WHERE key_id = ? AND object_id = ?`,
				owner, until.UnixMicro(), h.key, h.object); err != nil {
				return wrap(err, "lease hold %s", h.object)
			}
			r, err := scanReservation(tx.QueryRowContext(ctx, qReservationByID, h.rsv))
			if err != nil {
				return wrap(err, "lease hold %s", h.object)
			}
			r.ObjectID = h.object
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RenewHoldLease extends args.Owner's lease of the key's object to
// args.Until while the lock is still the owner's and the reservation still
// held; ECONFLICT otherwise.
func (s *Store) RenewHoldLease(ctx context.Context, args keybrake.RenewArgs) error {
	if args.KeyID == "" || args.ObjectID == "" || args.Owner == "" || args.ReservationID == "" {
		return keybrake.Errorf(keybrake.EINVALID, "A lease needs a key, an object, a reservation and an owner.")
	}
	now, until := dbTime(args.Now), dbTime(args.Until)
	return s.batch.write(ctx, func(tx *sql.Tx) error {
		ctx := context.WithoutCancel(ctx) // a batch runs without its callers' contexts (batch.go)
		var state string
		err := tx.QueryRowContext(ctx, `SELECT state FROM reservations WHERE id = ?`, args.ReservationID).Scan(&state)
		if err != nil {
			return wrapResErr(err, "renew lease of %s", args.ObjectID)
		}
		if state != keybrake.StateHeld {
			return keybrake.Errorf(keybrake.ECONFLICT, "Reservation %s is %s, no longer held.", args.ReservationID, state)
		}
		if err := otherKeyLock(ctx, tx, keybrake.LockArgs{KeyID: args.KeyID, ObjectID: args.ObjectID, Owner: args.Owner}, now); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE holds SET lock_until = ? WHERE key_id = ? AND object_id = ? AND lock_owner = ?`,
			until.UnixMicro(), args.KeyID, args.ObjectID, args.Owner)
		if err != nil {
			return wrap(err, "renew lease of %s", args.ObjectID)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return keybrake.Errorf(keybrake.ECONFLICT, "Object %s is no longer leased by %s.", args.ObjectID, args.Owner)
		}
		return nil
	})
}

// qHeldObjects reads which of a JSON array of objects a key holds live;
// prepared on the readers, since every Stripe answer that carries a
// payment intent's client secret runs it (http/vendor_stripe_secret.go).
const qHeldObjects = `SELECT h.object_id FROM holds h JOIN reservations r ON r.id = h.reservation_id
	WHERE h.key_id = ? AND h.object_id IN (SELECT value FROM json_each(?)) AND r.state IN ('reserved', 'held', 'uncertain')`

// HeldObjects returns which of objectIDs the key holds with a live
// reservation. It reads from the reader pool and locks nothing.
func (s *Store) HeldObjects(ctx context.Context, keyID string, objectIDs []string) (map[string]bool, error) {
	if len(objectIDs) > keybrake.MaxHeldObjects {
		return nil, keybrake.Errorf(keybrake.EINVALID, "At most %d objects can be asked at once.", keybrake.MaxHeldObjects)
	}
	out := make(map[string]bool)
	if len(objectIDs) == 0 {
		return out, nil
	}
	ids, err := json.Marshal(objectIDs)
	if err != nil {
		return nil, wrap(err, "held objects")
	}
	rows, err := s.rstmts[qHeldObjects].QueryContext(ctx, keyID, string(ids))
	if err != nil {
		return nil, wrap(err, "held objects")
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, wrap(err, "held objects")
		}
		out[id] = true
	}
	return out, wrap(rows.Err(), "held objects")
}

// spendRateOnRaise decides the breaker's spend-rate rule b on a hold
// raised by m at now, as on a reservation of m: it returns the
// suspension's reason when the raise trips it, "" when not.
func (s *Store) spendRateOnRaise(ctx context.Context, tx *sql.Tx, keyID string, b *keybrake.Breaker, m keybrake.Micros, now time.Time) (string, error) {
	p := b.Probe(now)
	var recent, base int64
	err := tx.QueryRowContext(ctx, `SELECT
		(SELECT COALESCE(SUM(micros), 0) FROM guard_counters WHERE key_id = ?1 AND scope = ?2 AND bucket >= ?3),
		(SELECT COALESCE(SUM(micros), 0) FROM guard_counters WHERE key_id = ?1 AND scope = ?4 AND bucket >= ?5)`,
		keyID, p.Recent, p.RecentSince, p.Base, p.BaseSince).Scan(&recent, &base)
	if err != nil {
		return "", wrap(err, "breaker on key %s", keyID)
	}
	if b.SpendRateTrips(recent+int64(m), base-recent) {
		return b.SpendRateReason(recent + int64(m)), nil
	}
	return "", nil
}
