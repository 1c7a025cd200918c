package sqlite

import (
	"context"
	"database/sql"

	"github.com/keybrake/keybrake"
)

// AddEvents appends events in one write, setting their IDs in order. The
// write joins the group commit of reservations, so a busy proxy pays one
// commit for both; a lone event commits by itself.
func (s *Store) AddEvents(ctx context.Context, events []*keybrake.Event) error {
	ids := make([]int64, len(events))
	insert := func(st *sql.Stmt) error {
		for i, e := range events {
			if err := st.QueryRow(
				e.KeyID, e.Time.UnixMicro(), e.Operation, e.Method, e.Path, e.Amount, e.Currency,
				int64(e.Micros), e.Decision, e.Reason, e.UpstreamStatus, e.ObjectID, e.RequestID, e.IdempotencyKey, e.ReservationID,
				e.Via, e.MCPSession, e.MCPClient,
			).Scan(&ids[i]); err != nil {
				return wrap(err, "add event for key %s", e.KeyID)
			}
		}
		return nil
	}
	var alone func() error
	if len(events) == 1 {
		alone = func() error { return insert(s.wstmts[qInsertEvent]) }
	}
	err := s.batch.writeAlone(ctx, func(tx *sql.Tx) error { return insert(tx.Stmt(s.wstmts[qInsertEvent])) }, alone)
	if err != nil {
		return err
	}
	for i, e := range events {
		e.ID = ids[i]
	}
	return nil
}
