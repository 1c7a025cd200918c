package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
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
	rows, err := s.pool.Query(ctx, `SELECT `+eventColumns+` FROM events WHERE id > $1 ORDER BY id LIMIT $2`, p.AfterID, limit)
	if err != nil {
		return nil, s.wrap("chain events", err)
	}
	es, err := collectEvents(rows)
	return es, s.wrap("chain events", err)
}

// ChainHeads returns every key's last link, ordered by key. Heads at seq 0
// (created by a batch that rolled back) are left out.
func (s *Store) ChainHeads(ctx context.Context) ([]keybrake.ChainLink, error) {
	return s.chainLinks(ctx, `SELECT key_id, seq, hash, time FROM audit_heads WHERE seq > 0 ORDER BY key_id`)
}

// ChainAnchors returns the anchors of pruned chains, ordered by key.
func (s *Store) ChainAnchors(ctx context.Context) ([]keybrake.ChainLink, error) {
	return s.chainLinks(ctx, `SELECT key_id, seq, prev_hash, time FROM audit_anchors ORDER BY key_id`)
}

func (s *Store) chainLinks(ctx context.Context, q string) ([]keybrake.ChainLink, error) {
	var out []keybrake.ChainLink
	err := s.query(ctx, func(rows pgx.Rows) error {
		for rows.Next() {
			var l keybrake.ChainLink
			if err := rows.Scan(&l.KeyID, &l.Seq, &l.Hash, &l.Time); err != nil {
				return err
			}
			l.Time = ts(l.Time)
			out = append(out, l)
		}
		return rows.Err()
	}, q)
	return out, s.wrap("chain links", err)
}

// PruneEvents deletes, per key, the prefix of the chain up to the first
// event at or after before, and anchors the chain there, in one
// transaction that holds every head's lock, so no batch extends a chain
// while it is cut. Only a prefix is ever deleted: an event older than
// before that follows a newer one in its chain is kept.
func (s *Store) PruneEvents(ctx context.Context, before, now time.Time) (int64, error) {
	var n int64
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		n = 0
		rows, err := tx.Query(ctx, `SELECT key_id, seq, hash FROM audit_heads ORDER BY key_id FOR UPDATE`)
		if err != nil {
			return err
		}
		var heads []keybrake.ChainLink
		for rows.Next() {
			var h keybrake.ChainLink
			if err := rows.Scan(&h.KeyID, &h.Seq, &h.Hash); err != nil {
				rows.Close()
				return err
			}
			heads = append(heads, h)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, h := range heads {
			first := h.Seq + 1 // nothing kept: anchor past the head
			var kept *int64
			if err := tx.QueryRow(ctx, `SELECT MIN(seq) FROM events WHERE key_id = $1 AND seq > 0 AND time >= $2`,
				h.KeyID, ts(before)).Scan(&kept); err != nil {
				return err
			}
			if kept != nil {
				first = *kept
			}
			prev := h.Hash
			if first <= h.Seq {
				err := tx.QueryRow(ctx, `SELECT hash FROM events WHERE key_id = $1 AND seq = $2`, h.KeyID, first-1).Scan(&prev)
				if errors.Is(err, pgx.ErrNoRows) {
					continue // the prefix is already gone: the anchor stands
				} else if err != nil {
					return err
				}
			}
			tag, err := tx.Exec(ctx, `DELETE FROM events WHERE key_id = $1 AND seq > 0 AND seq < $2`, h.KeyID, first)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				continue
			}
			n += tag.RowsAffected()
			if _, err := tx.Exec(ctx, `INSERT INTO audit_anchors (key_id, seq, prev_hash, time) VALUES ($1, $2, $3, $4)
				ON CONFLICT (key_id) DO UPDATE SET seq = excluded.seq, prev_hash = excluded.prev_hash, time = excluded.time`,
				h.KeyID, first, prev, ts(now)); err != nil {
				return err
			}
		}
		tag, err := tx.Exec(ctx, `DELETE FROM events WHERE seq = 0 AND time < $1`, ts(before))
		if err != nil {
			return err
		}
		n += tag.RowsAffected()
		return nil
	})
	return n, s.wrap("prune events", err)
}
