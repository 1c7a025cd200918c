package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
)

// eventColumns are the columns scanEvent reads, in its order.
const eventColumns = `id, key_id, time, operation, method, path, amount, currency, micros,
	decision, reason, upstream_status, object_id, request_id, idempotency_key, reservation_id, seq, prev_hash, hash`

// defaultEventLimit is the page size of FindEvents when the filter sets none.
const defaultEventLimit = 10

// AddEvent appends e, setting its ID (and its Time, if zero, to Now).
func (s *Store) AddEvent(ctx context.Context, e *keybrake.Event) error {
	return s.AddEvents(ctx, []*keybrake.Event{e})
}

// FindEvents returns a page of the key's events, newest first, and whether
// more follow. An empty KeyID selects the events of every key.
func (s *Store) FindEvents(ctx context.Context, f keybrake.EventFilter) ([]*keybrake.Event, bool, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = defaultEventLimit
	}
	rows, err := s.pool.Query(ctx, `SELECT `+eventColumns+` FROM events
		WHERE ($1 = '' OR key_id = $1) AND ($2 = 0 OR id < $2)
		ORDER BY id DESC LIMIT $3`, f.KeyID, f.StartingAfter, limit+1)
	if err != nil {
		return nil, false, s.wrap("find events", err)
	}
	events, err := collectEvents(rows)
	if err != nil {
		return nil, false, s.wrap("find events", err)
	}
	more := len(events) > limit
	if more {
		events = events[:limit]
	}
	return events, more, nil
}

func collectEvents(rows pgx.Rows) ([]*keybrake.Event, error) {
	defer rows.Close()
	var events []*keybrake.Event
	for rows.Next() {
		var e keybrake.Event
		var micros int64
		if err := rows.Scan(&e.ID, &e.KeyID, &e.Time, &e.Operation, &e.Method, &e.Path, &e.Amount, &e.Currency, &micros,
			&e.Decision, &e.Reason, &e.UpstreamStatus, &e.ObjectID, &e.RequestID, &e.IdempotencyKey, &e.ReservationID,
			&e.Seq, &e.PrevHash, &e.Hash); err != nil {
			return nil, err
		}
		e.Micros = keybrake.Micros(micros)
		e.Time = ts(e.Time)
		events = append(events, &e)
	}
	return events, rows.Err()
}
