package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Paths of a phase: where its requests go.
const (
	pathDirect   = "direct"     // the simulator itself, with its secret
	pathBare     = "bare proxy" // httputil.ReverseProxy with no logic
	pathKeybrake = "keybrake"   // keybrake, round-robin over every replica, with vault keys
	pathReplica1 = "keybrake×1" // keybrake's first replica alone (with --replicas > 1)
)

// target is where a phase sends its requests.
type target struct {
	path  string
	bases []string // round-robin
	keys  []string // round-robin by request
	hot   bool     // charges on the hot key, counted in bench.hotCharges
}

// op builds one request against a base URL with a key.
type op func(base, key string) *http.Request

func (b *bench) getOp() op {
	return func(base, key string) *http.Request {
		req, _ := http.NewRequest("GET", base+"/v1/customers/"+b.customer, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		return req
	}
}

func chargeOp(base, key string) *http.Request {
	req, _ := http.NewRequest("POST", base+"/v1/charges", strings.NewReader("amount=100&currency=usd&source=tok_visa"))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return req
}

// send performs one request and checks it succeeded.
func (b *bench) send(req *http.Request) error {
	resp, err := b.client.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s %s: status %d", req.Method, req.URL.Path, resp.StatusCode)
	}
	return nil
}

// Sample is one phase of one run: one operation on one path at one
// concurrency. Latencies are in microseconds.
type Sample struct {
	Run       int       `json:"run"`
	Op        string    `json:"op"`
	Path      string    `json:"path"`
	Clients   int       `json:"clients"`
	Requests  int       `json:"requests"`
	Errors    int       `json:"errors"`
	FirstErr  string    `json:"first_error,omitempty"`
	Seconds   float64   `json:"seconds"`
	Offered   float64   `json:"offered_per_s,omitempty"` // --rate: the open loop's schedule
	PerSecond float64   `json:"per_s"`
	P50       float64   `json:"p50_us"`
	P99       float64   `json:"p99_us"`
	Max       float64   `json:"max_us"`
	CPU       *PhaseCPU `json:"cpu,omitempty"` // Linux: every process's CPU time per request
	// Reserve is the mean µs a priced request spent on the store before it
	// was forwarded, from serve's keybrake_reserve_duration_seconds (0 on
	// the direct and bare paths and for phases that reserve nothing).
	Reserve float64 `json:"reserve_us,omitempty"`
}

// phase sends o to t from clients concurrent loops until the duration has
// passed (or limit requests were sent, if limit > 0) and records every
// request's latency. Failed requests are counted, not retried.
//
// With rate = 0 the loop is closed: each client sends its next request
// when the last is answered, so the phase measures throughput at
// saturation, and its latencies include the queueing that saturation
// causes. With rate > 0 it is open: requests are scheduled at rate per
// second in all and taken by whichever client is free, and each latency
// runs from the request's scheduled time (or from when the schedule's
// own timer let it go, if that woke late: releasedAt), so a stall delays (and
// counts against) the requests scheduled behind it instead of hiding them.
func (b *bench) phase(ctx context.Context, t target, o op, clients int, dur time.Duration, limit int, rate float64) Sample {
	var (
		next, errs atomic.Int64
		firstErr   atomic.Value
		wg         sync.WaitGroup
	)
	lats := make([][]time.Duration, clients)
	start := time.Now()
	deadline := start.Add(dur)
	var schedule chan time.Time
	if rate > 0 {
		schedule = make(chan time.Time, clients)
		go func() {
			defer close(schedule)
			interval := time.Duration(float64(time.Second) / rate)
			var woke time.Time
			for i := int64(0); ; i++ {
				at := start.Add(time.Duration(i) * interval)
				if !at.Before(deadline) || ctx.Err() != nil || (limit > 0 && i >= int64(limit)) {
					return
				}
				if d := time.Until(at); d > 0 {
					time.Sleep(d)
					woke = time.Now()
				}
				schedule <- releasedAt(at, woke)
			}
		}()
	}
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				t0 := time.Now()
				if schedule != nil {
					at, ok := <-schedule
					if !ok {
						return
					}
					t0 = at
				} else if !t0.Before(deadline) {
					return
				}
				n := next.Add(1)
				if limit > 0 && n > int64(limit) {
					return
				}
				req := o(t.bases[int(n)%len(t.bases)], t.keys[int(n)%len(t.keys)]).WithContext(ctx)
				err := b.send(req)
				lats[c] = append(lats[c], time.Since(t0))
				switch {
				case err != nil:
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				case t.hot && req.Method == "POST":
					b.hotCharges.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	s := Sample{Path: t.path, Clients: clients, Requests: len(all), Errors: int(errs.Load()), Seconds: elapsed.Seconds(), Offered: rate}
	s.FirstErr, _ = firstErr.Load().(string)
	if len(all) > 0 {
		s.PerSecond = float64(len(all)-s.Errors) / elapsed.Seconds()
		s.P50, s.P99, s.Max = pct(all, 0.5), pct(all, 0.99), pct(all, 1)
	}
	return s
}

// releasedAt is when the open loop's request scheduled at at could first be
// sent: at, or the end of the schedule's last sleep if that overslept past at.
// Go's timers wake up to a millisecond late (more on a busy machine: measured
// p50 0.1–1 ms, p99 ~1 ms here), and that lateness is the load generator's,
// not the server's; counted from at, it was added to every path's latency
// alike. A request delayed because every client was still waiting for an
// answer (the schedule blocked on its channel, not asleep) still counts from
// at: that wait is the server's.
func releasedAt(at, woke time.Time) time.Time {
	if woke.After(at) {
		return woke
	}
	return at
}

func pct(d []time.Duration, p float64) float64 {
	i := int(float64(len(d)-1) * p)
	return float64(d[i].Nanoseconds()) / 1e3
}

// targets returns the paths of an operation, in this run's order: the
// order rotates from run to run so no path always runs first (or right
// after another's load).
func (b *bench) targets(opName string, run int) []target {
	proxyKeys := []string{b.vaultKey}
	if opName == "keys" {
		proxyKeys = b.keys
	}
	hot := opName == "charge" || opName == "mixed"
	all := []target{
		{pathDirect, []string{b.simURL}, []string{simulatorSecret}, false},
		{pathBare, []string{b.bareURL}, []string{simulatorSecret}, false},
		{pathKeybrake, b.proxyURLs, proxyKeys, hot},
	}
	if len(b.proxyURLs) > 1 {
		all = append(all, target{pathReplica1, b.proxyURLs[:1], proxyKeys, hot})
	}
	var ts []target
	for _, t := range all {
		if b.cfg.measures(t.path) {
			ts = append(ts, t)
		}
	}
	r := run % len(ts)
	return append(ts[r:], ts[:r]...)
}

func (b *bench) opFunc(name string) op {
	switch name {
	case "get":
		return b.getOp()
	case "mixed":
		get := b.getOp()
		var n atomic.Int64
		return func(base, key string) *http.Request {
			if n.Add(1)%2 == 0 {
				return get(base, key)
			}
			return chargeOp(base, key)
		}
	}
	return chargeOp
}

// runHTTP runs every HTTP operation's phases for every run, interleaved:
// for each run, operation and concurrency, each path in turn, after a
// warm-up of each path.
func (b *bench) runHTTP(ctx context.Context, progress io.Writer) ([]Sample, error) {
	ops := b.cfg.httpOps()
	if len(ops) == 0 {
		return nil, nil
	}
	if b.cfg.Ops["keys"] {
		if err := b.createSpreadKeys(ctx, progress); err != nil {
			return nil, err
		}
	}
	var out []Sample
	for run := 1; run <= b.cfg.Runs; run++ {
		for _, name := range ops {
			o := b.opFunc(name)
			ts := b.targets(name, run-1)
			if b.cfg.Warmup > 0 {
				for _, t := range ts {
					if s := b.phase(ctx, t, o, min(8, b.cfg.Warmup), time.Minute, warmupRequests(t, b.cfg.Warmup), 0); s.Errors > 0 {
						return out, fmt.Errorf("warm-up of %s on %s: %d of %d failed: %s", name, t.path, s.Errors, s.Requests, s.FirstErr)
					}
				}
			}
			b.mem.markWarm()
			for _, n := range b.cfg.Concurrency {
				for _, t := range ts {
					if err := ctx.Err(); err != nil {
						return out, err
					}
					var reserve reserveTotals
					if t.path != pathDirect && t.path != pathBare {
						reserve = b.reserveMark(ctx)
					}
					cpu := b.cpu.mark()
					s := b.phase(ctx, t, o, n, b.cfg.Duration, b.cfg.Requests, b.cfg.Rate)
					s.Run, s.Op, s.CPU = run, name, b.cpu.since(cpu, s.Requests)
					s.Reserve = b.reserveSince(ctx, reserve)
					fmt.Fprintf(progress, "bench: run %d/%d %-6s %-11s %4d clients: %7.0f/s p50 %6.0f µs p99 %7.0f µs max %7.0f µs, %d errors\n",
						run, b.cfg.Runs, name, t.path, n, s.PerSecond, s.P50, s.P99, s.Max, s.Errors)
					out = append(out, s)
				}
			}
		}
	}
	return out, nil
}

// warmupRequests is how many requests warm path t up: at least n, and
// with several keys enough to send every key to every replica it meets in
// a phase (the phase pairs request i with key i mod keys and replica i mod
// replicas, so the pairs repeat every lcm(keys, replicas) requests). A
// phase then measures keys each replica has met, with their lookups cached
// and its pool grown, not the first meeting of most keys (1,000 keys in a
// 3 s phase).
func warmupRequests(t target, n int) int {
	if len(t.keys) <= 1 {
		return n
	}
	a, b := len(t.keys), len(t.bases)
	for b != 0 {
		a, b = b, a%b
	}
	return max(n, len(t.keys)/a*len(t.bases))
}

// CapCheckResult is the outcome of racing 64 clients for a capped key.
type CapCheckResult struct {
	CapUSD     int    `json:"cap_usd"`
	Succeeded  int    `json:"succeeded"`
	Refused    int    `json:"refused_429"`
	Other      int    `json:"other"`
	SettledUSD string `json:"settled_usd"`
	Upstream   int    `json:"upstream_charges"`
	Overspend  bool   `json:"overspend"`
}

// capCheck races 64 clients of $1.00 charges against a key with a total cap
// of capUSD, round-robin across the replicas, until every client has been
// refused: exactly capUSD charges must pass, and the settled spend and the
// simulator's newly captured dollars must both equal the cap.
func (b *bench) capCheck(ctx context.Context, capUSD int) (*CapCheckResult, error) {
	id, secret, err := b.createKeyBody(ctx, fmt.Sprintf(`{"label":"bench-cap-check","total_usd_cap":%d}`, capUSD))
	if err != nil {
		return nil, err
	}
	before, err := b.capturedCents(ctx)
	if err != nil {
		return nil, err
	}
	var ok, refused, other atomic.Int64
	var wg sync.WaitGroup
	for c := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10*capUSD; i++ {
				resp, err := b.client.Do(chargeOp(b.proxyURLs[(c+i)%len(b.proxyURLs)], secret).WithContext(ctx))
				if err != nil {
					other.Add(1)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case 200:
					ok.Add(1)
				case 429:
					refused.Add(1)
					return
				default:
					other.Add(1)
					return
				}
			}
		}()
	}
	wg.Wait()
	sp, err := b.spent(ctx, id)
	if err != nil {
		return nil, err
	}
	after, err := b.capturedCents(ctx)
	if err != nil {
		return nil, err
	}
	r := &CapCheckResult{CapUSD: capUSD, Succeeded: int(ok.Load()), Refused: int(refused.Load()), Other: int(other.Load()),
		SettledUSD: sp.String(), Upstream: int((after - before) / 100)}
	r.Overspend = sp > keybrakeUSD(capUSD) || r.Upstream > capUSD || r.Succeeded > capUSD
	return r, nil
}
