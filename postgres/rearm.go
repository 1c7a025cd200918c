package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
)

// Rearm reserves again, in place, the key's released reservation for the
// Idempotency-Key, checking every cap against the new amount in the windows
// of args.Now. See keybrake.SpendService. It takes the key's row lock, as a
// reservation does, then the reservation's, as a settlement does, so it
// orders with both; it is rare (a retry after an answer Stripe did not
// save), so it runs as a plain transaction outside the reservation batches.
func (s *Store) Rearm(ctx context.Context, args keybrake.ReserveArgs) (keybrake.ReserveResult, error) {
	in := args.Reservation
	switch {
	case in == nil:
		return keybrake.ReserveResult{}, keybrake.Errorf(keybrake.EINVALID, "No reservation given.")
	case in.Micros < 0:
		return keybrake.ReserveResult{}, keybrake.Errorf(keybrake.EINVALID, "A reservation cannot be negative (%s).", in.Micros)
	case in.IdempotencyKey == "":
		return keybrake.ReserveResult{}, keybrake.ErrorParam("idempotency_key", "A reservation needs an Idempotency-Key.")
	}
	now := args.Now
	if now.IsZero() && s.Now != nil {
		now = s.Now()
	} else if now.IsZero() {
		now = time.Now()
	}
	now = ts(now)
	if err := s.checkClock(ctx, now); err != nil { // guard_clock.go
		return keybrake.ReserveResult{}, err
	}
	var res keybrake.ReserveResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		res, err = s.rearm(ctx, tx, in, now)
		return err
	})
	if err != nil {
		return keybrake.ReserveResult{}, s.wrap(fmt.Sprintf("rearm on %s", in.KeyID), err)
	}
	return res, nil
}

func (s *Store) rearm(ctx context.Context, tx pgx.Tx, in *keybrake.Reservation, now time.Time) (keybrake.ReserveResult, error) {
	var k keybrake.Key
	var caps [4]*int64
	var countCaps []byte
	err := tx.QueryRow(ctx, `SELECT secret_prefix, timezone, per_request_cap, daily_cap, monthly_cap, total_cap, expires_at, revoked_at,
		suspended_at, suspended_reason, count_caps
		FROM keys WHERE id = $1 FOR NO KEY UPDATE`, in.KeyID).Scan(
		&k.SecretPrefix, &k.Timezone, &caps[0], &caps[1], &caps[2], &caps[3], &k.ExpiresAt, &k.RevokedAt,
		&k.SuspendedAt, &k.SuspendedReason, &countCaps)
	k.ID = in.KeyID
	if errors.Is(err, pgx.ErrNoRows) {
		return keybrake.ReserveResult{}, keybrake.Errorf(keybrake.ENOTFOUND, "No such key: %s.", in.KeyID)
	} else if err != nil {
		return keybrake.ReserveResult{}, err
	}
	if err := k.Usable(now); err != nil {
		return keybrake.ReserveResult{}, err
	}
	for i, p := range []**keybrake.Micros{&k.PerRequest, &k.Daily, &k.Monthly, &k.Total} {
		if caps[i] != nil {
			m := keybrake.Micros(*caps[i])
			*p = &m
		}
	}
	loc, err := k.Location()
	if err != nil {
		return keybrake.ReserveResult{}, err
	}
	var id, state string
	err = tx.QueryRow(ctx, `SELECT id, state FROM reservations WHERE key_id = $1 AND idempotency_key = $2 FOR UPDATE`,
		in.KeyID, in.IdempotencyKey).Scan(&id, &state)
	if errors.Is(err, pgx.ErrNoRows) {
		return keybrake.ReserveResult{}, keybrake.Errorf(keybrake.ENOTFOUND, "No reservation under this Idempotency-Key.")
	} else if err != nil {
		return keybrake.ReserveResult{}, err
	}
	if state != keybrake.StateReleased {
		return keybrake.ReserveResult{}, keybrake.Errorf(keybrake.ECONFLICT, "Reservation %s is %s, not released.", id, state)
	}
	day, month := keybrake.Buckets(now, loc)
	var spent keybrake.Spend
	err = tx.QueryRow(ctx, `SELECT
		COALESCE((SELECT micros FROM spend_counters WHERE key_id = $1 AND window_name = 'daily' AND bucket = $2), 0),
		COALESCE((SELECT micros FROM spend_counters WHERE key_id = $1 AND window_name = 'monthly' AND bucket = $3), 0),
		COALESCE((SELECT micros FROM spend_counters WHERE key_id = $1 AND window_name = 'total' AND bucket = ''), 0)`,
		in.KeyID, day, month).Scan(&spent.Day, &spent.Month, &spent.Total)
	if err != nil {
		return keybrake.ReserveResult{}, err
	}
	if oc := keybrake.CheckCaps(k.Caps, spent, in.Micros, now, loc); oc != nil {
		return keybrake.ReserveResult{OverCap: oc}, nil
	}
	// The retry sends anew, so it counts anew, under the count caps of
	// now; released, the reservation counts in no window yet.
	kind, count := "", int64(0)
	if in.CountKind != "" && in.Count > 0 {
		kind, count = in.CountKind, in.Count
		if countCaps != nil {
			if err := json.Unmarshal(countCaps, &k.CountCaps); err != nil {
				return keybrake.ReserveResult{}, err
			}
		}
		used, err := countUse(ctx, tx, in.KeyID, kind, day, month)
		if err != nil {
			return keybrake.ReserveResult{}, err
		}
		if oc := keybrake.CheckCount(k.CountCaps, kind, used, count, now, loc); oc != nil {
			return keybrake.ReserveResult{OverCount: oc}, nil
		}
	}
	// A retry Stripe runs anew is a new attempt: keybrake_guard_check
	// decides it under the key row lock held since the SELECT above, as
	// keybrake_reserve does, and names the counters of now it counts in.
	var (
		guard, rule, eid, eobj *string
		eat, retry             *time.Time
		glimit, gcount         *int32
		suspended              *bool
		counted                []byte
	)
	err = tx.QueryRow(ctx, `SELECT g.guard, g.rule, g.earlier_id, g.earlier_object, g.earlier_at, g.g_limit, g.g_count, g.retry_at, g.suspended, g.counted
		FROM keys k, keybrake_guard_check(k, $2, $3, $4, $5, $6, $7, $8) g WHERE k.id = $1 AND k.guards IS NOT NULL`,
		in.KeyID, in.Fingerprint, in.Operation, int64(in.Micros), in.Customer, in.DupKey, in.Override, now).Scan(
		&guard, &rule, &eid, &eobj, &eat, &glimit, &gcount, &retry, &suspended, &counted)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return keybrake.ReserveResult{}, err
	}
	if guard != nil {
		g := &keybrake.GuardRefusal{Guard: *guard, Rule: deref(rule), EarlierID: deref(eid), EarlierObjectID: deref(eobj),
			Limit: int(deref(glimit)), Count: int(deref(gcount)), Suspended: deref(suspended)}
		if eat != nil {
			g.EarlierAt = ts(*eat)
		}
		if retry != nil {
			g.RetryAt = ts(*retry)
		}
		return keybrake.ReserveResult{Guard: g}, nil
	}
	q := in.Request
	out, err := scanReservation(tx.QueryRow(ctx, `UPDATE reservations SET state = 'reserved', micros = $2, settled_micros = 0,
		fingerprint = $3, operation = $4, amount = $5, currency = $6, day = $7, month = $8,
		req_method = $9, req_path = $10, req_body = $11, req_stripe_account = $12, req_stripe_version = $13,
		object_id = '', upstream_status = 0, attempts = 0, lease_owner = '', lease_until = NULL,
		created_at = $14, updated_at = $14, counted = $15, count_kind = $16, count = $17
		WHERE id = $1 RETURNING `+reservationColumns,
		id, int64(in.Micros), in.Fingerprint, in.Operation, in.Amount, in.Currency, day, month,
		q.Method, q.Path, []byte(q.Body), q.StripeAccount, q.StripeVersion, now, counted, kind, count))
	if err != nil {
		return keybrake.ReserveResult{}, err
	}
	// The counters, in the order the batch functions take them.
	if _, err := tx.Exec(ctx, `INSERT INTO spend_counters (key_id, window_name, bucket, micros)
		VALUES ($1, 'daily', $2, $4), ($1, 'monthly', $3, $4), ($1, 'total', '', $4)
		ON CONFLICT (key_id, window_name, bucket) DO UPDATE SET micros = spend_counters.micros + excluded.micros`,
		in.KeyID, day, month, int64(in.Micros)); err != nil {
		return keybrake.ReserveResult{}, err
	}
	out.CountKind, out.Count = kind, count
	*in = *out
	return keybrake.ReserveResult{Reservation: in}, nil
}
