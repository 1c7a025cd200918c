package replicas_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keybrake/keybrake/stripesim"
)

// MustBuild builds the keybrake binary once into a temp dir.
func MustBuild(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "keybrake")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/keybrake/keybrake/cmd/keybrake")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// Proc is a keybrake process started by a test.
type Proc struct {
	Name string
	URL  string
	cmd  *exec.Cmd
	log  *logBuffer
	done chan struct{}
}

// logBuffer collects a process's stderr.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// urlRe finds the URL a process logs once it listens.
var urlRe = regexp.MustCompile(`msg="(?:keybrake serving|stripe simulator listening)" url=(http://\S+)`)

// MustStart runs bin with args and env, waits (bounded) until it logs the
// URL it listens on, and kills it when the test ends. Its log is shown if
// the test fails.
func MustStart(tb testing.TB, name, bin string, env []string, args ...string) *Proc {
	tb.Helper()
	p := &Proc{Name: name, log: &logBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	tb.Cleanup(func() {
		p.Kill(tb)
		if tb.Failed() {
			tb.Logf("log of %s:\n%s", name, p.log.String())
		}
	})
	deadline := time.Now().Add(time.Minute)
	for {
		if m := urlRe.FindStringSubmatch(p.log.String()); m != nil {
			p.URL = m[1]
			return p
		}
		select {
		case <-p.done:
			tb.Fatalf("%s exited before listening:\n%s", name, p.log.String())
		case <-time.After(10 * time.Millisecond): // poll interval
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s did not start listening:\n%s", name, p.log.String())
		}
	}
}

// Kill sends SIGKILL to the process, by its id, and waits for it to exit.
func (p *Proc) Kill(tb testing.TB) {
	tb.Helper()
	select {
	case <-p.done:
		return
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		tb.Logf("kill %s: %v", p.Name, err)
	}
	<-p.done
}

// SimProc is a standalone `keybrake stripesim` process, driven through its
// /_sim/ admin API.
type SimProc struct{ *Proc }

// AddFault adds a fault and returns its id.
func (s SimProc) AddFault(tb testing.TB, f stripesim.Fault) string {
	tb.Helper()
	b, _ := json.Marshal(f)
	status, out := Do(tb, "POST", s.URL+"/_sim/faults", string(b), map[string]string{"Content-Type": "application/json"})
	if status != 200 {
		tb.Fatalf("add fault: %d %s", status, out)
	}
	var v struct{ ID string }
	json.Unmarshal(out, &v)
	return v.ID
}

// WaitFired waits (bounded) until the fault has fired n times: the request
// it holds is at the simulator.
func (s SimProc) WaitFired(tb testing.TB, id string, n int) {
	tb.Helper()
	Eventually(tb, fmt.Sprintf("fault %s fired %d times", id, n), func() bool {
		_, out := Do(tb, "GET", s.URL+"/_sim/faults", "", nil)
		var v struct{ Faults []stripesim.FaultStatus }
		json.Unmarshal(out, &v)
		for _, f := range v.Faults {
			if f.ID == id {
				return f.Fired >= n
			}
		}
		return false
	})
}

// GroundTruth returns every object the simulator created.
func (s SimProc) GroundTruth(tb testing.TB) stripesim.GroundTruth {
	tb.Helper()
	_, out := Do(tb, "GET", s.URL+"/_sim/objects", "", nil)
	var g stripesim.GroundTruth
	if err := json.Unmarshal(out, &g); err != nil {
		tb.Fatalf("ground truth: %v", err)
	}
	return g
}

// Eventually polls cond until it holds, failing the test after a bound
// generous enough for a loaded machine. It asserts nothing about time.
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			tb.Fatalf("gave up waiting: %s", what)
		case <-time.After(20 * time.Millisecond): // poll interval
		}
	}
}
