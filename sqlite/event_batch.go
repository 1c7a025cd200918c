package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/keybrake/keybrake"
)

// qChainHeads returns the read of n keys' audit heads in one statement.
func qChainHeads(n int) string {
	return `SELECT key_id, seq, hash FROM audit_heads WHERE key_id IN (?` + strings.Repeat(", ?", n-1) + `)`
}

// qMoveHeads returns the upsert of n keys' audit heads in one statement.
func qMoveHeads(n int) string {
	return `INSERT INTO audit_heads (key_id, seq, hash, time) VALUES (?, ?, ?, ?)` + strings.Repeat(", (?, ?, ?, ?)", n-1) + `
		ON CONFLICT (key_id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash, time = excluded.time`
}

// qChainHeadsBy and qMoveHeadsBy hold qChainHeads and qMoveHeads of each
// of eventChunks, prepared at Open: a batch of events over many keys (one
// event each of 64 keys, as 1,000 busy keys make) reads and moves its heads
// in a few statements, not two a key.
var qChainHeadsBy, qMoveHeadsBy = func() (map[int]string, map[int]string) {
	r, w := map[int]string{}, map[int]string{}
	for _, n := range eventChunks {
		r[n], w[n] = qChainHeads(n), qMoveHeads(n)
	}
	return r, w
}()

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
		ctx := context.WithoutCancel(ctx) // a batch runs without its callers' contexts (batch.go)
		heads, order, err := s.chainHeads(ctx, tx, events)
		if err != nil {
			return err
		}
		for i, e := range events {
			h := heads[e.KeyID]
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
		return s.moveHeads(ctx, tx, heads, order)
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

// chainHeads reads the audit heads of the keys of events, a few keys a
// statement (eventChunks), and returns them by key ID with the keys in the
// order they first appear. A key with no head yet starts at seq 0.
func (s *Store) chainHeads(ctx context.Context, tx *sql.Tx, events []*keybrake.Event) (map[string]*keybrake.ChainLink, []string, error) {
	heads := make(map[string]*keybrake.ChainLink, len(events))
	order := make([]string, 0, len(events))
	for _, e := range events {
		if heads[e.KeyID] == nil {
			heads[e.KeyID] = &keybrake.ChainLink{KeyID: e.KeyID}
			order = append(order, e.KeyID)
		}
	}
	args := make([]any, 0, len(order))
	for done := 0; done < len(order); {
		n := chunkOf(len(order) - done)
		args = args[:0]
		for _, k := range order[done : done+n] {
			args = append(args, k)
		}
		if err := s.readHeads(ctx, tx, n, args, heads); err != nil {
			return nil, nil, err
		}
		done += n
	}
	return heads, order, nil
}

// readHeads runs qChainHeads(n) for the keys args into heads.
func (s *Store) readHeads(ctx context.Context, tx *sql.Tx, n int, args []any, heads map[string]*keybrake.ChainLink) error {
	rows, err := tx.StmtContext(ctx, s.wstmts[qChainHeadsBy[n]]).QueryContext(ctx, args...)
	if err != nil {
		return wrap(err, "read audit heads")
	}
	defer rows.Close()
	for rows.Next() {
		var (
			key  string
			seq  int64
			hash string
		)
		if err := rows.Scan(&key, &seq, &hash); err != nil {
			return wrap(err, "read audit heads")
		}
		if h := heads[key]; h != nil {
			h.Seq, h.Hash = seq, hash
		}
	}
	return wrap(rows.Err(), "read audit heads")
}

// moveHeads writes the heads of the keys in order, a few a statement.
func (s *Store) moveHeads(ctx context.Context, tx *sql.Tx, heads map[string]*keybrake.ChainLink, order []string) error {
	args := make([]any, 0, 4*min(len(order), eventChunks[0]))
	for done := 0; done < len(order); {
		n := chunkOf(len(order) - done)
		args = args[:0]
		for _, k := range order[done : done+n] {
			h := heads[k]
			args = append(args, h.KeyID, h.Seq, h.Hash, h.Time.UnixMicro())
		}
		if _, err := tx.StmtContext(ctx, s.wstmts[qMoveHeadsBy[n]]).ExecContext(ctx, args...); err != nil {
			return wrap(err, "move audit heads of key %s", order[done])
		}
		done += n
	}
	return nil
}
