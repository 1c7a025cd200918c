package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// benchChild is one process `keybrake bench` started from its own
// executable: the simulator, a replica of serve, the bare reverse proxy or
// a broker. Its stderr is kept (the last 64 KB) to explain a failure.
type benchChild struct {
	name string
	cmd  *exec.Cmd
	out  *tailBuffer
	done chan struct{}
	err  error // set when done is closed
}

// benchExecutable is the program the children run: this one. Tests of
// cmd/keybrake run bench from the test binary, whose TestMain acts as
// keybrake when KEYBRAKE_BENCH_CHILD is set (bench_test.go).
func benchExecutable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find this program to start the bench's processes: %w", err)
	}
	return exe, nil
}

// startChild starts exe (this program if empty) with args and extra
// environment variables, then polls ready (a URL answering 200) until it
// does, the process exits, or the deadline passes.
func startChild(ctx context.Context, name, exe string, args, env []string, ready string) (*benchChild, error) {
	if exe == "" {
		var err error
		if exe, err = benchExecutable(); err != nil {
			return nil, err
		}
	}
	c := &benchChild{name: name, out: &tailBuffer{max: 64 << 10}, done: make(chan struct{})}
	c.cmd = exec.Command(exe, args...)
	c.cmd.Env = append(childEnv(os.Environ()), env...)
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	setChildAttrs(c.cmd)
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	if err := c.waitReady(ctx, ready, 30*time.Second); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// childEnv is the bench's environment without keybrake's own variables
// (KEYBRAKE_ADMIN_ADDR, KEYBRAKE_TLS_CERT, STRIPE_SECRET_KEY… would change
// what the children serve and where): the bench configures them by flags.
// KEYBRAKE_BENCH_CHILD passes, for the tests.
func childEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if (strings.HasPrefix(name, "KEYBRAKE_") || strings.HasPrefix(name, "STRIPE_")) && name != "KEYBRAKE_BENCH_CHILD" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// waitReady polls ready until it answers: an http:// URL answering 200,
// or tcp:host:port accepting a connection.
func (c *benchChild) waitReady(ctx context.Context, ready string, limit time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if addr, ok := strings.CutPrefix(ready, "tcp:"); ok {
			if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				conn.Close()
				return nil
			}
		} else if resp, err := client.Get(ready); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-c.done:
			return fmt.Errorf("%s exited before it was ready (%v):\n%s", c.name, c.err, c.out.String())
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s after %s:\n%s", c.name, ready, limit, c.out.String())
		}
	}
}

// stop asks the child to shut down (SIGTERM: serve finishes in-flight
// requests and writes its CPU profile), and kills it after 15 s.
func (c *benchChild) stop() error {
	select {
	case <-c.done:
		return nil
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return nil
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("%s did not stop within 15 s after SIGTERM; killed", c.name)
	}
}

// startOnFreeAddr starts a child told its address: args and ready get a
// loopback address free a moment before, and a child that lost the port
// to another process in between is started again on another, twice at
// most.
func startOnFreeAddr(ctx context.Context, name, exe string, args func(addr string) []string, env []string, ready func(addr string) string) (*benchChild, string, error) {
	var err error
	for range 3 {
		var addr string
		if addr, err = freeAddr(); err != nil {
			return nil, "", err
		}
		var c *benchChild
		if c, err = startChild(ctx, name, exe, args(addr), env, ready(addr)); err == nil {
			return c, addr, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			return nil, "", err
		}
	}
	return nil, "", err
}

// freeAddr returns a loopback address with a port free at the time of the
// call, for a child that is told its address.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.b))
}

// runBareProxy is `keybrake bench --bare-proxy UPSTREAM --bare-addr ADDR`:
// the bench's baseline process, an httputil.ReverseProxy with no logic,
// serving until interrupted.
func runBareProxy(ctx context.Context, upstream, addr string) error {
	u, err := url.Parse(upstream)
	if err != nil || u.Host == "" {
		return fmt.Errorf("invalid --bare-proxy %q: want http://host:port", upstream)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("invalid --bare-addr %q: %w", addr, err)
	}
	srv := &http.Server{Handler: bareProxy(u), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		return srv.Close()
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	}
}

// bareProxy is a reverse proxy with no logic, /healthz answered locally:
// the floor of any Go proxy on the machine.
func bareProxy(upstream *url.URL) http.Handler {
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(upstream) }}
	rp.Transport = &http.Transport{MaxIdleConns: 2048, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.WriteHeader(http.StatusOK)
			return
		}
		rp.ServeHTTP(w, r)
	})
}
