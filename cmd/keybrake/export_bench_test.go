package main

// RedactCommand exposes redactCommand to the external tests.
var RedactCommand = redactCommand

// ChildEnv exposes childEnv to the external tests.
var ChildEnv = childEnv

// ParseProcStatus exposes parseProcStatus to the external tests.
var ParseProcStatus = parseProcStatus

// WarmupRequests exposes warmupRequests to the external tests, for keys
// spread over replicas.
func WarmupRequests(keys, replicas, n int) int {
	return warmupRequests(target{keys: make([]string, keys), bases: make([]string, replicas)}, n)
}
