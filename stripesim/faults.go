package stripesim

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Fault modes.
const (
	// FaultLatency delays the request before it is processed, while it holds
	// its Idempotency-Key.
	FaultLatency = "latency"
	// FaultFailBefore answers 500 before processing: nothing is created and
	// no idempotent response is saved.
	FaultFailBefore = "fail_before"
	// FaultFailAfter processes the request, saves its idempotent response,
	// then answers 500 instead of the real response.
	FaultFailAfter = "fail_after"
	// FaultCutAfter processes the request, saves its idempotent response,
	// then closes the connection before writing any byte.
	FaultCutAfter = "cut_after"
)

// Fault is a rule that makes matching API requests slow or fail. Admin
// requests under /_sim/ never match.
type Fault struct {
	Method      string        `json:"method,omitempty"` // "" = any
	Path        string        `json:"path"`             // exact, or a prefix when it ends in "*"; "" = any
	Mode        string        `json:"mode"`             // FaultLatency, FaultFailBefore, FaultFailAfter or FaultCutAfter
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
	case FaultLatency, FaultFailBefore, FaultFailAfter, FaultCutAfter:
	default:
		return fmt.Errorf("fault mode %q: want %s, %s, %s or %s", f.Mode, FaultLatency, FaultFailBefore, FaultFailAfter, FaultCutAfter)
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

// activeFault is a registered fault and its counters.
type activeFault struct {
	id      string
	fault   Fault
	rng     *rand.Rand
	matched int
	fired   int
}

// faultPlan is what the faults decided for one request.
type faultPlan struct {
	latency time.Duration
	waits   []<-chan struct{}
	notify  []firedNotice
	mode    string // the first firing fail mode, "" for none
	status  int
}

// AddFault registers f and returns its id. Faults are checked in the order
// they were added; the latencies of all firing faults add up, and the first
// firing fail mode decides the outcome.
func (s *Server) AddFault(f Fault) (string, error) {
	if err := f.validate(); err != nil {
		return "", err
	}
	s.fmu.Lock()
	defer s.fmu.Unlock()
	s.faultSeq++
	id := "flt_" + strconv.Itoa(s.faultSeq)
	af := &activeFault{id: id, fault: f}
	if f.Probability > 0 {
		af.rng = rand.New(rand.NewPCG(uint64(f.Seed), 0x6b657962726b))
	}
	s.faults = append(s.faults, af)
	return id, nil
}

// RemoveFault unregisters the fault with id; an unknown id is ignored.
func (s *Server) RemoveFault(id string) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	for i, af := range s.faults {
		if af.id == id {
			s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
			return
		}
	}
}

// ClearFaults unregisters every fault.
func (s *Server) ClearFaults() {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	s.faults = nil
}

// Faults returns the registered faults and their counters.
func (s *Server) Faults() []FaultStatus {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	out := make([]FaultStatus, len(s.faults))
	for i, af := range s.faults {
		out[i] = FaultStatus{ID: af.id, Fault: af.fault, Matched: af.matched, Fired: af.fired}
	}
	return out
}

// planFaults counts the request against every matching fault and returns
// what the firing ones do to it.
func (s *Server) planFaults(method, path string) faultPlan {
	var plan faultPlan
	s.fmu.Lock()
	defer s.fmu.Unlock()
	for _, af := range s.faults {
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
		if f.Mode != FaultLatency && plan.mode == "" {
			plan.mode, plan.status = f.Mode, f.Status
			if plan.status == 0 {
				plan.status = http.StatusInternalServerError
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

// delay tells the Fired channels, then waits out the plan's latency and holds, returning early when the
// client goes away: the request then goes on, as a real server's would.
func (p *faultPlan) delay(r *http.Request) {
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
