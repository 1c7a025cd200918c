package keybrake

import (
	"context"
	"fmt"
	"time"
)

// PruneStore is what a Pruner deletes from.
type PruneStore interface {
	RetentionService
	AuditChainService
}

// Pruner applies retention: it deletes audit events, final reservations,
// spent holds, alerts and closed spend counters older than Retention, and
// the records of sent messages, calls and emails older than Sent, in
// batches of at most Batch rows, each its own short transaction, pausing
// Pause between batches so the request path's writes are never queued
// behind a long delete.
//
// Audit events go through PruneEvents, which anchors each pruned chain, so
// the audit log still verifies after a prune. A pass, per kind:
//
//	events        oldest page (ChainEvents) --> PruneEvents before its last time (at most Before)
//	reservations  PruneReservations         --> until a batch deletes nothing
//	holds         PruneHolds                --> until a batch deletes nothing
//	counters      CompactCounters           --> daily before Before's day, monthly older than 13 months
//	alerts        PruneAlerts               --> until a batch deletes nothing
//	sent          PruneSent                 --> records of sent objects older than Sent
//
// Retention and Sent are apart: the record of who sent a message decides
// whether its sender may still read it, which matters as long as the
// vendor shows the message (Twilio: 400 days), not as long as its money
// does. Either may be 0 (those rows are kept), not both.
type Pruner struct {
	Store     PruneStore
	Retention time.Duration    // events, reservations, holds, counters, alerts older than this go; 0 keeps them, else at least MinRetention
	Sent      time.Duration    // records of sent objects older than this go; 0 keeps them, else at least MinSentRetention
	Batch     int              // rows per transaction; default DefaultPruneBatch
	Pause     time.Duration    // between batches; default 20 ms
	Now       func() time.Time // default time.Now
}

// PruneReport counts what one pass deleted.
type PruneReport struct {
	Events       int64 `json:"events"`
	Reservations int64 `json:"reservations"`
	Holds        int64 `json:"holds"`
	Counters     int64 `json:"counters"`
	Alerts       int64 `json:"alerts"`
	Guards       int64 `json:"guard_counters"`
	Sent         int64 `json:"sent"`
	Batches      int   `json:"batches"`
}

// Total is every row the pass deleted.
func (r PruneReport) Total() int64 {
	return r.Events + r.Reservations + r.Holds + r.Counters + r.Alerts + r.Guards + r.Sent
}

// Validate returns EINVALID when the retention is shorter than
// MinRetention, the sent retention shorter than MinSentRetention, or
// neither is set.
func (p *Pruner) Validate() error {
	if p.Retention == 0 && p.Sent == 0 {
		return ErrorParam("retention", "Neither a retention nor a sent retention is set: there is nothing to prune.")
	}
	if p.Retention < 0 || (p.Retention > 0 && p.Retention < MinRetention) {
		return ErrorParam("retention", "Retention %s is shorter than the minimum %s: Stripe may replay a request for %s, and a reservation must outlive that.", p.Retention, MinRetention, IdempotencyWindow)
	}
	if p.Sent < 0 || (p.Sent > 0 && p.Sent < MinSentRetention) {
		return ErrorParam("sent_retention", "Sent retention %s is shorter than the minimum %s: a message may be scheduled 35 days ahead, and its sender must still reach it.", p.Sent, MinSentRetention)
	}
	return nil
}

// Once runs one pass and returns what it deleted. It stops early, with
// what it did so far, when ctx ends.
func (p *Pruner) Once(ctx context.Context) (PruneReport, error) {
	var rep PruneReport
	if err := p.Validate(); err != nil {
		return rep, err
	}
	now := time.Now()
	if p.Now != nil {
		now = p.Now()
	}
	before := now.Add(-p.Retention)
	batch := p.Batch
	if batch <= 0 {
		batch = DefaultPruneBatch
	}
	args := PruneArgs{Before: before, Now: now, Limit: batch}
	type step struct {
		name string
		n    *int64
		run  func() (int64, error)
	}
	var steps []step
	if p.Retention > 0 {
		if err := p.events(ctx, before, now, batch, &rep); err != nil {
			return rep, fmt.Errorf("prune events: %w", err)
		}
		steps = append(steps,
			step{"reservations", &rep.Reservations, func() (int64, error) { return p.Store.PruneReservations(ctx, args) }},
			step{"holds", &rep.Holds, func() (int64, error) { return p.Store.PruneHolds(ctx, args) }},
			step{"counters", &rep.Counters, func() (int64, error) {
				day, month := CounterCutoffs(before, now)
				return p.Store.CompactCounters(ctx, CompactArgs{DayBefore: day, MonthBefore: month, Limit: batch})
			}},
			step{"alerts", &rep.Alerts, func() (int64, error) { return p.Store.PruneAlerts(ctx, args) }},
			step{"guard counters", &rep.Guards, func() (int64, error) { return p.Store.PruneGuardCounters(ctx, args) }},
		)
	}
	if p.Sent > 0 {
		sent := PruneArgs{Before: now.Add(-p.Sent), Now: now, Limit: batch}
		steps = append(steps, step{"sent objects", &rep.Sent, func() (int64, error) { return p.Store.PruneSent(ctx, sent) }})
	}
	for _, st := range steps {
		for {
			n, err := st.run()
			if err != nil {
				return rep, fmt.Errorf("prune %s: %w", st.name, err)
			}
			*st.n += n
			rep.Batches++
			if n < int64(batch) {
				break
			}
			if err := p.pause(ctx); err != nil {
				return rep, err
			}
		}
	}
	return rep, nil
}

// events prunes the audit log in slices of about batch events: the time of
// the batch-th oldest event bounds each PruneEvents call.
func (p *Pruner) events(ctx context.Context, before, now time.Time, batch int, rep *PruneReport) error {
	var after int64
	for {
		page, err := p.Store.ChainEvents(ctx, ChainPage{AfterID: after, Limit: batch})
		if err != nil {
			return err
		}
		if len(page) == 0 || !page[0].Time.Before(before) {
			return nil
		}
		cut := page[len(page)-1].Time.Add(time.Microsecond)
		if cut.After(before) || len(page) < batch {
			cut = before
		}
		n, err := p.Store.PruneEvents(ctx, cut, now)
		if err != nil {
			return err
		}
		rep.Events += n
		rep.Batches++
		if cut.Equal(before) {
			return nil
		}
		if n == 0 {
			after = page[len(page)-1].ID // kept events (a chain's newer prefix) ahead: look past them
		}
		if err := p.pause(ctx); err != nil {
			return err
		}
	}
}

func (p *Pruner) pause(ctx context.Context) error {
	d := p.Pause
	if d <= 0 {
		d = 20 * time.Millisecond
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
