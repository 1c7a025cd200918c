package sqlite

import (
	"context"

	"github.com/keybrake/keybrake"
)

// hourMicros is one hour in the unit of the time columns.
const hourMicros = 3600 * 1_000_000

// counted is what a reservation counts against the caps, as the
// spend_counters triggers count it.
const counted = `CASE state WHEN 'settled' THEN settled_micros WHEN 'released' THEN 0 ELSE micros END`

// CountEvents counts the events in f's range by decision and refusal kind.
func (s *Store) CountEvents(ctx context.Context, f keybrake.StatsFilter) (keybrake.EventCounts, error) {
	var c keybrake.EventCounts
	err := s.reader.QueryRowContext(ctx, `SELECT
		COALESCE(SUM(decision <> 'resolve'), 0),
		COALESCE(SUM(decision = 'allow'), 0),
		COALESCE(SUM(decision = 'replay'), 0),
		COALESCE(SUM(decision = 'resolve'), 0),
		COALESCE(SUM(decision = 'deny' AND reason IN ('revoked', 'expired')), 0),
		COALESCE(SUM(decision = 'deny' AND reason NOT IN ('revoked', 'expired') AND instr(reason, ?4) > 0), 0),
		COALESCE(SUM(decision = 'deny' AND reason NOT IN ('revoked', 'expired') AND instr(reason, ?4) = 0), 0)
		FROM events WHERE (?1 = '' OR key_id = ?1) AND time >= ?2 AND time < ?3`,
		f.KeyID, f.From.UnixMicro(), f.To.UnixMicro(), keybrake.RefusalCapMarker,
	).Scan(&c.Calls, &c.Allowed, &c.Replayed, &c.Resolved, &c.RefusedAuth, &c.RefusedCap, &c.RefusedPolicy)
	if err != nil {
		return c, wrap(err, "count events")
	}
	return c, nil
}

// SpendByHour sums what the reservations created in f's range count, per
// UTC hour of creation.
func (s *Store) SpendByHour(ctx context.Context, f keybrake.StatsFilter) ([]keybrake.SpendPoint, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT created_at / ?4 AS hour, SUM(`+counted+`)
		FROM reservations WHERE (?1 = '' OR key_id = ?1) AND created_at >= ?2 AND created_at < ?3
		GROUP BY hour ORDER BY hour`, f.KeyID, f.From.UnixMicro(), f.To.UnixMicro(), hourMicros)
	if err != nil {
		return nil, wrap(err, "spend by hour")
	}
	defer rows.Close()
	var out []keybrake.SpendPoint
	for rows.Next() {
		var hour, micros int64
		if err := rows.Scan(&hour, &micros); err != nil {
			return nil, wrap(err, "spend by hour")
		}
		out = append(out, keybrake.SpendPoint{Start: fromMicros(hour * hourMicros), Micros: keybrake.Micros(micros)})
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(err, "spend by hour")
	}
	return out, nil
}

// OpenAmounts sums the uncertain and held reservations, through the
// partial indexes of each state when one key is asked for.
func (s *Store) OpenAmounts(ctx context.Context, keyID string) (keybrake.OpenAmounts, error) {
	var o keybrake.OpenAmounts
	var um, hm int64
	err := s.reader.QueryRowContext(ctx, `SELECT
		(SELECT COUNT(*) FROM reservations WHERE state = 'uncertain' AND (?1 = '' OR key_id = ?1)),
		(SELECT COALESCE(SUM(micros), 0) FROM reservations WHERE state = 'uncertain' AND (?1 = '' OR key_id = ?1)),
		(SELECT COUNT(*) FROM reservations WHERE state = 'held' AND (?1 = '' OR key_id = ?1)),
		(SELECT COALESCE(SUM(micros), 0) FROM reservations WHERE state = 'held' AND (?1 = '' OR key_id = ?1))`,
		keyID).Scan(&o.Uncertain, &um, &o.Held, &hm)
	if err != nil {
		return o, wrap(err, "open amounts")
	}
	o.UncertainMicros, o.HeldMicros = keybrake.Micros(um), keybrake.Micros(hm)
	return o, nil
}
