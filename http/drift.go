package http

import (
	"cmp"
	"context"
	"time"

	"github.com/keybrake/keybrake"
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
	// Suspend suspends the key of each new finding that names one
	// (keybrake serve --drift-suspend), after the finding is audited; see
	// suspendDrift.
	Suspend bool
	// OnDrift, when set, is called with each new finding as it is logged
	// and counted, before it is audited.
	OnDrift func(ctx context.Context, f drift.Finding)
}

// driftLoop runs the reconciler every Drift.Interval. Each finding is
// logged, written to the audit log (decision "drift", which makes the
// store write its drift alert) and counted in keybrake_drift_total, once
// per process; with Drift.Suspend its key is then suspended.
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
			var fresh []drift.Finding
			err = drift.Record(ctx, s.Store, s.logger(), rep, s.Now(), seen, func(f drift.Finding) {
				found.WithLabelValues(f.Kind, f.Object).Inc()
				fresh = append(fresh, f)
				if s.Drift.OnDrift != nil {
					s.Drift.OnDrift(ctx, f)
				}
			})
			if err != nil {
				s.logger().Error("drift watch could not audit its findings", "err", err)
			}
			if s.Drift.Suspend {
				s.suspendDrift(ctx, fresh)
			}
			cancel()
		}
	}
}

// suspendDrift suspends the key of each finding that names one, with the
// reason "drift: <kind> <object>", and records it in the admin audit log
// under the actor "drift watch" in the suspension's own transaction
// (changeKey): a crash cannot leave one without the other. The store
// tells every replica's key cache, so the key refuses its next request
// everywhere.
// Findings without a key (money moved with the real secret) suspend
// nothing: the secret is what to rotate. A key already suspended keeps
// its first reason; a revoked key stays revoked.
func (s *Server) suspendDrift(ctx context.Context, fs []drift.Finding) {
	for _, f := range fs {
		if f.KeyID == "" {
			continue
		}
		reason := "drift: " + f.Kind + " " + cmp.Or(f.ObjectID, f.ReservationID)
		now := s.Now()
		e := &keybrake.AdminEvent{Time: now.UTC().Truncate(time.Microsecond), Actor: "drift watch", Action: "key." + keybrake.ActionSuspend, Target: f.KeyID, Detail: reason}
		k, err := s.changeKey(ctx, f.KeyID, keybrake.KeyChange{Action: keybrake.ActionSuspend, Reason: reason, Now: now, Event: e})
		if err != nil {
			s.logger().Error("drift watch could not suspend a key", "key_id", f.KeyID, "reason", reason, "err", err)
			continue
		}
		s.evictKey(k.ID)
		s.logger().Warn("drift watch suspended a key", "key_id", k.ID, "reason", reason)
	}
}
