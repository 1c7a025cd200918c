package http

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Every proxied request counts itself in three or four metrics. Looking a
// series up by its label values (WithLabelValues) hashes and checks the
// values and takes the vector's lock each time; the handles below are
// looked up once per series and then found in a sync.Map, which
// concurrent requests read without a lock.
//
// The caches stay bounded as the vectors do: operations are cut to
// maxOperationLabels by label before they key anything, decisions are a
// fixed set and statuses are three-digit numbers.

// handleKey names one series of the request metrics.
type handleKey struct {
	metric byte   // which vector: 'd'ecisions, 'u'pstreams, 'l'atency, 'r'eserved
	op     string // the operation label, after label
	value  string // decision; "" for the others
	status int    // upstream status; 0 for the others
}

func (m *metrics) handle(k handleKey) any {
	if h, ok := m.handles.Load(k); ok {
		return h
	}
	var h any
	switch k.metric {
	case 'd':
		h = m.decisions.WithLabelValues(k.op, k.value)
	case 'u':
		h = m.upstreams.WithLabelValues(k.op, strconv.Itoa(k.status))
	case 'l':
		h = m.latency.WithLabelValues(k.op)
	case 'r':
		h = m.reservedM.WithLabelValues(k.op)
	}
	h, _ = m.handles.LoadOrStore(k, h)
	return h
}

func (m *metrics) counter(k handleKey) prometheus.Counter { return m.handle(k).(prometheus.Counter) }

func (m *metrics) observer(k handleKey) prometheus.Observer { return m.handle(k).(prometheus.Observer) }

// label returns op, or "other" once maxOperationLabels names are in use;
// a name already in use is found without the lock.
func (m *metrics) label(op string) string {
	if _, ok := m.names.Load(op); ok {
		return op
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.names.Load(op); ok {
		return op
	}
	if m.nnames >= maxOperationLabels {
		return "other"
	}
	m.names.Store(op, struct{}{})
	m.nnames++
	return op
}
