package storetest

import (
	"context"
	"testing"

	"github.com/keybrake/keybrake"
)

// AuditInBatches starts what serve's audit writer does: events sent on the
// returned channel are added in batches of up to 64; audited closes once
// the channel is closed and every event is written.
func AuditInBatches(tb testing.TB, s keybrake.EventService, buffer int) (events chan *keybrake.Event, audited chan struct{}) {
	events = make(chan *keybrake.Event, buffer)
	audited = make(chan struct{})
	go func() {
		defer close(audited)
		batch := make([]*keybrake.Event, 0, 64)
		for e := range events {
			batch = append(batch[:0], e)
		drain:
			for len(batch) < cap(batch) {
				select {
				case e, ok := <-events:
					if !ok {
						break drain
					}
					batch = append(batch, e)
				default:
					break drain
				}
			}
			if err := s.AddEvents(context.Background(), batch); err != nil {
				tb.Errorf("AddEvents: %v", err)
			}
		}
	}()
	return events, audited
}
