package main

import "time"

// RedactCommand exposes redactCommand to the external tests.
var RedactCommand = redactCommand

// ChildEnv exposes childEnv to the external tests.
var ChildEnv = childEnv

// ParseProcStatus exposes parseProcStatus to the external tests.
var ParseProcStatus = parseProcStatus

// ParseProcStat exposes parseProcStat to the external tests.
var ParseProcStat = parseProcStat

// MeterCPU meters the bench process (PID 1) and children (PIDs 2, 3…)
// with read, adds late (PID 99) after the start mark, and returns the
// phase's CPU times over requests.
func MeterCPU(read func(pid int) (time.Duration, error), children []string, late string, requests int) *PhaseCPU {
	m := &cpuMeter{procs: []cpuProc{{cpuSelf, 1}}, read: read}
	for i, name := range children {
		m.add(name, i+2)
	}
	start := m.mark()
	if late != "" {
		m.add(late, 99)
	}
	return m.since(start, requests)
}

// WarmupRequests exposes warmupRequests to the external tests, for keys
// spread over replicas.
func WarmupRequests(keys, replicas, n int) int {
	return warmupRequests(target{keys: make([]string, keys), bases: make([]string, replicas)}, n)
}

// ParseProcStatTree exposes parseProcStatTree to the external tests.
var ParseProcStatTree = parseProcStatTree
