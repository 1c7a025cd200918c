package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
)

// errNoWrite ends a reserveCounted transaction that wrote nothing to keep.
var errNoWrite = errors.New("postgres: nothing to commit")

// reserveCounted decides a reservation that counts (Reservation.CountKind)
// in one transaction of its own, outside the key's batch queue: it takes
// the key row lock keybrake_reserve takes (FOR NO KEY UPDATE, so it queues
// behind and ahead of the batches of the same key), looks for a replay,
// checks the daily and monthly count caps against the key's unreleased
// reservations of that kind, day and month, then runs keybrake_reserve itself for the USD caps,
// guards and insert, and records the count on the new row. The Stripe path
// and its batching are untouched. Returns the outcome of keybrake_reserve,
// or the OverCount with nothing recorded.
func (s *Store) reserveCounted(ctx context.Context, r *keybrake.Reservation, version string, now time.Time, loc *time.Location) (reserveOutcome, *keybrake.OverCount, error) {
	var (
		out  reserveOutcome
		over *keybrake.OverCount
	)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var (
			raw      []byte
			replayID *string
			used     keybrake.CountUse
		)
		err := tx.QueryRow(ctx, `SELECT k.count_caps,
			(SELECT id FROM reservations WHERE key_id = k.id AND idempotency_key = $2)
			FROM keys k WHERE k.id = $1 FOR NO KEY UPDATE OF k`, r.KeyID, r.IdempotencyKey).Scan(&raw, &replayID)
		if err != nil {
			return notFound(err, "No such key: %s.", r.KeyID)
		}
		if replayID == nil {
			var caps keybrake.CountCaps
			if raw != nil {
				if err := json.Unmarshal(raw, &caps); err != nil {
					return err
				}
			}
			if used, err = countUse(ctx, tx, r.KeyID, r.CountKind, r.Day, r.Month); err != nil {
				return err
			}
			if over = keybrake.CheckCount(caps, r.CountKind, used, r.Count, now, loc); over != nil {
				return errNoWrite
			}
		}
		if out, err = scanReserveOne(tx.QueryRow(ctx, qReserveOne, reserveOneArgs(r, version)...)); err != nil {
			return err
		}
		if out.status != "ok" {
			return errNoWrite
		}
		_, err = tx.Exec(ctx, `UPDATE reservations SET count_kind = $2, count = $3 WHERE id = $1`, r.ID, r.CountKind, r.Count)
		return err
	})
	if errors.Is(err, errNoWrite) {
		err = nil
	}
	if over != nil {
		// An unusable key says so before its count does.
		if k, kerr := s.FindKeyByID(ctx, r.KeyID); kerr == nil && k.Usable(now) != nil {
			return reserveOutcome{status: "unusable"}, nil, nil
		}
	}
	return out, over, err
}

// countUse returns what the key has used of kind in day and month: its
// reservations of that kind and window not released. The caller holds the
// key's row lock, so no reservation of the key commits in between.
// The literal test that count_kind is not empty (kind never is here) lets
// a generic plan prove the partial indexes reservations_counted and
// _counted_month, which count_kind = $2 alone cannot.
func countUse(ctx context.Context, tx pgx.Tx, keyID, kind, day, month string) (keybrake.CountUse, error) {
	var u keybrake.CountUse
	err := tx.QueryRow(ctx, `SELECT
		COALESCE((SELECT SUM(count) FROM reservations WHERE key_id = $1 AND count_kind = $2 AND count_kind <> '' AND day = $3 AND state <> 'released'), 0)::bigint,
		COALESCE((SELECT SUM(count) FROM reservations WHERE key_id = $1 AND count_kind = $2 AND count_kind <> '' AND month = $4 AND state <> 'released'), 0)::bigint`,
		keyID, kind, day, month).Scan(&u.Day, &u.Month)
	return u, err
}

// CountsUsed returns what the key has used in its day and month (in its
// zone, at now) of each count kind: its reservations of that kind and
// window not released. Returns ENOTFOUND for an unknown key.
func (s *Store) CountsUsed(ctx context.Context, keyID string, now time.Time) (map[string]keybrake.CountUse, error) {
	loc, err := s.location(ctx, keyID)
	if err != nil {
		return nil, err
	}
	day, month := keybrake.Buckets(now, loc)
	used := map[string]keybrake.CountUse{}
	err = s.query(ctx, func(rows pgx.Rows) error {
		for rows.Next() {
			var kind string
			var u keybrake.CountUse
			if err := rows.Scan(&kind, &u.Day, &u.Month); err != nil {
				return err
			}
			used[kind] = u
		}
		return rows.Err()
	}, `SELECT count_kind, SUM(CASE WHEN day = $2 THEN count ELSE 0 END)::bigint, SUM(count)::bigint FROM reservations
		WHERE key_id = $1 AND count_kind <> '' AND month = $3 AND state <> 'released' GROUP BY count_kind`, keyID, day, month)
	if err != nil {
		return nil, s.wrap("counts of "+keyID, err)
	}
	return used, nil
}

func encodeCountCaps(c keybrake.CountCaps) []byte {
	if !c.Any() {
		return nil
	}
	b, _ := json.Marshal(c) // plain struct: cannot fail
	return b
}

// encodeScope returns k's scope as stored, nil (NULL) for none.
func encodeScope(k *keybrake.Key) []byte {
	sc := keybrake.ScopeOf(k)
	if sc == nil {
		return nil
	}
	b, _ := json.Marshal(sc) // plain struct: cannot fail
	return b
}
