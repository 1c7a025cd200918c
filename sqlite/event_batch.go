package sqlite

import (
	"context"
	"database/sql"

	"github.com/keybrake/keybrake"
)

const (
	qChainHead = `SELECT seq, hash FROM audit_heads WHERE key_id = ?`
	qMoveHead  = `INSERT INTO audit_heads (key_id, seq, hash, time) VALUES (?, ?, ?, ?)
		ON CONFLICT (key_id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash, time = excluded.time`
)

// AddEvents appends events in one write, setting their IDs in order and
// chaining each to its key's previous event. The write joins the group
// commit of reservations, so a busy proxy pays one commit for both. SQLite
// has one writer, so reading a key's head, inserting its events and moving
// the head cannot interleave with another write.
func (s *Store) AddEvents(ctx context.Context, events []*keybrake.Event) error {
	if len(events) == 0 {
		return nil
	}
	ids := make([]int64, len(events))
	chained := make([]keybrake.Event, len(events))
	err := s.batch.write(ctx, func(tx *sql.Tx) error {
		heads := map[string]*keybrake.ChainLink{}
		st := tx.Stmt(s.wstmts[qInsertEvent])
		for i, e := range events {
			h, err := s.chainHead(ctx, tx, heads, e.KeyID)
			if err != nil {
				return err
			}
			c := *e
			c.Time = fromMicros(e.Time.UnixMicro())
			h.Chain(&c)
			h.Time = c.Time
			if err := st.QueryRow(
				c.KeyID, c.Time.UnixMicro(), c.Operation, c.Method, c.Path, c.Amount, c.Currency,
				int64(c.Micros), c.Decision, c.Reason, c.UpstreamStatus, c.ObjectID, c.RequestID, c.IdempotencyKey, c.ReservationID,
				c.Via, c.MCPSession, c.MCPClient, c.Seq, c.PrevHash, c.Hash,
			).Scan(&ids[i]); err != nil {
				return wrap(err, "add event for key %s", e.KeyID)
			}
			chained[i] = c
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
