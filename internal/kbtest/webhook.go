package kbtest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/keybrake/keybrake/alert"
)

// Webhook is an alert receiver on loopback. It checks every request's
// Keybrake-Signature against Secret at the time Now gives, and records the
// event ids it acknowledged with a 2xx. Behave, if set, decides each
// request's fate by its number (1, 2, …): a status to answer, or 0 to hang
// until the sender gives up.
type Webhook struct {
	URL    string
	Secret string
	Now    func() time.Time
	Behave func(n int) int

	mu       sync.Mutex
	n        int
	acked    map[string]int // event id -> acknowledged deliveries
	bodies   map[string][]byte
	badSigs  int
	requests int
}

// NewWebhook starts a receiver checking signatures made with secret at the
// times now gives; tb.Cleanup stops it.
func NewWebhook(tb testing.TB, secret string, now func() time.Time) *Webhook {
	tb.Helper()
	w := &Webhook{Secret: secret, Now: now, acked: map[string]int{}, bodies: map[string][]byte{}}
	srv := httptest.NewServer(http.HandlerFunc(w.serve))
	tb.Cleanup(srv.Close)
	w.URL = srv.URL + "/hook"
	return w
}

func (w *Webhook) serve(rw http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.mu.Lock()
	w.n++
	n := w.n
	w.requests++
	behave := w.Behave
	w.mu.Unlock()
	status := http.StatusOK
	if behave != nil {
		status = behave(n)
	}
	if status == 0 {
		<-r.Context().Done() // hang until the sender times out
		return
	}
	if err := alert.Verify(w.Secret, r.Header.Get(alert.SignatureHeader), body, alert.DefaultTolerance, w.Now()); err != nil {
		w.mu.Lock()
		w.badSigs++
		w.mu.Unlock()
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	var ev struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(body, &ev)
	if ev.ID == "" || ev.ID != r.Header.Get(alert.EventIDHeader) {
		ev.ID = r.Header.Get(alert.EventIDHeader) // Slack bodies carry no id
	}
	if status >= 200 && status < 300 {
		w.mu.Lock()
		w.acked[ev.ID]++
		w.bodies[ev.ID] = body
		w.mu.Unlock()
	}
	rw.WriteHeader(status)
}

// Acked returns a copy of the acknowledged event ids and their counts.
func (w *Webhook) Acked() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int, len(w.acked))
	for k, v := range w.acked {
		out[k] = v
	}
	return out
}

// Body returns the acknowledged body of event id.
func (w *Webhook) Body(id string) []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.bodies[id]
}

// BadSignatures returns how many requests failed verification.
func (w *Webhook) BadSignatures() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.badSigs
}

// Requests returns how many requests arrived.
func (w *Webhook) Requests() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.requests
}
