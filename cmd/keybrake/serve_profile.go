package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
)

// profileFlags registers serve's --cpuprofile and --memprofile.
func profileFlags(fs *flag.FlagSet, env Env, cpuFile, memFile *string) {
	fs.StringVar(cpuFile, "cpuprofile", envDefault(env, "KEYBRAKE_CPUPROFILE", ""), "write a CPU profile of the whole process to this file, from start until it stops on SIGTERM or SIGINT; read it with go tool pprof (KEYBRAKE_CPUPROFILE; docs/performance.md)")
	fs.StringVar(memFile, "memprofile", envDefault(env, "KEYBRAKE_MEMPROFILE", ""), "write a heap profile to this file when the process stops on SIGTERM or SIGINT, after a GC: what is still live (inuse_space) and everything allocated since start (alloc_space); read it with go tool pprof (KEYBRAKE_MEMPROFILE; docs/performance.md)")
}

// startProfiles starts CPU profiling into cpuFile; the returned function
// stops it and writes the heap profile to memFile. An empty file profiles
// nothing. Both files are created now, so a bad path refuses to start.
func startProfiles(cpuFile, memFile string) (stop func() error, err error) {
	var mem *os.File
	if memFile != "" {
		if mem, err = os.Create(memFile); err != nil {
			return nil, fmt.Errorf("invalid --memprofile (KEYBRAKE_MEMPROFILE): %v", err)
		}
	}
	stopCPU, err := startCPUProfile(cpuFile)
	if err != nil {
		if mem != nil {
			mem.Close()
		}
		return nil, err
	}
	return func() error {
		err := stopCPU()
		if mem != nil {
			runtime.GC() // the profile shows what is live now, not at the last GC
			if werr := errors.Join(pprof.Lookup("heap").WriteTo(mem, 0), mem.Close()); werr != nil {
				err = errors.Join(err, fmt.Errorf("--memprofile %s not written: %w", memFile, werr))
			}
		}
		return err
	}, nil
}

// stickyWriter remembers the first error of its writes: the CPU profile's
// writer goroutine drops the errors of its writes (runtime/pprof ignores
// what its profile builder returns), so a full disk would otherwise leave
// a truncated profile and no word of it.
type stickyWriter struct {
	w   io.Writer
	err error
}

func (s *stickyWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if err != nil && s.err == nil {
		s.err = err
	}
	return n, err
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
	w := &stickyWriter{w: f}
	if err := pprof.StartCPUProfile(w); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile() // returns once the profile is written
		if err := errors.Join(w.err, f.Close()); err != nil {
			return fmt.Errorf("--cpuprofile %s not written: %w", file, err)
		}
		return nil
	}, nil
}
