package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/keybrake/keybrake"
)

var _ keybrake.SentService = (*Store)(nil)

// RecordSent records that args.KeyID sent args.IDs (keybrake.SentService).
func (s *Store) RecordSent(ctx context.Context, args keybrake.RecordSentArgs) error {
	if args.Vendor == "" || args.KeyID == "" {
		return keybrake.Errorf(keybrake.EINVALID, "A sent object needs a vendor and a key.")
	}
	if len(args.IDs) > keybrake.MaxSentIDs {
		return keybrake.Errorf(keybrake.EINVALID, "At most %d ids at once, not %d.", keybrake.MaxSentIDs, len(args.IDs))
	}
	ids := make([]string, 0, len(args.IDs))
	for _, id := range args.IDs {
		if id != "" {
			ids = append(ids, id)
		}
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM keys WHERE id = $1`, args.KeyID).Scan(&n); err != nil {
			return err
		} else if n == 0 {
			return keybrake.Errorf(keybrake.ENOTFOUND, "No such vault key: %s.", args.KeyID)
		}
		_, err := tx.Exec(ctx, `INSERT INTO sent_objects (vendor, object_id, key_id, reservation_id, created_at)
			SELECT $1, id, $2, $3, $4 FROM unnest($5::text[]) AS id
			ON CONFLICT (vendor, object_id, key_id) DO NOTHING`,
			args.Vendor, args.KeyID, args.ReservationID, args.Now, ids)
		return err
	})
	return s.wrap("record sent", err)
}

// FindSenders returns the keys that sent vendor's objectID
// (keybrake.SentService).
func (s *Store) FindSenders(ctx context.Context, vendor, objectID string) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT key_id FROM sent_objects WHERE vendor = $1 AND object_id = $2 ORDER BY key_id COLLATE "C"`, vendor, objectID)
	if err != nil {
		return nil, s.wrap("find senders", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if len(out) == 0 {
		out = nil
	}
	return out, s.wrap("find senders", err)
}
