package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/keybrake/keybrake"
)

// AddEvents appends events in one statement (one round trip, one implicit
// transaction), setting their IDs in order and their Time, if zero, to Now.
// The proxy's audit log batches through it, so a busy proxy pays one write
// per batch rather than one per request.
func (s *Store) AddEvents(ctx context.Context, events []*keybrake.Event) error {
	if len(events) == 0 {
		return nil
	}
	n := len(events)
	var (
		keyIDs, ops, methods, paths, currencies   = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		decisions, reasons, objectIDs, requestIDs = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		idemKeys, rsvIDs                          = make([]string, n), make([]string, n)
		vias, mcpSessions, mcpClients             = make([]string, n), make([]string, n), make([]string, n)
		times                                     = make([]time.Time, n)
		amounts, micros                           = make([]int64, n), make([]int64, n)
		statuses                                  = make([]int32, n)
	)
	for i, e := range events {
		if e.Time.IsZero() {
			e.Time = s.Now()
		}
		e.Time = ts(e.Time)
		keyIDs[i], times[i], ops[i], methods[i], paths[i] = e.KeyID, e.Time, e.Operation, e.Method, e.Path
		amounts[i], currencies[i], micros[i] = e.Amount, e.Currency, int64(e.Micros)
		decisions[i], reasons[i], statuses[i], objectIDs[i] = e.Decision, e.Reason, int32(e.UpstreamStatus), e.ObjectID
		requestIDs[i], idemKeys[i], rsvIDs[i] = e.RequestID, e.IdempotencyKey, e.ReservationID
		vias[i], mcpSessions[i], mcpClients[i] = e.Via, e.MCPSession, e.MCPClient
	}
	// Rows are inserted in ordinality order, so the identity column numbers
	// them in that order: the returned IDs, sorted, belong to the events in
	// order, whatever order RETURNING lists them in.
	rows, err := s.pool.Query(ctx, `INSERT INTO events (key_id, time, operation, method, path, amount, currency, micros,
		decision, reason, upstream_status, object_id, request_id, idempotency_key, reservation_id,
		via, mcp_session, mcp_client)
		SELECT key_id, time, operation, method, path, amount, currency, micros,
		       decision, reason, upstream_status, object_id, request_id, idempotency_key, reservation_id,
		       via, mcp_session, mcp_client
		FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[], $8::bigint[],
		            $9::text[], $10::text[], $11::integer[], $12::text[], $13::text[], $14::text[], $15::text[],
		            $16::text[], $17::text[], $18::text[])
		     WITH ORDINALITY AS e(key_id, time, operation, method, path, amount, currency, micros,
		                          decision, reason, upstream_status, object_id, request_id, idempotency_key, reservation_id,
		                          via, mcp_session, mcp_client, ord)
		ORDER BY ord
		RETURNING id`,
		keyIDs, times, ops, methods, paths, amounts, currencies, micros,
		decisions, reasons, statuses, objectIDs, requestIDs, idemKeys, rsvIDs,
		vias, mcpSessions, mcpClients)
	if err != nil {
		return s.wrap("add events", err)
	}
	defer rows.Close()
	ids := make([]int64, 0, n)
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return s.wrap("add events", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return s.wrap("add events", err)
	}
	if len(ids) != n {
		return s.wrap("add events", fmt.Errorf("inserted %d events of %d", len(ids), n))
	}
	slices.Sort(ids)
	for i, e := range events {
		e.ID = ids[i]
	}
	return nil
}
