package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
)

// profileFlags registers serve's --cpuprofile.
func profileFlags(fs *flag.FlagSet, env Env, file *string) {
	fs.StringVar(file, "cpuprofile", envDefault(env, "KEYBRAKE_CPUPROFILE", ""), "write a CPU profile of the whole process to this file, from start until it stops on SIGTERM or SIGINT; read it with go tool pprof (KEYBRAKE_CPUPROFILE; docs/performance.md)")
}

// startCPUProfile starts profiling into file; the returned function stops
// and writes it. An empty file profiles nothing.
func startCPUProfile(file string) (stop func() error, err error) {
	if file == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("invalid --cpuprofile (KEYBRAKE_CPUPROFILE): %v", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}
