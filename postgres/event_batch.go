package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
)

// AddEvents appends events in one transaction, setting their IDs in order,
// their Time, if zero, to Now, and chaining each to its key's previous
// event. The proxy's audit log batches through it, so a busy proxy pays one
// transaction per batch rather than one per request.
//
// The chain is per key and computed here, under the lock of each key's row
// in audit_heads (taken in key order, so two batches never deadlock): a
// replica writing a key's events waits for another replica's batch of the
// same key to commit, then continues that key's chain from the head it
// left. Keys do not wait for each other.
func (s *Store) AddEvents(ctx context.Context, events []*keybrake.Event) error {
	if len(events) == 0 {
		return nil
	}
	for _, e := range events {
		e.CleanText()
	}
	n := len(events)
	chained := make([]keybrake.Event, n)
	for i, e := range events {
		c := *e
		if c.Time.IsZero() {
			c.Time = s.Now()
		}
		c.Time = ts(c.Time)
		chained[i] = c
	}
	var ids []int64
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		heads, err := lockHeads(ctx, tx, chained)
		if err != nil {
			return err
		}
		for i := range chained {
			h := heads[chained[i].KeyID]
			h.Chain(&chained[i])
			h.Time = chained[i].Time
		}
		ids, err = insertEvents(ctx, tx, chained, heads)
		return err
	})
	if err != nil {
		return s.wrap("add events", err)
	}
	for i, e := range events {
		c := chained[i]
		e.ID, e.Time, e.Seq, e.PrevHash, e.Hash = ids[i], c.Time, c.Seq, c.PrevHash, c.Hash
	}
	return nil
}

// lockHeads creates the missing heads of the events' keys and locks them
// all, in key order.
func lockHeads(ctx context.Context, tx pgx.Tx, events []keybrake.Event) (map[string]*keybrake.ChainLink, error) {
	var keys []string
	for _, e := range events {
		keys = append(keys, e.KeyID)
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	// Both statements in one round trip (a pipeline), run in this order.
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO audit_heads (key_id, seq, hash, time)
		SELECT k, 0, '', now() FROM unnest($1::text[]) AS k ORDER BY k
		ON CONFLICT (key_id) DO NOTHING`, keys)
	b.Queue(`SELECT key_id, seq, hash FROM audit_heads WHERE key_id = ANY($1) ORDER BY key_id FOR UPDATE`, keys)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	heads := map[string]*keybrake.ChainLink{}
	for rows.Next() {
		h := &keybrake.ChainLink{}
		if err := rows.Scan(&h.KeyID, &h.Seq, &h.Hash); err != nil {
			return nil, err
		}
		heads[h.KeyID] = h
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(heads) != len(keys) {
		return nil, fmt.Errorf("locked %d audit heads of %d", len(heads), len(keys))
	}
	rows.Close()
	if err := br.Close(); err != nil {
		return nil, err
	}
	return heads, nil
}

// queueMoveHeads queues the update of the heads to b.
func queueMoveHeads(b *pgx.Batch, heads map[string]*keybrake.ChainLink) {
	var (
		keys, hashes []string
		seqs         []int64
		times        []time.Time
	)
	for _, h := range heads {
		keys, seqs, hashes, times = append(keys, h.KeyID), append(seqs, h.Seq), append(hashes, h.Hash), append(times, h.Time)
	}
	b.Queue(`UPDATE audit_heads h SET seq = u.seq, hash = u.hash, time = u.time
		FROM unnest($1::text[], $2::bigint[], $3::text[], $4::timestamptz[]) AS u(key_id, seq, hash, time)
		WHERE h.key_id = u.key_id`, keys, seqs, hashes, times)
}

// insertEvents inserts events in one statement, moves their keys' heads in
// a second one sent in the same round trip, and returns the events' IDs in
// order.
func insertEvents(ctx context.Context, tx pgx.Tx, events []keybrake.Event, heads map[string]*keybrake.ChainLink) ([]int64, error) {
	n := len(events)
	var (
		keyIDs, ops, methods, paths, currencies   = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		decisions, reasons, objectIDs, requestIDs = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		idemKeys, rsvIDs, prevHashes, hashes      = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		vias, mcpSessions, mcpClients             = make([]string, n), make([]string, n), make([]string, n)
		times                                     = make([]time.Time, n)
		amounts, micros, seqs                     = make([]int64, n), make([]int64, n), make([]int64, n)
		statuses                                  = make([]int32, n)
	)
	for i, e := range events {
		keyIDs[i], times[i], ops[i], methods[i], paths[i] = e.KeyID, e.Time, e.Operation, e.Method, e.Path
		amounts[i], currencies[i], micros[i] = e.Amount, e.Currency, int64(e.Micros)
		decisions[i], reasons[i], statuses[i], objectIDs[i] = e.Decision, e.Reason, int32(e.UpstreamStatus), e.ObjectID
		requestIDs[i], idemKeys[i], rsvIDs[i] = e.RequestID, e.IdempotencyKey, e.ReservationID
		vias[i], mcpSessions[i], mcpClients[i] = e.Via, e.MCPSession, e.MCPClient
		seqs[i], prevHashes[i], hashes[i] = e.Seq, e.PrevHash, e.Hash
	}
	// Rows are inserted in ordinality order, so the identity column numbers
	// them in that order: the returned IDs, sorted, belong to the events in
	// order, whatever order RETURNING lists them in.
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO events (key_id, time, operation, method, path, amount, currency, micros,
		decision, reason, upstream_status, object_id, request_id, idempotency_key, reservation_id, seq, prev_hash, hash,
		via, mcp_session, mcp_client)
		SELECT key_id, time, operation, method, path, amount, currency, micros,
		       decision, reason, upstream_status, object_id, request_id, idempotency_key, reservation_id, seq, prev_hash, hash,
		       via, mcp_session, mcp_client
		FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[], $8::bigint[],
		            $9::text[], $10::text[], $11::integer[], $12::text[], $13::text[], $14::text[], $15::text[],
		            $16::bigint[], $17::text[], $18::text[], $19::text[], $20::text[], $21::text[])
		     WITH ORDINALITY AS e(key_id, time, operation, method, path, amount, currency, micros,
		                          decision, reason, upstream_status, object_id, request_id, idempotency_key, reservation_id,
		                          seq, prev_hash, hash, via, mcp_session, mcp_client, ord)
		ORDER BY ord
		RETURNING id`,
		keyIDs, times, ops, methods, paths, amounts, currencies, micros,
		decisions, reasons, statuses, objectIDs, requestIDs, idemKeys, rsvIDs, seqs, prevHashes, hashes,
		vias, mcpSessions, mcpClients)
	queueMoveHeads(b, heads)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	ids := make([]int64, 0, n)
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(ids) != n {
		return nil, fmt.Errorf("inserted %d events of %d", len(ids), n)
	}
	rows.Close()
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	if err := br.Close(); err != nil {
		return nil, err
	}
	slices.Sort(ids)
	return ids, nil
}
