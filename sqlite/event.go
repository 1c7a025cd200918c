package sqlite

import (
	"context"
	"database/sql"

	"github.com/keybrake/keybrake"
)

const eventColumns = `id, key_id, time, operation, method, path, amount, currency, micros, decision,
	reason, upstream_status, object_id, request_id, idempotency_key, reservation_id, via, mcp_session, mcp_client, seq, prev_hash, hash`

// AddEvent appends e to the audit log and sets e.ID. IDs only grow.
func (s *Store) AddEvent(ctx context.Context, e *keybrake.Event) error {
	return s.AddEvents(ctx, []*keybrake.Event{e})
}

// FindEvents returns a page of a key's events, newest first, and whether
// more follow. An empty KeyID pages through every key's events; the
// filter's other fields narrow the page.
func (s *Store) FindEvents(ctx context.Context, f keybrake.EventFilter) ([]*keybrake.Event, bool, error) {
	limit := f.Limit
	if limit < 0 {
		return nil, false, keybrake.ErrorParam("limit", "limit must not be negative")
	} else if limit == 0 {
		limit = 10
	}
	q, args := eventQuery(f, limit)
	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, false, wrap(err, "find events")
	}
	es, err := scanEvents(rows)
	if err != nil {
		return nil, false, wrap(err, "find events")
	}
	if len(es) > limit {
		return es[:limit], true, nil
	}
	return es, false, nil
}

// eventQuery builds FindEvents' statement: only the conditions the filter
// sets, so the common page (one key, newest first) keeps its plain plan on
// events_key_id.
func eventQuery(f keybrake.EventFilter, limit int) (string, []any) {
	before := f.StartingAfter
	if before <= 0 {
		before = 1<<63 - 1
	}
	q := `SELECT ` + eventColumns + ` FROM events WHERE id < ? AND id > ?`
	args := []any{before, f.NewerThan}
	for _, c := range []struct {
		cond string
		set  bool
		arg  any
	}{
		{` AND key_id = ?`, f.KeyID != "", f.KeyID},
		{` AND decision = ?`, f.Decision != "", f.Decision},
		{` AND operation = ?`, f.Operation != "", f.Operation},
		{` AND time >= ?`, !f.Since.IsZero(), f.Since.UnixMicro()},
		{` AND time < ?`, !f.Until.IsZero(), f.Until.UnixMicro()},
	} {
		if c.set {
			q += c.cond
			args = append(args, c.arg)
		}
	}
	return q + ` ORDER BY id DESC LIMIT ?`, append(args, limit+1)
}

// scanEvents reads rows of eventColumns and closes them.
func scanEvents(rows *sql.Rows) ([]*keybrake.Event, error) {
	defer rows.Close()
	var es []*keybrake.Event
	for rows.Next() {
		var (
			e keybrake.Event
			t int64
		)
		if err := rows.Scan(&e.ID, &e.KeyID, &t, &e.Operation, &e.Method, &e.Path, &e.Amount, &e.Currency, &e.Micros,
			&e.Decision, &e.Reason, &e.UpstreamStatus, &e.ObjectID, &e.RequestID, &e.IdempotencyKey, &e.ReservationID,
			&e.Via, &e.MCPSession, &e.MCPClient, &e.Seq, &e.PrevHash, &e.Hash); err != nil {
			return nil, err
		}
		e.Time = fromMicros(t)
		es = append(es, &e)
	}
	return es, rows.Err()
}
