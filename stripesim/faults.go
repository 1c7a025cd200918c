package stripesim

import "github.com/keybrake/keybrake/internal/simfault"

// Fault modes: see internal/simfault, which every simulator shares.
const (
	// FaultLatency delays the request before it is processed, while it holds
	// its Idempotency-Key.
	FaultLatency = simfault.Latency
	// FaultFailBefore answers 500 before processing: nothing is created and
	// no idempotent response is saved.
	FaultFailBefore = simfault.FailBefore
	// FaultFailAfter processes the request, saves its idempotent response,
	// then answers 500 instead of the real response.
	FaultFailAfter = simfault.FailAfter
	// FaultCutAfter processes the request, saves its idempotent response,
	// then closes the connection before writing any byte.
	FaultCutAfter = simfault.CutAfter
)

// Fault is a rule that makes matching API requests slow or fail. Admin
// requests under /_sim/ never match. See simfault.Fault.
type Fault = simfault.Fault

// FaultStatus is a fault with how often it matched and fired.
type FaultStatus = simfault.FaultStatus

// AddFault registers f and returns its id. Faults are checked in the order
// they were added; the latencies of all firing faults add up, and the first
// firing fail mode decides the outcome.
func (s *Server) AddFault(f Fault) (string, error) { return s.faults.Add(f) }

// RemoveFault removes one fault; an unknown id is ignored.
func (s *Server) RemoveFault(id string) { s.faults.Remove(id) }

// ClearFaults removes every fault.
func (s *Server) ClearFaults() { s.faults.Clear() }

// Faults returns the faults with their counts.
func (s *Server) Faults() []FaultStatus { return s.faults.List() }
