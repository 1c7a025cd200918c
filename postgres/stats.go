package postgres

import (
	"context"
	"time"

	"github.com/keybrake/keybrake"
)

// counted is what a reservation counts against the caps, as the spend
// counters count it.
const counted = `CASE state WHEN 'settled' THEN settled_micros WHEN 'released' THEN 0 ELSE micros END`

// CountEvents counts the events in f's range by decision and refusal kind.
func (s *Store) CountEvents(ctx context.Context, f keybrake.StatsFilter) (keybrake.EventCounts, error) {
	var c keybrake.EventCounts
	err := s.pool.QueryRow(ctx, `SELECT
		COUNT(*) FILTER (WHERE decision <> 'resolve'),
		COUNT(*) FILTER (WHERE decision = 'allow'),
		COUNT(*) FILTER (WHERE decision = 'replay'),
		COUNT(*) FILTER (WHERE decision = 'resolve'),
		COUNT(*) FILTER (WHERE decision = 'deny' AND reason IN ('revoked', 'expired')),
		COUNT(*) FILTER (WHERE decision = 'deny' AND reason NOT IN ('revoked', 'expired') AND strpos(reason, $4) > 0),
		COUNT(*) FILTER (WHERE decision = 'deny' AND reason NOT IN ('revoked', 'expired') AND strpos(reason, $4) = 0)
		FROM events WHERE ($1 = '' OR key_id = $1) AND time >= $2 AND time < $3`,
		f.KeyID, f.From, f.To, keybrake.RefusalCapMarker,
	).Scan(&c.Calls, &c.Allowed, &c.Replayed, &c.Resolved, &c.RefusedAuth, &c.RefusedCap, &c.RefusedPolicy)
	if err != nil {
		return c, s.wrap("count events", err)
	}
	return c, nil
}

// SpendByHour sums what the reservations created in f's range count, per
// UTC hour of creation (epoch hours, so no session time zone applies).
func (s *Store) SpendByHour(ctx context.Context, f keybrake.StatsFilter) ([]keybrake.SpendPoint, error) {
	rows, err := s.pool.Query(ctx, `SELECT floor(extract(epoch FROM created_at) / 3600)::bigint AS hour, SUM(`+counted+`)::bigint
		FROM reservations WHERE ($1 = '' OR key_id = $1) AND created_at >= $2 AND created_at < $3
		GROUP BY hour ORDER BY hour`, f.KeyID, f.From, f.To)
	if err != nil {
		return nil, s.wrap("spend by hour", err)
	}
	defer rows.Close()
	var out []keybrake.SpendPoint
	for rows.Next() {
		var hour, micros int64
		if err := rows.Scan(&hour, &micros); err != nil {
			return nil, s.wrap("spend by hour", err)
		}
		out = append(out, keybrake.SpendPoint{Start: time.Unix(hour*3600, 0).UTC(), Micros: keybrake.Micros(micros)})
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("spend by hour", err)
	}
	return out, nil
}

// OpenAmounts sums the uncertain and held reservations.
func (s *Store) OpenAmounts(ctx context.Context, keyID string) (keybrake.OpenAmounts, error) {
	var o keybrake.OpenAmounts
	var um, hm int64
	err := s.pool.QueryRow(ctx, `SELECT
		COUNT(*) FILTER (WHERE state = 'uncertain'),
		COALESCE(SUM(micros) FILTER (WHERE state = 'uncertain'), 0)::bigint,
		COUNT(*) FILTER (WHERE state = 'held'),
		COALESCE(SUM(micros) FILTER (WHERE state = 'held'), 0)::bigint
		FROM reservations WHERE state IN ('uncertain', 'held') AND ($1 = '' OR key_id = $1)`,
		keyID).Scan(&o.Uncertain, &um, &o.Held, &hm)
	if err != nil {
		return o, s.wrap("open amounts", err)
	}
	o.UncertainMicros, o.HeldMicros = keybrake.Micros(um), keybrake.Micros(hm)
	return o, nil
}
