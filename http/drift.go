package http

import (
	"context"
	"time"

	"github.com/keybrake/keybrake/drift"
	"github.com/prometheus/client_golang/prometheus"
)

// DriftConfig configures the drift watch: how often it compares the
// vendor's recent objects with keybrake's reservations (docs/drift.md).
type DriftConfig struct {
	// Interval between runs; 0 disables the watch.
	Interval time.Duration
	// Window is how far back each run looks; default 1 h.
	Window time.Duration
	// Accounts are connected accounts to check besides the platform.
	Accounts []string
	// OnDrift, when set, is called with each new finding after it is
	// logged, audited and counted: the hook that suspends the keys
	// involved once keys can be suspended.
	OnDrift func(ctx context.Context, f drift.Finding)
}

// driftLoop runs the reconciler every Drift.Interval. Each finding is
// logged, written to the audit log (decision "drift") and counted in
// keybrake_drift_total, once per process.
func (s *Server) driftLoop() {
	defer s.wg.Done()
	found := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keybrake_drift_total", Help: "Drift found upstream by the drift watch, by kind (unseen, amount, missing) and object.",
	}, []string{"kind", "object"})
	runs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keybrake_drift_runs_total", Help: "Drift watch runs, by outcome (ok, error).",
	}, []string{"outcome"})
	s.metrics.reg.MustRegister(found, runs)
	r := &drift.Reconciler{Store: s.Store, Upstream: s.Upstream, UpstreamKey: s.UpstreamKey, Transport: s.Transport,
		Accounts: s.Drift.Accounts, Window: s.Drift.Window, Grace: s.StaleAfter, Now: s.Now}
	seen := map[string]bool{}
	t := time.NewTicker(s.Drift.Interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), s.Drift.Interval+s.UpstreamTimeout)
			rep, err := r.Run(ctx)
			if err != nil {
				runs.WithLabelValues("error").Inc()
				s.logger().Warn("drift watch run failed", "err", err)
				cancel()
				continue
			}
			runs.WithLabelValues("ok").Inc()
			err = drift.Record(ctx, s.Store, s.logger(), rep, s.Now(), seen, func(f drift.Finding) {
				found.WithLabelValues(f.Kind, f.Object).Inc()
				if s.Drift.OnDrift != nil {
					s.Drift.OnDrift(ctx, f)
				}
			})
			if err != nil {
				s.logger().Error("drift watch could not audit its findings", "err", err)
			}
			cancel()
		}
	}
}
