package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/keybrake/keybrake"
)

// qCountRead reads, inside Reserve's write transaction, a key's count caps
// and what it has used of one kind in one day: its reservations of that
// kind and day that are not released (migrations/0016_counts.sql).
const qCountRead = `SELECT k.count_caps,
	COALESCE((SELECT SUM(count) FROM reservations WHERE key_id = ?1 AND count_kind = ?2 AND day = ?3 AND state <> 'released'), 0)
	FROM keys k WHERE k.id = ?1`

// checkCount returns the OverCount of in, nil when it fits its key's daily
// count cap or counts nothing.
func (s *Store) checkCount(ctx context.Context, tx *sql.Tx, in *keybrake.Reservation, day string, now time.Time, loc *time.Location) (*keybrake.OverCount, error) {
	if in.CountKind == "" || in.Count <= 0 {
		return nil, nil
	}
	var (
		raw  string
		used int64
		caps keybrake.CountCaps
	)
	if err := tx.QueryRowContext(ctx, qCountRead, in.KeyID, in.CountKind, day).Scan(&raw, &used); err != nil {
		return nil, wrapKeyErr(err, "reserve on key %s: read counts", in.KeyID)
	}
	if err := decodeCountCaps(raw, &caps); err != nil {
		return nil, wrap(err, "reserve on key %s: decode count caps", in.KeyID)
	}
	return keybrake.CheckCount(caps, in.CountKind, used, in.Count, now, loc), nil
}

// recordCount marks the reservation r, just inserted in tx, as counting
// r.Count of r.CountKind. The spend triggers watch other columns only.
func (s *Store) recordCount(ctx context.Context, tx *sql.Tx, r *keybrake.Reservation) error {
	if r.CountKind == "" || r.Count <= 0 {
		return nil
	}
	_, err := tx.ExecContext(ctx, `UPDATE reservations SET count_kind = ?2, count = ?3 WHERE id = ?1`, r.ID, r.CountKind, r.Count)
	return wrap(err, "reserve on key %s: record count", r.KeyID)
}

// CountsUsed returns what the key has used today (in its zone, at now) of
// each count kind: reservations not released.
func (s *Store) CountsUsed(ctx context.Context, keyID string, now time.Time) (map[string]int64, error) {
	var tz string
	if err := s.queryRow(ctx, `SELECT timezone FROM keys WHERE id = ?`, keyID).Scan(&tz); err != nil {
		return nil, wrapKeyErr(err, "counts of key %s", keyID)
	}
	loc, err := location(tz)
	if err != nil {
		return nil, err
	}
	day, _ := keybrake.Buckets(now, loc)
	rows, err := s.reader.QueryContext(ctx, `SELECT count_kind, SUM(count) FROM reservations
		WHERE key_id = ? AND count_kind <> '' AND day = ? AND state <> 'released' GROUP BY count_kind`, keyID, day)
	if err != nil {
		return nil, wrap(err, "counts of key %s", keyID)
	}
	defer rows.Close()
	used := map[string]int64{}
	for rows.Next() {
		var kind string
		var n int64
		if err := rows.Scan(&kind, &n); err != nil {
			return nil, wrap(err, "counts of key %s", keyID)
		}
		used[kind] = n
	}
	return used, wrap(rows.Err(), "counts of key %s", keyID)
}

func encodeCountCaps(c keybrake.CountCaps) string {
	if !c.Any() {
		return ""
	}
	b, _ := json.Marshal(c) // plain struct: cannot fail
	return string(b)
}

func decodeCountCaps(s string, dst *keybrake.CountCaps) error {
	*dst = keybrake.CountCaps{}
	if s == "" {
		return nil
	}
	return json.Unmarshal([]byte(s), dst)
}
