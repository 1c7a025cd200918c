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
			first := h.Seq + 1 // nothing kept: anchor past the head
			var kept sql.NullInt64
			if err := tx.QueryRow(`SELECT MIN(seq) FROM events WHERE key_id = ? AND seq > 0 AND time >= ?`,
				h.KeyID, before.UnixMicro()).Scan(&kept); err != nil {
				return wrap(err, "prune events of key %s", h.KeyID)
			}
			if kept.Valid {
				first = kept.Int64
			}
			prev := h.Hash
			if first <= h.Seq {
				err := tx.QueryRow(`SELECT hash FROM events WHERE key_id = ? AND seq = ?`, h.KeyID, first-1).Scan(&prev)
				if err == sql.ErrNoRows {
					continue // the prefix is already gone: the anchor stands
				} else if err != nil {
					return wrap(err, "prune events of key %s", h.KeyID)
				}
			}
			res, err := tx.Exec(`DELETE FROM events WHERE key_id = ? AND seq > 0 AND seq < ?`, h.KeyID, first)
			if err != nil {
				return wrap(err, "prune events of key %s", h.KeyID)
			}
			d, _ := res.RowsAffected()
			if d == 0 {
				continue
			}
			n += d
			if _, err := tx.Exec(`INSERT INTO audit_anchors (key_id, seq, prev_hash, time) VALUES (?, ?, ?, ?)
				ON CONFLICT (key_id) DO UPDATE SET seq = excluded.seq, prev_hash = excluded.prev_hash, time = excluded.time`,
				h.KeyID, first, prev, now.UnixMicro()); err != nil {
				return wrap(err, "anchor chain of key %s", h.KeyID)
			}
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
