package http

import (
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// maxOperationLabels bounds the operation label's cardinality: unknown paths
// build new operation names, and a hostile client must not grow the metrics
// without bound.
const maxOperationLabels = 200

// metrics are keybrake's Prometheus metrics, on a registry of their own so
// several servers in one test process do not collide.
type metrics struct {
	reg       *prometheus.Registry
	decisions *prometheus.CounterVec
	upstreams *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	reservedM *prometheus.CounterVec
	resolves  *prometheus.CounterVec
	exceeded  *prometheus.CounterVec
	swept     *prometheus.CounterVec
	guards    guardMetrics

	alertsFired     *prometheus.CounterVec // see metrics_alerts.go
	alertDeliveries *prometheus.CounterVec
	authFails       *prometheus.CounterVec
	reserveTime     prometheus.Histogram

	mu      sync.Mutex // held to add to names
	names   sync.Map   // operation labels in use (metrics_handles.go)
	nnames  int
	handles sync.Map // handleKey → the series' Counter or Observer
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keybrake_requests_total", Help: "Proxied requests by operation and decision (allow, replay, or the refusal's error code).",
		}, []string{"operation", "decision"}),
		upstreams: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keybrake_upstream_responses_total", Help: "Upstream answers by operation and status (0 for no answer).",
		}, []string{"operation", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "keybrake_request_duration_seconds", Help: "Time from receiving a proxied request to its upstream answer.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"operation"}),
		reservedM: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keybrake_reserved_usd_micros_total", Help: "USD micros reserved against caps (replays excluded).",
		}, []string{"operation"}),
		resolves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keybrake_resolved_total", Help: "Uncertain reservations the resolver brought to a final state.",
		}, []string{"state"}),
		exceeded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keybrake_hold_exceeded_total", Help: "Upstream answers whose amount was above what keybrake reserved for them (an alarm: counted in full).",
		}, []string{"operation"}),
		swept: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keybrake_holds_swept_total", Help: "Expired holds the sweeper ended, by the state it left them in.",
		}, []string{"state"}),
		reserveTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "keybrake_reserve_duration_seconds",
			Help:    "Time a priced request waited on the store before it was forwarded: its reservation against the key's caps (or its object's hold) checked and committed. The store's share of every capped request's latency.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
		}),
		authFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keybrake_auth_failures_total", Help: "Failed authentications (vault key or admin token), and requests refused because their address failed too often.",
		}, []string{"result"}),
	}
	m.reg.MustRegister(m.decisions, m.upstreams, m.latency, m.reservedM, m.resolves, m.exceeded, m.swept, m.authFails, m.reserveTime,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	m.guards = newGuardMetrics(m.reg)
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

func (m *metrics) decision(op, decision string) {
	m.counter(handleKey{metric: 'd', op: m.label(op), value: decision}).Inc()
}

func (m *metrics) upstream(c *call, status int) {
	op := m.label(opName(c))
	m.counter(handleKey{metric: 'u', op: op, status: status}).Inc()
	m.observer(handleKey{metric: 'l', op: op}).Observe(nowSince(c))
}

func (m *metrics) reserved(c *call, replay bool) {
	if !replay {
		m.counter(handleKey{metric: 'r', op: m.label(opName(c))}).Add(float64(c.cost.Micros))
	}
}

func (m *metrics) resolved(state string) {
	m.resolves.WithLabelValues(state).Inc()
}

func (m *metrics) holdExceeded(op string) {
	m.exceeded.WithLabelValues(m.label(op)).Inc()
}

func (m *metrics) holdSwept(state string) {
	m.swept.WithLabelValues(state).Inc()
}

func (m *metrics) authRefused() { m.authFails.WithLabelValues("rate_limited").Inc() }

func (m *metrics) authFailed() { m.authFails.WithLabelValues("failed").Inc() }
