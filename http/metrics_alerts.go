package http

import (
	"context"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultKeyMetricsMax bounds the per-key gauges: at most this many keys
// (oldest first) are exported, so a deployment with many keys cannot grow
// the scrape without bound.
const DefaultKeyMetricsMax = 1000

func (m *metrics) addAlertMetrics() {
	m.alertsFired = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keybrake_alerts_fired_total", Help: "Alerts written to the outbox, by kind; each counted once across replicas, by the replica that claimed it.",
	}, []string{"kind"})
	m.alertDeliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keybrake_alert_deliveries_total", Help: "Webhook delivery attempts by outcome: delivered, retry (failed, will be retried), failed (retry period over).",
	}, []string{"outcome"})
	m.reg.MustRegister(m.alertsFired, m.alertDeliveries)
}

func (m *metrics) alertFired(a *keybrake.Alert) { m.alertsFired.WithLabelValues(a.Kind).Inc() }

func (m *metrics) alertAttempt(outcome string) { m.alertDeliveries.WithLabelValues(outcome).Inc() }

// keyCollector exports each key's spend and what remains under each cap,
// read from the store at scrape time, for at most Server.KeyMetricsMax keys.
type keyCollector struct {
	s         *Server
	spend     *prometheus.Desc
	remaining *prometheus.Desc
	truncated *prometheus.Desc
}

func newKeyCollector(s *Server) *keyCollector {
	return &keyCollector{
		s: s,
		spend: prometheus.NewDesc("keybrake_key_spend_usd_micros",
			"What counts against the key's caps (settled + reserved + uncertain) in the current window, in USD micros.", []string{"key_id", "window"}, nil),
		remaining: prometheus.NewDesc("keybrake_key_remaining_usd_micros",
			"What is left under the key's cap in the current window, in USD micros; only for capped windows.", []string{"key_id", "window"}, nil),
		truncated: prometheus.NewDesc("keybrake_key_metrics_truncated",
			"1 when there are more keys than --metrics-max-keys and some keys are not exported.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *keyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.spend
	ch <- c.remaining
	ch <- c.truncated
}

// Collect implements prometheus.Collector. A store error ends the scrape's
// key gauges early; the other metrics are still served.
func (c *keyCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	limit := c.s.KeyMetricsMax
	if limit <= 0 {
		limit = DefaultKeyMetricsMax
	}
	now, after, n, truncated := c.s.Now(), "", 0, 0.0
	for n < limit {
		keys, more, err := c.s.Store.FindKeys(ctx, keybrake.KeyFilter{Limit: min(100, limit-n), StartingAfter: after})
		if err != nil {
			c.s.logger().Warn("key metrics", "err", err)
			break
		}
		for _, k := range keys {
			c.collectKey(ctx, ch, k, now)
			after = k.ID
		}
		n += len(keys)
		if !more {
			break
		}
		if n >= limit {
			truncated = 1
		}
	}
	ch <- prometheus.MustNewConstMetric(c.truncated, prometheus.GaugeValue, truncated)
}

func (c *keyCollector) collectKey(ctx context.Context, ch chan<- prometheus.Metric, k *keybrake.Key, now time.Time) {
	loc, err := k.Location()
	if err != nil {
		return
	}
	day, month := keybrake.Buckets(now, loc)
	sp, err := c.s.Store.Spend(ctx, k.ID, day, month)
	if err != nil {
		return
	}
	for _, w := range []struct {
		name  string
		cap   *keybrake.Micros
		spent keybrake.Micros
	}{{keybrake.WindowDaily, k.Daily, sp.Day}, {keybrake.WindowMonthly, k.Monthly, sp.Month}, {keybrake.WindowTotal, k.Total, sp.Total}} {
		ch <- prometheus.MustNewConstMetric(c.spend, prometheus.GaugeValue, float64(w.spent), k.ID, w.name)
		if w.cap != nil {
			ch <- prometheus.MustNewConstMetric(c.remaining, prometheus.GaugeValue, float64(max(*w.cap-w.spent, 0)), k.ID, w.name)
		}
	}
}
