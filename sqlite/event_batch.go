package sqlite

import (
	"context"

	"github.com/keybrake/keybrake"
)

// AddEvents appends events in one transaction, setting their IDs in order.
// The proxy's audit log batches through it, so a busy proxy pays one commit
// per batch rather than one per request.
func (s *Store) AddEvents(ctx context.Context, events []*keybrake.Event) error {
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, e := range events {
		var id int64
		if err := s.txQueryRow(ctx, tx, qInsertEvent,
			e.KeyID, e.Time.UnixMicro(), e.Operation, e.Method, e.Path, e.Amount, e.Currency,
			int64(e.Micros), e.Decision, e.Reason, e.UpstreamStatus, e.ObjectID, e.RequestID, e.IdempotencyKey, e.ReservationID,
		).Scan(&id); err != nil {
			return wrap(err, "add event for key %s", e.KeyID)
		}
		e.ID = id
	}
	if err := tx.Commit(); err != nil {
		return wrap(err, "commit events")
	}
	return nil
}
