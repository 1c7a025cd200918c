package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/keybrake/keybrake"
)

const (
	qChainHead = `SELECT seq, hash FROM audit_heads WHERE key_id = ?`
	qMoveHead  = `INSERT INTO audit_heads (key_id, seq, hash, time) VALUES (?, ?, ?, ?)
		ON CONFLICT (key_id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash, time = excluded.time`
)

// eventChunks are the row counts of the prepared multi-row inserts of
// events, largest first: a batch is written as few of them as add up to it
// (37 events: 32, 4, 1), each one statement for all its rows.
var eventChunks = []int{64, 32, 16, 8, 4, 2, 1}

// qInsertEvents returns the insert of n events, which returns each row's
// ID with the key and sequence number that name it within a batch.
func qInsertEvents(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO events (key_id, time, operation, method, path, amount, currency,
	micros, decision, reason, upstream_status, object_id, request_id, idempotency_key, reservation_id,
	via, mcp_session, mcp_client, seq, prev_hash, hash) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
	}
	b.WriteString(" RETURNING id, key_id, seq")
	return b.String()
}

// qInsertEventsBy holds qInsertEvents of each of eventChunks.
var qInsertEventsBy = func() map[int]string {
	m := map[int]string{}
	for _, n := range eventChunks {
		m[n] = qInsertEvents(n)
	}
	return m
}()

// AddEvents appends events in one write, setting their IDs in order and
// chaining each to its key's previous event. The write joins the group
// commit of reservations, so a busy proxy pays one commit for both. SQLite
// has one writer, so reading a key's head, inserting its events and moving
// the head cannot interleave with another write. The events are chained in
// Go first, then inserted by a few multi-row statements (eventChunks): on
// the one writer, a statement per event cost more than the rows.
func (s *Store) AddEvents(ctx context.Context, events []*keybrake.Event) error {
	if len(events) == 0 {
		return nil
	}
	for _, e := range events {
		e.CleanText()
	}
	ids := make([]int64, len(events))
	chained := make([]keybrake.Event, len(events))
	err := s.batch.write(ctx, func(tx *sql.Tx) error {
		heads := map[string]*keybrake.ChainLink{}
		for i, e := range events {
			h, err := s.chainHead(ctx, tx, heads, e.KeyID)
			if err != nil {
				return err
			}
			c := *e
			c.Time = fromMicros(e.Time.UnixMicro())
			h.Chain(&c)
			h.Time = c.Time
			chained[i] = c
		}
		for done := 0; done < len(chained); {
			n := chunkOf(len(chained) - done)
			if err := s.insertEvents(ctx, tx, chained[done:done+n], ids[done:done+n]); err != nil {
				return err
			}
			done += n
		}
		for _, h := range heads {
			if _, err := s.txExec(ctx, tx, qMoveHead, h.KeyID, h.Seq, h.Hash, h.Time.UnixMicro()); err != nil {
				return wrap(err, "move audit head of key %s", h.KeyID)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, e := range events {
		e.ID = ids[i]
		e.Seq, e.PrevHash, e.Hash = chained[i].Seq, chained[i].PrevHash, chained[i].Hash
	}
	return nil
}

// chunkOf returns the largest of eventChunks not above n (n > 0).
func chunkOf(n int) int {
	for _, c := range eventChunks {
		if c <= n {
			return c
		}
	}
	return 1
}

// insertEvents inserts es (len(es) one of eventChunks) in one statement
// and puts their IDs in ids, matched by key and sequence number, which
// the chain makes unique within a batch.
func (s *Store) insertEvents(ctx context.Context, tx *sql.Tx, es []keybrake.Event, ids []int64) error {
	args := make([]any, 0, 21*len(es))
	at := make(map[eventName]int, len(es))
	for i := range es {
		c := &es[i]
		args = append(args, c.KeyID, c.Time.UnixMicro(), c.Operation, c.Method, c.Path, c.Amount, c.Currency,
			int64(c.Micros), c.Decision, c.Reason, c.UpstreamStatus, c.ObjectID, c.RequestID, c.IdempotencyKey, c.ReservationID,
			c.Via, c.MCPSession, c.MCPClient, c.Seq, c.PrevHash, c.Hash)
		at[eventName{c.KeyID, c.Seq}] = i
	}
	rows, err := tx.StmtContext(ctx, s.wstmts[qInsertEventsBy[len(es)]]).QueryContext(ctx, args...)
	if err != nil {
		return wrap(err, "add events for key %s", es[0].KeyID)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var (
			id   int64
			name eventName
		)
		if err := rows.Scan(&id, &name.key, &name.seq); err != nil {
			return wrap(err, "add events")
		}
		i, ok := at[name]
		if !ok {
			return fmt.Errorf("sqlite: add events: the insert returned an event %s #%d it was not given", name.key, name.seq)
		}
		ids[i] = id
		n++
	}
	if err := rows.Err(); err != nil {
		return wrap(err, "add events for key %s", es[0].KeyID)
	}
	if n != len(es) {
		return fmt.Errorf("sqlite: add events: %d of %d events inserted", n, len(es))
	}
	return nil
}

// eventName names an event within a batch: its key and chain position.
type eventName struct {
	key string
	seq int64
}

// chainHead returns keyID's head, read from the store the first time the
// batch meets the key.
func (s *Store) chainHead(ctx context.Context, tx *sql.Tx, heads map[string]*keybrake.ChainLink, keyID string) (*keybrake.ChainLink, error) {
	if h := heads[keyID]; h != nil {
		return h, nil
	}
	h := &keybrake.ChainLink{KeyID: keyID}
	err := s.txQueryRow(ctx, tx, qChainHead, keyID).Scan(&h.Seq, &h.Hash)
	if err != nil && err != sql.ErrNoRows {
		return nil, wrap(err, "read audit head of key %s", keyID)
	}
	heads[keyID] = h
	return h, nil
}
