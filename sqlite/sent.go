package sqlite

import (
	"context"
	"database/sql"

	"github.com/keybrake/keybrake"
)

var _ keybrake.SentService = (*Store)(nil)

// RecordSent records that args.KeyID sent args.IDs (keybrake.SentService).
func (s *Store) RecordSent(ctx context.Context, args keybrake.RecordSentArgs) error {
	if err := checkRecordSent(args); err != nil {
		return err
	}
	return s.batch.write(ctx, func(tx *sql.Tx) error {
		ctx := context.WithoutCancel(ctx) // a batch runs without its callers' contexts (batch.go)
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM keys WHERE id = ?`, args.KeyID).Scan(&n); err != nil {
			return wrap(err, "record sent")
		} else if n == 0 {
			return keybrake.Errorf(keybrake.ENOTFOUND, "No such vault key: %s.", args.KeyID)
		}
		for _, id := range args.IDs {
			if id == "" {
				continue
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO sent_objects (vendor, object_id, key_id, reservation_id, created_at)
				VALUES (?, ?, ?, ?, ?) ON CONFLICT (vendor, object_id, key_id) DO NOTHING`,
				args.Vendor, id, args.KeyID, args.ReservationID, args.Now.UnixMicro()); err != nil {
				return wrap(err, "record sent %s", id)
			}
		}
		return nil
	})
}

// FindSenders returns the keys that sent vendor's objectID
// (keybrake.SentService).
func (s *Store) FindSenders(ctx context.Context, vendor, objectID string) ([]string, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT key_id FROM sent_objects WHERE vendor = ? AND object_id = ? ORDER BY key_id`, vendor, objectID)
	if err != nil {
		return nil, wrap(err, "find senders")
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, wrap(err, "find senders")
		}
		out = append(out, id)
	}
	return out, wrap(rows.Err(), "find senders")
}

func checkRecordSent(args keybrake.RecordSentArgs) error {
	if args.Vendor == "" || args.KeyID == "" {
		return keybrake.Errorf(keybrake.EINVALID, "A sent object needs a vendor and a key.")
	}
	if len(args.IDs) > keybrake.MaxSentIDs {
		return keybrake.Errorf(keybrake.EINVALID, "At most %d ids at once, not %d.", keybrake.MaxSentIDs, len(args.IDs))
	}
	return nil
}
