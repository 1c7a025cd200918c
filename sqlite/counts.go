package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/keybrake/keybrake"
)

// qCountRead reads, inside Reserve's write transaction, a key's count caps
// and what it has used of one kind in one day and in one month: its
// reservations of that kind and window that are not released
// (migrations/0016_counts.sql, 0018_scopes.sql). The literal count_kind
// term lets SQLite use the partial index reservations_counted (0023);
// without it the sums read every reservation of the key.
const qCountRead = `SELECT k.count_caps,
	COALESCE((SELECT SUM(count) FROM reservations WHERE key_id = ?1 AND count_kind = ?2 AND count_kind <> '' AND month = ?4 AND day = ?3 AND state <> 'released'), 0),
	COALESCE((SELECT SUM(count) FROM reservations WHERE key_id = ?1 AND count_kind = ?2 AND count_kind <> '' AND month = ?4 AND state <> 'released'), 0)
	FROM keys k WHERE k.id = ?1`

// checkCount returns the OverCount of in, nil when it fits its key's daily
// and monthly count caps or counts nothing.
func (s *Store) checkCount(ctx context.Context, tx *sql.Tx, in *keybrake.Reservation, day, month string, now time.Time, loc *time.Location) (*keybrake.OverCount, error) {
	if in.CountKind == "" || in.Count <= 0 {
		return nil, nil
	}
	var (
		raw  string
		used keybrake.CountUse
		caps keybrake.CountCaps
	)
	if err := tx.QueryRowContext(ctx, qCountRead, in.KeyID, in.CountKind, day, month).Scan(&raw, &used.Day, &used.Month); err != nil {
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

// CountsUsed returns what the key has used in its day and month (in its
// zone, at now) of each count kind: reservations not released.
func (s *Store) CountsUsed(ctx context.Context, keyID string, now time.Time) (map[string]keybrake.CountUse, error) {
	var tz string
	if err := s.queryRow(ctx, `SELECT timezone FROM keys WHERE id = ?`, keyID).Scan(&tz); err != nil {
		return nil, wrapKeyErr(err, "counts of key %s", keyID)
	}
	loc, err := location(tz)
	if err != nil {
		return nil, err
	}
	day, month := keybrake.Buckets(now, loc)
	rows, err := s.reader.QueryContext(ctx, `SELECT count_kind, SUM(CASE WHEN day = ? THEN count ELSE 0 END), SUM(count) FROM reservations
		WHERE key_id = ? AND count_kind <> '' AND month = ? AND state <> 'released' GROUP BY count_kind`, day, keyID, month)
	if err != nil {
		return nil, wrap(err, "counts of key %s", keyID)
	}
	defer rows.Close()
	used := map[string]keybrake.CountUse{}
	for rows.Next() {
		var kind string
		var u keybrake.CountUse
		if err := rows.Scan(&kind, &u.Day, &u.Month); err != nil {
			return nil, wrap(err, "counts of key %s", keyID)
		}
		used[kind] = u
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

// encodeScope returns k's scope as stored, ” for none.
func encodeScope(k *keybrake.Key) string {
	sc := keybrake.ScopeOf(k)
	if sc == nil {
		return ""
	}
	b, _ := json.Marshal(sc) // plain struct: cannot fail
	return string(b)
}

func decodeScope(s string, k *keybrake.Key) error {
	k.SetScope(nil)
	if s == "" {
		return nil
	}
	var sc keybrake.Scope
	if err := json.Unmarshal([]byte(s), &sc); err != nil {
		return err
	}
	k.SetScope(&sc)
	return nil
}

// countKind is the kind in counts, "" when it counts nothing.
func countKind(in *keybrake.Reservation) string {
	if in.Count <= 0 {
		return ""
	}
	return in.CountKind
}
