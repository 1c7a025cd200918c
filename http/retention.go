package http

import (
	"context"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/prometheus/client_golang/prometheus"
)

// RetentionConfig configures the background pruner (keybrake.Pruner).
type RetentionConfig struct {
	// Age is how long audit events, final reservations, spent holds and
	// delivered alerts are kept; 0 keeps them. At least
	// keybrake.MinRetention otherwise.
	Age time.Duration
	// Sent is how long the record of which key sent each message, call
	// and email is kept (keybrake.SentService); 0 keeps it. At least
	// keybrake.MinSentRetention otherwise. Past it no key reads the object
	// through keybrake: it is refused as an id keybrake has no record of.
	Sent time.Duration
	// Interval is how often a pass starts; default 10 min. The first pass
	// starts one Interval after Open.
	Interval time.Duration
	// Batch bounds the rows each transaction deletes; default
	// keybrake.DefaultPruneBatch.
	Batch int
}

// startRetention starts the pruning loop if retention is configured. Every
// replica may run it: the stores' batches skip rows another one is deleting.
func (s *Server) startRetention() {
	if s.Retention.Age <= 0 && s.Retention.Sent <= 0 {
		return
	}
	interval := s.Retention.Interval
	if interval <= 0 {
		interval = 10 * time.Minute
	}
	deleted := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keybrake_retention_deleted_total", Help: "Rows deleted by retention, by kind (events, reservations, holds, counters, alerts, guard_counters, sent).",
	}, []string{"kind"})
	s.metrics.reg.MustRegister(deleted)
	p := &keybrake.Pruner{Store: s.Store, Retention: s.Retention.Age, Sent: s.Retention.Sent, Batch: s.Retention.Batch, Now: s.Now}
	ctx, cancel := context.WithCancel(context.Background())
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		<-s.stop
		cancel()
	}()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			start := time.Now()
			rep, err := p.Once(ctx)
			for kind, n := range map[string]int64{"events": rep.Events, "reservations": rep.Reservations,
				"holds": rep.Holds, "counters": rep.Counters, "alerts": rep.Alerts, "guard_counters": rep.Guards, "sent": rep.Sent} {
				deleted.WithLabelValues(kind).Add(float64(n))
			}
			if err != nil && ctx.Err() == nil {
				s.logger().Warn("retention pass failed; the next pass continues", "err", err, "deleted", rep.Total())
				continue
			}
			if rep.Total() > 0 {
				s.logger().Info("retention pass", "events", rep.Events, "reservations", rep.Reservations, "holds", rep.Holds,
					"counters", rep.Counters, "alerts", rep.Alerts, "guard_counters", rep.Guards, "sent", rep.Sent, "batches", rep.Batches, "took", time.Since(start).Round(time.Millisecond))
			}
		}
	}()
}
