package sqlite

import (
	"context"
	"database/sql"

	"github.com/keybrake/keybrake"
)

// AddEvents appends events in one write, setting their IDs in order. The
// proxy's audit log batches through it, and the write joins the group
// commit of reservations, so a busy proxy pays one commit for both.
func (s *Store) AddEvents(ctx context.Context, events []*keybrake.Event) error {
	ids := make([]int64, len(events))
	err := s.batch.write(ctx, func(tx *sql.Tx) error {
		st := tx.Stmt(s.wstmts[qInsertEvent])
		for i, e := range events {
			if err := st.QueryRow(
				e.KeyID, e.Time.UnixMicro(), e.Operation, e.Method, e.Path, e.Amount, e.Currency,
				int64(e.Micros), e.Decision, e.Reason, e.UpstreamStatus, e.ObjectID, e.RequestID, e.IdempotencyKey, e.ReservationID,
			).Scan(&ids[i]); err != nil {
				return wrap(err, "add event for key %s", e.KeyID)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, e := range events {
		e.ID = ids[i]
	}
	return nil
}
