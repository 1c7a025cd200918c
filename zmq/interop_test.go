package zmq_test

import (
	"bufio"
	"bytes"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/keybrake/keybrake/zmq"
)

// pyzmq returns a Python interpreter that imports zmq (pyzmq on libzmq).
// The interop tests are the evidence that go-zeromq speaks ZMTP 3 with
// libzmq; CI installs Debian's python3-zmq for them.
func pyzmq(tb testing.TB) string {
	tb.Helper()
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(py, "-c", "import zmq").Run() == nil {
			return py
		}
	}
	tb.Fatal("no python3 with pyzmq: install it (Debian: apt-get install -y python3-zmq)")
	return ""
}

// TestInterop runs a pyzmq (libzmq) producer against each Go worker. The
// Python producer computes the content key itself, so the test also pins
// the key's definition across languages.
func TestInterop(t *testing.T) {
	py := pyzmq(t)
	script := "testdata/interop.py"

	check := func(t *testing.T, e *Env, customer string, out []byte) {
		t.Helper()
		rep, err := zmq.DecodeReply(bytes.TrimSpace(out))
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		want := MustEnvelope(t, Event(customer)).Key
		if rep.Status != zmq.StatusCharged || rep.Key != want {
			t.Fatalf("reply %+v, want charged under %s", rep, want)
		}
		e.MustOneCharge(t, want, rep.ChargeID)
	}

	t.Run("REQtoREP", func(t *testing.T) {
		e := MustEnv(t)
		w := MustOpen(t, &zmq.RepWorker{Endpoint: "tcp://127.0.0.1:0", Handler: e.Processor(nil), Namespace: namespace, Logger: e.Logger})
		out := runPy(t, exec.CommandContext(Ctx(t), py, script, "req", w.Addr(), namespace, "acct_py_req"))
		check(t, e, "acct_py_req", out)
	})

	t.Run("DEALERtoROUTER", func(t *testing.T) {
		e := MustEnv(t)
		w := MustOpen(t, &zmq.RouterWorker{Endpoint: "tcp://127.0.0.1:0", Handler: e.Processor(nil), Namespace: namespace, Logger: e.Logger})
		out := runPy(t, exec.CommandContext(Ctx(t), py, script, "dealer", w.Addr(), namespace, "acct_py_dealer"))
		check(t, e, "acct_py_dealer", out)
	})

	t.Run("PUSHtoPULLWithAck", func(t *testing.T) {
		e := MustEnv(t)
		cmd := exec.CommandContext(Ctx(t), py, script, "push", namespace, "acct_py_push")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(stdout)
		line, err := r.ReadString('\n')
		ack, ok := strings.CutPrefix(strings.TrimSpace(line), "ack ")
		if err != nil || !ok {
			cmd.Wait()
			t.Fatalf("python: %q %v; stderr: %s", line, err, stderr.String())
		}
		w := MustOpen(t, &zmq.PullWorker{Endpoint: "tcp://127.0.0.1:0", AckEndpoint: ack, Handler: e.Processor(nil), Namespace: namespace, Logger: e.Logger})
		io.WriteString(stdin, w.Addr()+"\n")
		out, _ := io.ReadAll(r)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("python: %v; stderr: %s", err, stderr.String())
		}
		check(t, e, "acct_py_push", out)
	})
}

// runPy runs cmd and returns its stdout, failing with its stderr.
func runPy(tb testing.TB, cmd *exec.Cmd) []byte {
	tb.Helper()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("python: %v; stderr: %s", err, stderr.String())
	}
	return out
}
