// Package simfault is the fault injection the vendor simulators share:
// rules that make matching API requests slow, fail before or after they
// are processed, or lose their connection, counted and reproducible.
//
// It is a copy of stripesim's faults.go with the same JSON and the same
// semantics, made reusable; stripesim keeps its own copy until it moves
// onto this package (a change to stripesim left for its owner).
//
// A simulator calls Plan for every API request, Plan.Delay once the
// request holds whatever it must hold (an Idempotency-Key), and acts on
// Plan.Mode: FailBefore answers Plan.Status without processing;
// FailAfter processes, then answers Plan.Status; CutAfter processes,
// then Cut closes the connection without a byte.
package simfault

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Fault modes.
const (
	// Latency delays the request before it is processed, while it holds
	// its Idempotency-Key.
	Latency = "latency"
	// FailBefore answers 500 before processing: nothing is created and
	// no idempotent response is saved.
	FailBefore = "fail_before"
	// FailAfter processes the request, saves its idempotent response,
	// then answers 500 instead of the real response.
	FailAfter = "fail_after"
	// CutAfter processes the request, saves its idempotent response,
	// then closes the connection before writing any byte.
	CutAfter = "cut_after"
)

// Fault is a rule that makes matching API requests slow or fail. Admin
// requests under /_sim/ never match.
type Fault struct {
	Method      string        `json:"method,omitempty"` // "" = any
	Path        string        `json:"path"`             // exact, or a prefix when it ends in "*"; "" = any
	Mode        string        `json:"mode"`             // Latency, FailBefore, FailAfter or CutAfter
	Latency     time.Duration `json:"latency"`          // delay before processing; allowed with every mode
	Status      int           `json:"status,omitempty"` // status of the fail modes, default 500
	Nth         int           `json:"nth,omitempty"`    // fire only on the nth matching request (1-based); 0 = every match
	Probability float64       `json:"probability,omitempty"`
	Seed        int64         `json:"seed,omitempty"`  // seed of Probability's generator, for reproducible runs
	Count       int           `json:"count,omitempty"` // stop after firing this many times; 0 = unlimited

	// Wait, when non-nil, makes a firing fault hold the request after its
	// Latency until Wait is closed or the client goes away. It lets tests
	// hold a request mid-flight without sleeping. Go API only.
	Wait <-chan struct{} `json:"-"`
	// Fired, when non-nil, receives the fault's id without blocking each time
	// the fault fires, once the request holds its Idempotency-Key and before
	// any delay; give it a buffer. Go API only.
	Fired chan<- string `json:"-"`
}

// FaultStatus is a Fault as listed by GET /_sim/faults: its id, and how many
// requests matched it and how many times it fired.
type FaultStatus struct {
	ID      string `json:"id"`
	Fault   Fault  `json:"fault"`
	Matched int    `json:"matched"`
	Fired   int    `json:"fired"`
}

// MarshalJSON writes Latency as a Go duration string ("250ms").
func (f Fault) MarshalJSON() ([]byte, error) {
	type alias Fault
	return json.Marshal(struct {
		alias
		Latency string `json:"latency,omitempty"`
	}{alias(f), durationString(f.Latency)})
}

// UnmarshalJSON reads Latency as a Go duration string ("250ms") or a number
// of milliseconds, and rejects unknown fields.
func (f *Fault) UnmarshalJSON(b []byte) error {
	type alias Fault
	var v struct {
		alias
		Latency json.RawMessage `json:"latency"`
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return err
	}
	*f = Fault(v.alias)
	f.Latency = 0
	if len(v.Latency) == 0 || string(v.Latency) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(v.Latency, &s); err == nil {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("latency: %w", err)
		}
		f.Latency = d
		return nil
	}
	ms, err := strconv.ParseFloat(string(v.Latency), 64)
	if err != nil {
		return errors.New(`latency: want a duration string ("250ms") or a number of milliseconds`)
	}
	f.Latency = time.Duration(ms * float64(time.Millisecond))
	return nil
}

func durationString(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// validate reports the first unacceptable field of f.
func (f *Fault) validate() error {
	switch f.Mode {
	case Latency, FailBefore, FailAfter, CutAfter:
	default:
		return fmt.Errorf("fault mode %q: want %s, %s, %s or %s", f.Mode, Latency, FailBefore, FailAfter, CutAfter)
	}
	switch {
	case f.Latency < 0:
		return errors.New("fault latency must not be negative")
	case f.Status != 0 && (f.Status < 400 || f.Status > 599):
		return fmt.Errorf("fault status %d: want 400-599", f.Status)
	case f.Nth < 0:
		return errors.New("fault nth must not be negative")
	case f.Count < 0:
		return errors.New("fault count must not be negative")
	case f.Probability < 0 || f.Probability > 1:
		return fmt.Errorf("fault probability %v: want 0 to 1", f.Probability)
	case f.Path != "" && !strings.HasPrefix(f.Path, "/") && f.Path != "*":
		return fmt.Errorf("fault path %q must start with /", f.Path)
	}
	return nil
}

// matches reports whether the fault applies to a request.
func (f *Fault) matches(method, path string) bool {
	if f.Method != "" && !strings.EqualFold(f.Method, method) {
		return false
	}
	if prefix, ok := strings.CutSuffix(f.Path, "*"); ok {
		return strings.HasPrefix(path, prefix)
	}
	return f.Path == "" || f.Path == path
}

// Injector holds the registered faults. The zero value has none and is
// ready to use; it is safe for concurrent use.
type Injector struct {
	mu     sync.Mutex // guards faults, seq
	faults []*activeFault
	seq    int
}

// activeFault is a registered fault and its counters.
type activeFault struct {
	id      string
	fault   Fault
	rng     *rand.Rand
	matched int
	fired   int
}

// Plan is what the faults decided for one request.
type Plan struct {
	Mode   string // the first firing fail mode, "" for none
	Status int    // the status of a fail mode

	latency time.Duration
	waits   []<-chan struct{}
	notify  []firedNotice
}

// Add registers f and returns its id. Faults are checked in the order
// they were added; the latencies of all firing faults add up, and the first
// firing fail mode decides the outcome.
func (in *Injector) Add(f Fault) (string, error) {
	if err := f.validate(); err != nil {
		return "", err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.seq++
	id := "flt_" + strconv.Itoa(in.seq)
	af := &activeFault{id: id, fault: f}
	if f.Probability > 0 {
		af.rng = rand.New(rand.NewPCG(uint64(f.Seed), 0x6b657962726b))
	}
	in.faults = append(in.faults, af)
	return id, nil
}

// Remove unregisters the fault with id; an unknown id is ignored.
func (in *Injector) Remove(id string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for i, af := range in.faults {
		if af.id == id {
			in.faults = append(in.faults[:i:i], in.faults[i+1:]...)
			return
		}
	}
}

// Clear unregisters every fault.
func (in *Injector) Clear() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.faults = nil
}

// List returns the registered faults and their counters.
func (in *Injector) List() []FaultStatus {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]FaultStatus, len(in.faults))
	for i, af := range in.faults {
		out[i] = FaultStatus{ID: af.id, Fault: af.fault, Matched: af.matched, Fired: af.fired}
	}
	return out
}

// Plan counts the request against every matching fault and returns
// what the firing ones do to it.
func (in *Injector) Plan(method, path string) Plan {
	var plan Plan
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, af := range in.faults {
		f := &af.fault
		if !f.matches(method, path) {
			continue
		}
		af.matched++
		if f.Nth != 0 && af.matched != f.Nth {
			continue
		}
		if f.Count != 0 && af.fired >= f.Count {
			continue
		}
		if af.rng != nil && af.rng.Float64() >= f.Probability {
			continue
		}
		af.fired++
		if f.Fired != nil {
			plan.notify = append(plan.notify, firedNotice{f.Fired, af.id})
		}
		plan.latency += f.Latency
		if f.Wait != nil {
			plan.waits = append(plan.waits, f.Wait)
		}
		if f.Mode != Latency && plan.Mode == "" {
			plan.Mode, plan.Status = f.Mode, f.Status
			if plan.Status == 0 {
				plan.Status = http.StatusInternalServerError
			}
		}
	}
	return plan
}

// firedNotice is a Fired channel to tell, and the id to tell it.
type firedNotice struct {
	ch chan<- string
	id string
}

// Delay tells the Fired channels, then waits out the plan's latency and holds, returning early when the
// client goes away: the request then goes on, as a real server's would.
func (p *Plan) Delay(r *http.Request) {
	for _, n := range p.notify {
		select {
		case n.ch <- n.id:
		default:
		}
	}
	if p.latency > 0 {
		t := time.NewTimer(p.latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
		}
	}
	for _, w := range p.waits {
		select {
		case <-w:
		case <-r.Context().Done():
		}
	}
}

// Cut closes the connection of w before any byte of the response is
// written, as a network failure after the upstream processed a request
// would.
func Cut(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}

// Admin serves the fault part of a simulator's admin API at path (the
// path after /_sim): GET /faults lists, POST /faults adds a Fault given as
// JSON (unknown fields refused), DELETE /faults removes all and DELETE
// /faults/{id} one. It reports whether path was one of these; writeErr
// answers a bad request in the simulator's own error shape.
func (in *Injector) Admin(w http.ResponseWriter, r *http.Request, path string, writeErr func(w http.ResponseWriter, status int, msg string)) bool {
	reply := func(v any) {
		w.Header().Set("Content-Type", "application/json")
		b, _ := json.Marshal(v)
		w.Write(b)
	}
	switch {
	case path == "/faults" && r.Method == http.MethodGet:
		reply(map[string]any{"faults": in.List()})
	case path == "/faults" && r.Method == http.MethodPost:
		var f Fault
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&f); err != nil {
			writeErr(w, http.StatusBadRequest, err.Error())
			return true
		}
		id, err := in.Add(f)
		if err != nil {
			writeErr(w, http.StatusBadRequest, err.Error())
			return true
		}
		reply(map[string]string{"id": id})
	case path == "/faults" && r.Method == http.MethodDelete:
		in.Clear()
		reply(map[string]bool{"cleared": true})
	case strings.HasPrefix(path, "/faults/") && r.Method == http.MethodDelete:
		in.Remove(strings.TrimPrefix(path, "/faults/"))
		reply(map[string]bool{"deleted": true})
	default:
		return false
	}
	return true
}
