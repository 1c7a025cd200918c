package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
)

// eventColumns are the columns scanEvent reads, in its order.
const eventColumns = `id, key_id, time, operation, method, path, amount, currency, micros,
	decision, reason, upstream_status, object_id, request_id, idempotency_key, reservation_id, via, mcp_session, mcp_client, seq, prev_hash, hash`

// defaultEventLimit is the page size of FindEvents when the filter sets none.
const defaultEventLimit = 10

// AddEvent appends e, setting its ID (and its Time, if zero, to Now).
func (s *Store) AddEvent(ctx context.Context, e *keybrake.Event) error {
	return s.AddEvents(ctx, []*keybrake.Event{e})
}

// FindEvents returns a page of the key's events, newest first, and whether
// more follow. An empty KeyID selects the events of every key; the
// filter's other fields narrow the page.
func (s *Store) FindEvents(ctx context.Context, f keybrake.EventFilter) ([]*keybrake.Event, bool, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = defaultEventLimit
	}
	q, args := eventQuery(f, limit)
	rows, err := s.pool.Query(ctx, q, args...)
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
			&e.Via, &e.MCPSession, &e.MCPClient, &e.Seq, &e.PrevHash, &e.Hash); err != nil {
			return nil, err
		}
		e.Micros = keybrake.Micros(micros)
		e.Time = ts(e.Time)
		events = append(events, &e)
	}
	return events, rows.Err()
}

// eventQuery builds FindEvents' statement with only the conditions the
// filter sets, so the common page (one key, newest first) keeps its plan.
func eventQuery(f keybrake.EventFilter, limit int) (string, []any) {
	q := `SELECT ` + eventColumns + ` FROM events WHERE true`
	var args []any
	for _, c := range []struct {
		cond string
		set  bool
		arg  any
	}{
		{` AND id < $%d`, f.StartingAfter > 0, f.StartingAfter},
		{` AND id > $%d`, f.NewerThan > 0, f.NewerThan},
		{` AND key_id = $%d`, f.KeyID != "", f.KeyID},
		{` AND decision = $%d`, f.Decision != "", f.Decision},
		{` AND operation = $%d`, f.Operation != "", f.Operation},
		{` AND time >= $%d`, !f.Since.IsZero(), f.Since},
		{` AND time < $%d`, !f.Until.IsZero(), f.Until},
	} {
		if c.set {
			args = append(args, c.arg)
			q += fmt.Sprintf(c.cond, len(args))
		}
	}
	args = append(args, limit+1)
	return q + fmt.Sprintf(` ORDER BY id DESC LIMIT $%d`, len(args)), args
}
