package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/keybrake/keybrake"
)

// defaultChainPage is ChainEvents' page size when the caller sets none.
const defaultChainPage = 1000

// ChainEvents returns a page of every key's events in ascending ID order.
func (s *Store) ChainEvents(ctx context.Context, p keybrake.ChainPage) ([]*keybrake.Event, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = defaultChainPage
	}
	rows, err := s.reader.QueryContext(ctx, `SELECT `+eventColumns+` FROM events WHERE id > ? ORDER BY id LIMIT ?`, p.AfterID, limit)
	if err != nil {
		return nil, wrap(err, "chain events")
	}
	es, err := scanEvents(rows)
	return es, wrap(err, "chain events")
}

// ChainHeads returns every key's last link, ordered by key.
func (s *Store) ChainHeads(ctx context.Context) ([]keybrake.ChainLink, error) {
	return s.chainLinks(ctx, `SELECT key_id, seq, hash, time FROM audit_heads ORDER BY key_id`)
}

// ChainAnchors returns the anchors of pruned chains, ordered by key.
func (s *Store) ChainAnchors(ctx context.Context) ([]keybrake.ChainLink, error) {
	return s.chainLinks(ctx, `SELECT key_id, seq, prev_hash, time FROM audit_anchors ORDER BY key_id`)
}

func (s *Store) chainLinks(ctx context.Context, q string) ([]keybrake.ChainLink, error) {
	rows, err := s.reader.QueryContext(ctx, q)
	if err != nil {
		return nil, wrap(err, "chain links")
	}
	defer rows.Close()
	var out []keybrake.ChainLink
	for rows.Next() {
		var (
			l keybrake.ChainLink
			t int64
		)
		if err := rows.Scan(&l.KeyID, &l.Seq, &l.Hash, &t); err != nil {
			return nil, wrap(err, "chain links")
		}
		l.Time = fromMicros(t)
		out = append(out, l)
	}
	return out, wrap(rows.Err(), "chain links")
}

// PruneEvents deletes, per key, the prefix of the chain up to the first
// event at or after before, and anchors the chain there, in one write.
// Only a prefix is ever deleted: an event older than before that follows a
// newer one in its chain is kept, so what remains is one unbroken chain.
func (s *Store) PruneEvents(ctx context.Context, before, now time.Time) (int64, error) {
	var n int64
	err := s.batch.write(ctx, func(tx *sql.Tx) error {
		n = 0
		heads, err := txLinks(tx, `SELECT key_id, seq, hash FROM audit_heads`)
		if err != nil {
			return err
		}
		for _, h := range heads {
			d, err := pruneChain(tx, h, before, now)
			if err != nil {
				return wrap(err, "prune events of key %s", h.KeyID)
			}
			n += d
		}
		res, err := tx.Exec(`DELETE FROM events WHERE seq = 0 AND time < ?`, before.UnixMicro())
		if err != nil {
			return wrap(err, "prune unchained events")
		}
		d, _ := res.RowsAffected()
		n += d
		return nil
	})
	return n, err
}

// Prune's statements read a key's events through events_key_id (key_id,
// id), the index FindEvents pages with: 0029 dropped events_key_seq (key_id,
// seq), of which every event wrote an entry (and with many keys busy, a
// page each), for prunes alone. Within a key the store hands out seq in ID
// order (AddEvents chains and inserts in order, and IDs only grow), so the
// first event kept by ID has the least kept seq, the event before it by ID
// is seq-1, and the events before it by ID are the prefix: each statement
// reads a range of the key's events from its start, no more than it
// deletes. Against a log edited behind the store's back (an event moved to
// a new ID), the delete still takes only seq < first, so it keeps, never
// deletes, what does not fit: verification still reports the edit.
const (
	qPruneFirstKept = `SELECT id, seq FROM events WHERE key_id = ? AND seq > 0 AND time >= ? ORDER BY id LIMIT 1`
	qPrunePrevOf    = `SELECT seq, hash FROM events WHERE key_id = ? AND id < ? ORDER BY id DESC LIMIT 1`
	qPruneBySeq     = `SELECT hash FROM events WHERE key_id = ? AND seq = ?`
	qPruneBefore    = `DELETE FROM events WHERE key_id = ? AND id < ? AND seq > 0 AND seq < ?`
	qPruneAll       = `DELETE FROM events WHERE key_id = ? AND seq > 0 AND seq < ?`
	qPruneAnchor    = `INSERT INTO audit_anchors (key_id, seq, prev_hash, time) VALUES (?, ?, ?, ?)
		ON CONFLICT (key_id) DO UPDATE SET seq = excluded.seq, prev_hash = excluded.prev_hash, time = excluded.time`
)

// pruneChain deletes the prefix of h's chain before its first event at or
// after before and anchors the chain there (past its head when nothing is
// kept); returns how many events it deleted.
func pruneChain(tx *sql.Tx, h keybrake.ChainLink, before, now time.Time) (int64, error) {
	first := h.Seq + 1 // nothing kept: anchor past the head
	var (
		keptID  sql.NullInt64
		keptSeq int64
	)
	if err := tx.QueryRow(qPruneFirstKept, h.KeyID, before.UnixMicro()).Scan(&keptID, &keptSeq); err != nil && err != sql.ErrNoRows {
		return 0, err
	}
	if keptID.Valid {
		first = keptSeq
	}
	if first <= 1 {
		return 0, nil // nothing comes before seq 1
	}
	prev := h.Hash
	if keptID.Valid && first <= h.Seq {
		var (
			ok  bool
			err error
		)
		if prev, ok, err = prunedPrev(tx, h.KeyID, keptID.Int64, first); err != nil || !ok {
			return 0, err // !ok: the prefix is already gone, the anchor stands
		}
	}
	var (
		res sql.Result
		err error
	)
	if keptID.Valid {
		res, err = tx.Exec(qPruneBefore, h.KeyID, keptID.Int64, first)
	} else {
		res, err = tx.Exec(qPruneAll, h.KeyID, first)
	}
	if err != nil {
		return 0, err
	}
	d, _ := res.RowsAffected()
	if d == 0 {
		return 0, nil
	}
	if _, err := tx.Exec(qPruneAnchor, h.KeyID, first, prev, now.UnixMicro()); err != nil {
		return 0, err
	}
	return d, nil
}

// prunedPrev returns the hash of keyID's event first-1, the last one a
// prune before the kept event keptID deletes; false if there is none.
func prunedPrev(tx *sql.Tx, keyID string, keptID, first int64) (string, bool, error) {
	var (
		seq  int64
		hash string
	)
	err := tx.QueryRow(qPrunePrevOf, keyID, keptID).Scan(&seq, &hash)
	if err == nil && seq != first-1 {
		// Not the chain's order (a log edited behind the store's back):
		// look the event up by seq, as the chain names it.
		err = tx.QueryRow(qPruneBySeq, keyID, first-1).Scan(&hash)
	}
	switch {
	case err == sql.ErrNoRows:
		return "", false, nil
	case err != nil:
		return "", false, err
	}
	return hash, true, nil
}

func txLinks(tx *sql.Tx, q string) ([]keybrake.ChainLink, error) {
	rows, err := tx.Query(q)
	if err != nil {
		return nil, wrap(err, "chain links")
	}
	defer rows.Close()
	var out []keybrake.ChainLink
	for rows.Next() {
		var l keybrake.ChainLink
		if err := rows.Scan(&l.KeyID, &l.Seq, &l.Hash); err != nil {
			return nil, wrap(err, "chain links")
		}
		out = append(out, l)
	}
	return out, wrap(rows.Err(), "chain links")
}
