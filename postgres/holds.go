package postgres

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
)

var _ keybrake.HoldService = (*Store)(nil)

// LockObject takes the lock of the key's object for args.Owner until
// args.Until, in one statement: the upsert takes the lock only if it is
// free, expired or already the owner's. Returns the reservation holding the
// object, or nil; ECONFLICT while another owner's lock lasts.
func (s *Store) LockObject(ctx context.Context, args keybrake.LockArgs) (*keybrake.Reservation, error) {
	if args.KeyID == "" || args.ObjectID == "" || args.Owner == "" {
		return nil, keybrake.Errorf(keybrake.EINVALID, "A lock needs a key, an object and an owner.")
	}
	// Another replica's lock is live until its lock_until by this
	// replica's clock: one far ahead would take it while it is held.
	if err := s.checkClock(ctx, args.Now); err != nil { // guard_clock.go
		return nil, err
	}
	// The lock is the object's, whichever key asks: a transaction-scoped
	// advisory lock on the object id serialises the lockers of one object,
	// so no two keys both see it free.
	var rsvID string
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if err := keyUsableTx(ctx, tx, args.KeyID, ts(args.Now)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, args.ObjectID); err != nil {
			return err
		}
		others, err := lockedByOthers(ctx, tx, args.ObjectID, args.KeyID, args.Owner, args.Now)
		if err != nil {
			return err
		}
		if others {
			return pgx.ErrNoRows
		}
		return tx.QueryRow(ctx, `INSERT INTO holds AS h (key_id, object_id, reservation_id, hold_until, lock_owner, lock_until)
			VALUES ($1, $2, '', NULL, $3, $5)
			ON CONFLICT (key_id, object_id) DO UPDATE SET lock_owner = $3, lock_until = $5
			WHERE h.lock_owner = '' OR h.lock_owner = $3 OR h.lock_until IS NULL OR h.lock_until <= $4
			RETURNING h.reservation_id`,
			args.KeyID, args.ObjectID, args.Owner, ts(args.Now), ts(args.Until)).Scan(&rsvID)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, keybrake.Errorf(keybrake.ECONFLICT, "Object %s is locked by another request.", args.ObjectID)
	} else if err != nil {
		if pgCode(err) == "23503" {
			return nil, keybrake.Errorf(keybrake.ENOTFOUND, "No such key: %s.", args.KeyID)
		}
		return nil, s.wrap("lock "+args.ObjectID, err)
	}
	if rsvID == "" {
		return nil, nil
	}
	r, err := s.FindReservationByID(ctx, rsvID)
	if keybrake.ErrorCode(err) == keybrake.ENOTFOUND {
		return nil, nil
	}
	return r, err
}

// UnlockObject releases owner's lock of the key's object.
func (s *Store) UnlockObject(ctx context.Context, keyID, objectID, owner string) error {
	_, err := s.pool.Exec(ctx, `UPDATE holds SET lock_owner = '', lock_until = NULL
		WHERE key_id = $1 AND object_id = $2 AND lock_owner = $3`, keyID, objectID, owner)
	return s.wrap("unlock "+objectID, err)
}

// LinkHold records that reservationID holds the key's object until
// holdUntil. A link to another live reservation is kept (ECONFLICT).
func (s *Store) LinkHold(ctx context.Context, keyID, objectID, reservationID string, holdUntil time.Time) error {
	if keyID == "" || objectID == "" || reservationID == "" {
		return keybrake.Errorf(keybrake.EINVALID, "A hold needs a key, an object and a reservation.")
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM reservations WHERE id = $1 AND key_id = $2`, reservationID, keyID).Scan(&n); err != nil {
			return err
		} else if n == 0 {
			return keybrake.Errorf(keybrake.ENOTFOUND, "No such reservation.")
		}
		if _, err := tx.Exec(ctx, `INSERT INTO holds (key_id, object_id, reservation_id, hold_until, lock_owner, lock_until)
			VALUES ($1, $2, '', NULL, '', NULL) ON CONFLICT (key_id, object_id) DO NOTHING`, keyID, objectID); err != nil {
			return err
		}
		var current, state string
		err := tx.QueryRow(ctx, `SELECT h.reservation_id, COALESCE(r.state, '') FROM holds h
			LEFT JOIN reservations r ON r.id = h.reservation_id
			WHERE h.key_id = $1 AND h.object_id = $2 FOR UPDATE OF h`, keyID, objectID).Scan(&current, &state)
		if err != nil {
			return err
		}
		if current != "" && current != reservationID && (&keybrake.Reservation{State: state}).Live() {
			return keybrake.Errorf(keybrake.ECONFLICT, "Object %s is already held by reservation %s.", objectID, current)
		}
		_, err = tx.Exec(ctx, `UPDATE holds SET reservation_id = $3, hold_until = $4 WHERE key_id = $1 AND object_id = $2`,
			keyID, objectID, reservationID, ts(holdUntil))
		return err
	})
	return s.wrap("link "+objectID, err)
}

// RaiseHold raises a live reservation to args.Micros, checking the
// difference against every cap in the reservation's own windows, under the
// key row lock that Reserve takes too, so no reservation of the key checks
// its caps concurrently.
func (s *Store) RaiseHold(ctx context.Context, args keybrake.RaiseArgs) (keybrake.ReserveResult, error) {
	if args.Micros < 0 || args.Amount < 0 {
		return keybrake.ReserveResult{}, keybrake.ErrorParam("amount", "A hold cannot be negative.")
	}
	now := ts(args.Now)
	// A raise on a later day moves the whole hold into that day
	// (keybrake.RaiseBuckets): taken from a clock a day ahead, it emptied
	// today's counters for the other replicas (guard_clock.go;
	// TestAttackReplicas_RaiseOnSkewedClock).
	if err := s.checkClock(ctx, now); err != nil {
		return keybrake.ReserveResult{}, err
	}
	var res keybrake.ReserveResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var keyID string
		if err := tx.QueryRow(ctx, `SELECT key_id FROM reservations WHERE id = $1`, args.ID).Scan(&keyID); err != nil {
			return notFound(err, "No such reservation.")
		}
		k, err := scanKey(tx.QueryRow(ctx, `SELECT `+keyColumns+` FROM keys WHERE id = $1 FOR NO KEY UPDATE`, keyID))
		if err != nil {
			return notFound(err, "No such key: %s.", keyID)
		}
		if err := k.Usable(now); err != nil {
			return err
		}
		r, err := scanReservation(tx.QueryRow(ctx, `SELECT `+reservationColumns+` FROM reservations WHERE id = $1 FOR UPDATE`, args.ID))
		if err != nil {
			return err
		}
		if !r.Live() {
			return keybrake.Errorf(keybrake.ECONFLICT, "Reservation %s is already %s.", r.ID, r.State)
		}
		if args.Micros <= r.Micros {
			res = keybrake.ReserveResult{Reservation: r}
			return nil
		}
		loc, err := k.Location()
		if err != nil {
			return err
		}
		day, month := keybrake.RaiseBuckets(r, now, loc)
		var c counters
		if err := tx.QueryRow(ctx, `SELECT
			COALESCE((SELECT micros FROM spend_counters WHERE key_id = $1 AND window_name = 'daily' AND bucket = $2), 0),
			COALESCE((SELECT micros FROM spend_counters WHERE key_id = $1 AND window_name = 'monthly' AND bucket = $3), 0),
			COALESCE((SELECT micros FROM spend_counters WHERE key_id = $1 AND window_name = 'total' AND bucket = ''), 0)`,
			r.KeyID, day, month).Scan(&c.day, &c.month, &c.total); err != nil {
			return err
		}
		delta := args.Micros - r.Micros
		spent := keybrake.RaiseSpend(keybrake.Spend{Day: c.day, Month: c.month, Total: c.total}, r, day, month)
		if oc := keybrake.CheckRaise(k.Caps, spent, r.Micros, args.Micros, now, loc); oc != nil {
			res = keybrake.ReserveResult{OverCap: oc}
			return nil
		}
		if b := k.Guards.BreakerOf(); b != nil && b.SpendMultiple > 0 {
			reason, err := spendRateOnRaise(ctx, tx, k.ID, b, delta, now)
			if err != nil {
				return err
			}
			if reason != "" {
				res = keybrake.ReserveResult{Guard: &keybrake.GuardRefusal{Guard: keybrake.GuardBreaker, Rule: keybrake.BreakerSpendRate, Suspended: true}}
				_, err := tx.Exec(ctx, `UPDATE keys SET suspended_at = $2, suspended_reason = $3, updated_at = $2 WHERE id = $1 AND suspended_at IS NULL`, k.ID, now, reason)
				return err
			}
		}
		if err := moveHold(ctx, tx, r, day, month); err != nil {
			return err
		}
		uncertain := keybrake.Micros(0)
		if r.State == keybrake.StateUncertain {
			uncertain = delta
		}
		r.Micros, r.Amount, r.Currency, r.UpdatedAt = args.Micros, args.Amount, args.Currency, now
		if _, err := tx.Exec(ctx, `UPDATE reservations SET micros = $2, amount = $3, currency = $4, updated_at = $5 WHERE id = $1`,
			r.ID, int64(r.Micros), r.Amount, r.Currency, now); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO spend_counters AS c (key_id, window_name, bucket, micros)
			VALUES ($1, 'daily', $2, $4), ($1, 'monthly', $3, $4), ($1, 'total', '', $4), ($1, 'uncertain', '', $5)
			ON CONFLICT (key_id, window_name, bucket) DO UPDATE SET micros = c.micros + EXCLUDED.micros`,
			r.KeyID, r.Day, r.Month, int64(delta), int64(uncertain)); err != nil {
			return err
		}
		res = keybrake.ReserveResult{Reservation: r}
		return nil
	})
	if err != nil {
		return keybrake.ReserveResult{}, s.wrap("raise "+args.ID, err)
	}
	return res, nil
}

// moveHold moves hold r, raised on a later day or month than it was made,
// into day and month (keybrake.RaiseBuckets): its counted micros leave the
// old buckets' counters and join the new ones', and the row names the new
// buckets, which its settlement, sweep and later raises then move.
func moveHold(ctx context.Context, tx pgx.Tx, r *keybrake.Reservation, day, month string) error {
	for _, w := range []struct{ window, from, to string }{{"daily", r.Day, day}, {"monthly", r.Month, month}} {
		if w.from == w.to {
			continue // one statement must not touch a counter twice
		}
		if _, err := tx.Exec(ctx, `INSERT INTO spend_counters AS c (key_id, window_name, bucket, micros)
			VALUES ($1, $2, $3, -$5::bigint), ($1, $2, $4, $5::bigint)
			ON CONFLICT (key_id, window_name, bucket) DO UPDATE SET micros = c.micros + EXCLUDED.micros`,
			r.KeyID, w.window, w.from, w.to, int64(r.Micros)); err != nil {
			return err
		}
	}
	if day == r.Day && month == r.Month {
		return nil
	}
	if _, err := tx.Exec(ctx, `UPDATE reservations SET day = $2, month = $3 WHERE id = $1`, r.ID, day, month); err != nil {
		return err
	}
	r.Day, r.Month = day, month
	return nil
}

// LeaseHolds locks, for owner until `until`, up to limit objects whose held
// reservation's hold ended before now. FOR UPDATE SKIP LOCKED lets the
// sweepers of several replicas lease at once without taking the same hold.
func (s *Store) LeaseHolds(ctx context.Context, owner string, now, orphanedBefore, until time.Time, limit int) ([]*keybrake.Reservation, error) {
	if limit <= 0 {
		limit = 100
	}
	var out []*keybrake.Reservation
	err := s.query(ctx, func(rows pgx.Rows) error {
		for rows.Next() {
			var objectID string
			r, err := scanReservation(prefixRow{rows, &objectID})
			if err != nil {
				return err
			}
			r.ObjectID = objectID
			out = append(out, r)
		}
		return nil
	}, `WITH picked AS (
			-- A held reservation is due when its link's hold ended, or, not
			-- linked (an orphan), when it last changed before $5. No
			-- request of any key may be writing the object.
			SELECT h.key_id, h.object_id, r.id AS rsv, r.updated_at FROM reservations r
			JOIN holds h ON h.key_id = r.key_id AND h.object_id = r.object_id
			WHERE r.state = 'held'
			  AND ((h.reservation_id = r.id AND h.hold_until IS NOT NULL AND h.hold_until < $2)
			    OR (h.reservation_id <> r.id AND r.updated_at < $5))
			  AND NOT EXISTS (SELECT 1 FROM holds o WHERE o.object_id = h.object_id
			    AND o.lock_owner <> '' AND o.lock_until > $2)
			ORDER BY r.updated_at
			LIMIT $4
			FOR UPDATE OF h SKIP LOCKED
		), leased AS (
			UPDATE holds h SET lock_owner = $1, lock_until = $3
			FROM picked WHERE h.key_id = picked.key_id AND h.object_id = picked.object_id
			RETURNING h.object_id
		)
		SELECT picked.object_id, `+prefixed("r.", reservationColumns)+` FROM picked
		JOIN reservations r ON r.id = picked.rsv
		WHERE picked.object_id IN (SELECT object_id FROM leased) ORDER BY picked.updated_at`,
		owner, ts(now), ts(until), limit, ts(orphanedBefore))
	if err != nil {
		return nil, s.wrap("lease holds", err)
	}
	return out, nil
}

// RenewHoldLease extends args.Owner's lease of the key's object to
// args.Until while the lock is still the owner's and the reservation still
// held; ECONFLICT otherwise. It takes the object's advisory lock, as
// LockObject does, so no locker of the object runs between its checks.
func (s *Store) RenewHoldLease(ctx context.Context, args keybrake.RenewArgs) error {
	if args.KeyID == "" || args.ObjectID == "" || args.Owner == "" || args.ReservationID == "" {
		return keybrake.Errorf(keybrake.EINVALID, "A lease needs a key, an object, a reservation and an owner.")
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, args.ObjectID); err != nil {
			return err
		}
		var state string
		if err := tx.QueryRow(ctx, `SELECT state FROM reservations WHERE id = $1`, args.ReservationID).Scan(&state); err != nil {
			return notFound(err, "No such reservation.")
		}
		if state != keybrake.StateHeld {
			return keybrake.Errorf(keybrake.ECONFLICT, "Reservation %s is %s, no longer held.", args.ReservationID, state)
		}
		others, err := lockedByOthers(ctx, tx, args.ObjectID, args.KeyID, args.Owner, args.Now)
		if err != nil {
			return err
		}
		if others {
			return keybrake.Errorf(keybrake.ECONFLICT, "Object %s is locked by another request.", args.ObjectID)
		}
		tag, err := tx.Exec(ctx, `UPDATE holds SET lock_until = $4 WHERE key_id = $1 AND object_id = $2 AND lock_owner = $3`,
			args.KeyID, args.ObjectID, args.Owner, ts(args.Until))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return keybrake.Errorf(keybrake.ECONFLICT, "Object %s is no longer leased by %s.", args.ObjectID, args.Owner)
		}
		return nil
	})
	return s.wrap("renew lease of "+args.ObjectID, err)
}

// prefixRow scans a row whose first column is a string before a row of
// reservationColumns.
type prefixRow struct {
	rows  pgx.Rows
	first *string
}

func (r prefixRow) Scan(dest ...any) error {
	return r.rows.Scan(append([]any{r.first}, dest...)...)
}

// prefixed qualifies each of the comma-separated columns with p.
func prefixed(p, columns string) string {
	cols := strings.Split(columns, ",")
	for i, c := range cols {
		cols[i] = p + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

// HeldObjects returns which of objectIDs the key holds with a live
// reservation. It reads and locks nothing.
func (s *Store) HeldObjects(ctx context.Context, keyID string, objectIDs []string) (map[string]bool, error) {
	if len(objectIDs) > keybrake.MaxHeldObjects {
		return nil, keybrake.Errorf(keybrake.EINVALID, "At most %d objects can be asked at once.", keybrake.MaxHeldObjects)
	}
	out := make(map[string]bool)
	if len(objectIDs) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT h.object_id FROM holds h JOIN reservations r ON r.id = h.reservation_id
		WHERE h.key_id = $1 AND h.object_id = ANY($2) AND r.state IN ('reserved', 'held', 'uncertain')`, keyID, objectIDs)
	if err != nil {
		return nil, s.wrap("held objects", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, s.wrap("held objects", err)
		}
		out[id] = true
	}
	return out, s.wrap("held objects", rows.Err())
}

// spendRateOnRaise decides the breaker's spend-rate rule b on a hold
// raised by m at now, as keybrake_guard_check does on a reservation of m:
// it returns the suspension's reason when the raise trips it, "" when not.
func spendRateOnRaise(ctx context.Context, tx pgx.Tx, keyID string, b *keybrake.Breaker, m keybrake.Micros, now time.Time) (string, error) {
	p := b.Probe(now)
	var recent, base int64
	err := tx.QueryRow(ctx, `SELECT
		(SELECT coalesce(sum(micros), 0)::bigint FROM guard_counters WHERE key_id = $1 AND scope = $2 AND bucket >= $3),
		(SELECT coalesce(sum(micros), 0)::bigint FROM guard_counters WHERE key_id = $1 AND scope = $4 AND bucket >= $5)`,
		keyID, p.Recent, p.RecentSince, p.Base, p.BaseSince).Scan(&recent, &base)
	if err != nil {
		return "", err
	}
	if b.SpendRateTrips(recent+int64(m), base-recent) {
		return b.SpendRateReason(recent + int64(m)), nil
	}
	return "", nil
}

// lockedByOthers reports whether another key's owner holds a live lock on
// objectID: the lock is the object's, whichever key asks. The caller holds
// the object's advisory lock.
func lockedByOthers(ctx context.Context, tx pgx.Tx, objectID, keyID, owner string, now time.Time) (bool, error) {
	var n int
	err := tx.QueryRow(ctx, `SELECT count(*) FROM holds WHERE object_id = $1 AND key_id <> $2
		AND lock_owner <> '' AND lock_owner <> $3 AND lock_until > $4`,
		objectID, keyID, owner, ts(now)).Scan(&n)
	return n > 0, err
}
