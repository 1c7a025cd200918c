package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	main "github.com/keybrake/keybrake/cmd/keybrake"
)

// TestMain lets `keybrake bench` start its processes from the test
// binary: with KEYBRAKE_BENCH_CHILD set, the binary is keybrake itself.
func TestMain(m *testing.M) {
	if os.Getenv("KEYBRAKE_BENCH_CHILD") == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := main.Run(ctx, os.Args[1:], main.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "keybrake:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// benchJSON mirrors the parts of the --json report the tests check.
type benchJSON struct {
	SeparateProcesses bool `json:"separate_processes"`
	Runs              int  `json:"runs"`
	Samples           []struct {
		Run      int      `json:"run"`
		Op       string   `json:"op"`
		Path     string   `json:"path"`
		Clients  int      `json:"clients"`
		Requests int      `json:"requests"`
		Errors   int      `json:"errors"`
		PerS     float64  `json:"per_s"`
		P50      float64  `json:"p50_us"`
		P99      float64  `json:"p99_us"`
		Max      float64  `json:"max_us"`
		Offered  float64  `json:"offered_per_s"`
		Seconds  float64  `json:"seconds"`
		CPU      *cpuJSON `json:"cpu"`
		Reserve  float64  `json:"reserve_us"`
	} `json:"samples"`
	Summary []struct {
		Op       string `json:"op"`
		Path     string `json:"path"`
		Clients  int    `json:"clients"`
		Runs     int    `json:"runs"`
		Errors   int    `json:"errors"`
		PerS     stat   `json:"per_s"`
		P50      stat   `json:"p50_us"`
		P99      stat   `json:"p99_us"`
		Max      stat   `json:"max_us"`
		AddedP50 *stat  `json:"added_p50_us"`
		Ratio    *stat  `json:"ratio_to_direct"`
		CPU      *struct {
			Processes []struct {
				Name       string `json:"name"`
				PerRequest stat   `json:"us_per_request"`
			} `json:"processes"`
			PerRequest stat `json:"total_us_per_request"`
			Cores      stat `json:"cores_busy"`
		} `json:"cpu"`
	} `json:"summary"`
	WorkerSamples []struct {
		Run         int      `json:"run"`
		Transport   string   `json:"transport"`
		Consumer    string   `json:"consumer"`
		Concurrency int      `json:"concurrency"`
		Events      int      `json:"events"`
		Done        int      `json:"done"`
		Errors      int      `json:"errors"`
		PerS        float64  `json:"events_per_s"`
		Seconds     float64  `json:"seconds"`
		CPU         *cpuJSON `json:"cpu"`
	} `json:"worker_samples"`
	WorkerSummary []struct {
		Transport   string `json:"transport"`
		Consumer    string `json:"consumer"`
		Concurrency int    `json:"concurrency"`
		PerS        stat   `json:"events_per_s"`
		Ratio       *stat  `json:"ratio_to_raw"`
	} `json:"worker_summary"`
	HotKeySettled string `json:"hot_key_settled_usd"`
	HotKeyCharged string `json:"hot_key_charged_usd"`
	CapCheck      *struct {
		CapUSD    int  `json:"cap_usd"`
		Succeeded int  `json:"succeeded"`
		Upstream  int  `json:"upstream_charges"`
		Overspend bool `json:"overspend"`
	} `json:"cap_check"`
	Guards *struct {
		Runs     int       `json:"runs"`
		Requests int       `json:"requests_per_run"`
		Added    []float64 `json:"added_median_us"`
	} `json:"guards"`
	Memory []struct {
		Name    string `json:"name"`
		PID     int    `json:"pid"`
		StartKB int64  `json:"start_kb"`
		WarmKB  int64  `json:"after_warmup_kb"`
		MaxKB   int64  `json:"max_kb"`
		EndKB   int64  `json:"end_kb"`
		PeakKB  int64  `json:"hwm_kb"`
		Samples []struct {
			S  float64 `json:"s"`
			KB int64   `json:"rss_kb"`
		} `json:"samples"`
	} `json:"memory"`
	Error string `json:"error"`
}

type stat struct{ Min, Median, Max float64 }

// cpuJSON is a phase's CPU times.
type cpuJSON struct {
	Processes []struct {
		Name       string  `json:"name"`
		Seconds    float64 `json:"cpu_s"`
		PerRequest float64 `json:"us_per_request"`
	} `json:"processes"`
	PerRequest float64 `json:"total_us_per_request"`
	Cores      float64 `json:"cores_busy"`
}

// names returns the processes of c, comma-separated.
func (c *cpuJSON) names() string {
	var out []string
	for _, p := range c.Processes {
		out = append(out, p.Name)
	}
	return strings.Join(out, ", ")
}

// perRequest returns the µs per request of the named process, -1 if absent.
func (c *cpuJSON) perRequest(name string) float64 {
	for _, p := range c.Processes {
		if p.Name == name {
			return p.PerRequest
		}
	}
	return -1
}

// checkCPU fails unless the phase's CPU times add up: each process's µs
// per request is its CPU seconds over the phase's requests, the total
// their sum, cores busy the CPU seconds over the phase's seconds (the
// phase's own clock starts a moment after the bench reads the CPU times,
// so cores busy may be a little lower).
func checkCPU(t *testing.T, what string, c *cpuJSON, requests int, seconds float64) {
	t.Helper()
	var sum, cpuS float64
	for _, p := range c.Processes {
		if p.Seconds < 0 || !nearRel(p.PerRequest, p.Seconds*1e6/float64(requests)) {
			t.Fatalf("%s: %s used %.3f s for %d requests: %.2f µs each", what, p.Name, p.Seconds, requests, p.PerRequest)
		}
		sum, cpuS = sum+p.PerRequest, cpuS+p.Seconds
	}
	if !nearRel(c.PerRequest, sum) {
		t.Fatalf("%s: total %.4f µs per request, the processes' sum %.4f", what, c.PerRequest, sum)
	}
	if c.Cores < 0 || c.Cores > 1.01*cpuS/seconds {
		t.Fatalf("%s: %.2f cores busy for %.3f CPU seconds in %.3f s", what, c.Cores, cpuS, seconds)
	}
}

// nearRel reports whether a and b are equal to a part in a million.
func nearRel(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(math.Abs(a), math.Abs(b)) }

// MustBench runs keybrake bench with args and a --json file, and returns
// the report.
func MustBench(t *testing.T, args ...string) (benchJSON, string) {
	t.Helper()
	t.Setenv("KEYBRAKE_BENCH_CHILD", "1")
	file := filepath.Join(t.TempDir(), "bench.json")
	env, out := testEnv(nil)
	if err := main.Run(context.Background(), append([]string{"bench", "--json", file}, args...), env); err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var rep benchJSON
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	return rep, out.String()
}

func TestBenchHTTP(t *testing.T) {
	html, prof := filepath.Join(t.TempDir(), "bench.html"), filepath.Join(t.TempDir(), "serve.prof")
	rep, out := MustBench(t, "--runs", "2", "--duration", "100ms", "--warmup", "5", "--concurrency", "1,4",
		"--ops", "get,charge,keys", "--keys", "5", "--cap-check", "5", "--html", html, "--proxy-cpuprofile", prof)
	if fi, err := os.Stat(prof); err != nil || fi.Size() == 0 {
		t.Fatalf("serve's CPU profile: %v", err)
	}
	if !rep.SeparateProcesses || rep.Runs != 2 || rep.Error != "" {
		t.Fatalf("report: processes %v, runs %d, error %q", rep.SeparateProcesses, rep.Runs, rep.Error)
	}
	if want := 2 * 3 * 2 * 3; len(rep.Samples) != want { // runs × ops × concurrencies × paths
		t.Fatalf("%d samples, want %d", len(rep.Samples), want)
	}
	for _, s := range rep.Samples {
		if s.Errors != 0 || s.Requests == 0 || s.PerS <= 0 || s.P50 <= 0 || s.P99 < s.P50 || s.Max < s.P99 {
			t.Fatalf("bad sample %+v", s)
		}
		// The store's share: every charge through keybrake reserves, before
		// it is forwarded, so within its whole latency; nothing else does.
		charge := s.Op != "get" && s.Path == "keybrake"
		if charge != (s.Reserve > 0) || s.Reserve > s.Max {
			t.Fatalf("sample %s on %s at %d clients: reserve %.0f µs, max latency %.0f µs", s.Op, s.Path, s.Clients, s.Reserve, s.Max)
		}
	}
	if len(rep.Summary) != 3*2*3 {
		t.Fatalf("%d summary rows", len(rep.Summary))
	}
	for _, r := range rep.Summary {
		if r.Runs != 2 || r.Errors != 0 || r.PerS.Min <= 0 || r.PerS.Min > r.PerS.Median || r.PerS.Median > r.PerS.Max {
			t.Fatalf("bad summary row %+v", r)
		}
		if (r.Path == "direct") != (r.Ratio == nil) || (r.Ratio != nil && r.AddedP50 == nil) {
			t.Fatalf("row %s/%s: ratio %v, added %v", r.Op, r.Path, r.Ratio, r.AddedP50)
		}
	}
	// The ratio is computed run by run against the direct path of the same run.
	var ratios []float64
	for _, s := range rep.Samples {
		if s.Op == "charge" && s.Path == "keybrake" && s.Clients == 4 {
			for _, d := range rep.Samples {
				if d.Op == s.Op && d.Path == "direct" && d.Clients == s.Clients && d.Run == s.Run {
					ratios = append(ratios, s.PerS/d.PerS)
				}
			}
		}
	}
	for _, r := range rep.Summary {
		if r.Op == "charge" && r.Path == "keybrake" && r.Clients == 4 {
			lo, hi := min(ratios[0], ratios[1]), max(ratios[0], ratios[1])
			if len(ratios) != 2 || !near(r.Ratio.Min, lo) || !near(r.Ratio.Max, hi) {
				t.Fatalf("ratio %+v, per run %v", r.Ratio, ratios)
			}
		}
	}
	if rep.HotKeySettled != rep.HotKeyCharged || rep.HotKeySettled == "0.00" {
		t.Fatalf("hot key settled $%s for $%s charged", rep.HotKeySettled, rep.HotKeyCharged)
	}
	if c := rep.CapCheck; c == nil || c.Succeeded != 5 || c.Upstream != 5 || c.Overspend {
		t.Fatalf("cap check %+v", c)
	}
	checkBenchCPU(t, rep, out)
	for _, want := range []string{"capped charge, one hot key", "spread over 5 keys", "keybrake", "bare proxy", "×direct", "reserve µs"} {
		if !strings.Contains(out, want) {
			t.Fatalf("table lacks %q:\n%s", want, out)
		}
	}
	page, err := os.ReadFile(html)
	// Three charts for each of three operations, and the memory chart.
	if err != nil || strings.Count(string(page), "<svg") != 9+1 || !strings.Contains(string(page), "</html>") {
		t.Fatalf("html: %v, %d charts", err, strings.Count(string(page), "<svg"))
	}
	if _, err := os.Stat("/proc/self/stat"); err == nil && !strings.Contains(string(page), "<h2>CPU</h2>") {
		t.Fatal("html: no CPU table")
	}
}

// checkBenchCPU checks the CPU times of TestBenchHTTP's run: every phase
// has the four processes, serve spent CPU time on every capped charge
// through keybrake, and the summary and the tables show them.
func checkBenchCPU(t *testing.T, rep benchJSON, out string) {
	t.Helper()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		for _, s := range rep.Samples {
			if s.CPU != nil {
				t.Fatalf("CPU times without /proc: %+v", s)
			}
		}
		return
	}
	// The kernel counts CPU time in 10 ms ticks, and a 100 ms phase on a
	// busy machine may see serve use less than one: serve's CPU time is
	// checked over the four phases of capped charges through keybrake.
	serve := 0.0
	for _, s := range rep.Samples {
		what := fmt.Sprintf("run %d %s on %s at %d clients", s.Run, s.Op, s.Path, s.Clients)
		if s.CPU == nil || s.CPU.names() != "stripesim, bare proxy, serve replica 1, bench" {
			t.Fatalf("%s: CPU %+v", what, s.CPU)
		}
		checkCPU(t, what, s.CPU, s.Requests, s.Seconds)
		if s.Op == "charge" && s.Path == "keybrake" {
			serve += s.CPU.perRequest("serve replica 1")
		}
	}
	if serve <= 0 {
		t.Fatal("serve spent no CPU time on the capped charges")
	}
	for _, r := range rep.Summary {
		if r.CPU == nil || len(r.CPU.Processes) != 4 || r.CPU.PerRequest.Min > r.CPU.PerRequest.Median || r.CPU.PerRequest.Median > r.CPU.PerRequest.Max {
			t.Fatalf("summary %s on %s: CPU %+v", r.Op, r.Path, r.CPU)
		}
	}
	for _, want := range []string{"CPU µs/req", "cores", "CPU per request by process", "serve replica 1"} {
		if !strings.Contains(out, want) {
			t.Fatalf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestBenchParseProcStat(t *testing.T) {
	// A line of /proc/self/stat (Linux 6.1), its command name changed to
	// one with spaces and parentheses: utime 1234, stime 567.
	line := "4010 (my (odd) proc) S 3998 4010 3998 34816 4010 4194304 1862 0 0 0 1234 567 0 0 20 0 9 0 123456 1269219328 11245 18446744073709551615 4194304 9567225 140736819541216 0 0 0 0 0 2143420159 0 0 0 17 1 0 0 0 0 0 12840960 13003176 20004864 140736819547741 140736819547786 140736819547786 140736819548131 0\n"
	if ticks, err := main.ParseProcStat([]byte(line)); err != nil || ticks != 1234+567 {
		t.Fatalf("ticks %d, %v", ticks, err)
	}
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		if _, err := main.ParseProcStat(b); err != nil {
			t.Fatalf("this process's stat %q: %v", b, err)
		}
	}
	for _, bad := range []string{"", "4010 (x S 1 2", "4010 (x) S 1 2 3", "4010 (x) S 3998 4010 3998 34816 4010 4194304 1862 0 0 0 12x 567 0", "4010 (x) S 3998 4010 3998 34816 4010 4194304 1862 0 0 0 -1 567 0"} {
		if _, err := main.ParseProcStat([]byte(bad)); err == nil {
			t.Fatalf("%q: no error", bad)
		}
	}
}

func TestParseProcStatTree(t *testing.T) {
	// A postgres backend's line: the command name holds a space and a
	// parenthesis; ppid is field 4, utime..cstime fields 14 to 17.
	line := []byte("4242 (postgres: x) S 4000 4000 4000 0 -1 4194560 100 0 0 0 120 30 7 3 20 0 1 0 555 0 0")
	ppid, own, reaped, err := main.ParseProcStatTree(line)
	if err != nil || ppid != 4000 || own != 150 || reaped != 10 {
		t.Fatalf("ppid %d, own %d, reaped %d, %v; want 4000, 150, 10", ppid, own, reaped, err)
	}
	for _, bad := range []string{"4242 postgres S 1", "4242 (p) S 4000 1 2 3 4 5 6 7 8 9 10 x 1 1 1", "4242 (p) S 1 2"} {
		if _, _, _, err := main.ParseProcStatTree([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestBenchWarmupMeetsEveryKeyOnEveryReplica(t *testing.T) {
	for _, c := range []struct{ keys, replicas, warmup, want int }{
		{1, 4, 200, 200},     // the hot key: --warmup alone
		{5, 1, 200, 200},     // fewer keys than --warmup
		{1000, 1, 200, 1000}, // every key once
		{1000, 4, 200, 1000}, // key i always meets replica i mod 4
		{1000, 3, 200, 3000}, // every key meets every replica
		{1000, 4, 0, 1000},
	} {
		if got := main.WarmupRequests(c.keys, c.replicas, c.warmup); got != c.want {
			t.Errorf("%d keys, %d replicas, --warmup %d: %d requests, want %d", c.keys, c.replicas, c.warmup, got, c.want)
		}
	}
}

func TestBenchWorker(t *testing.T) {
	rep, out := MustBench(t, "--runs", "1", "--concurrency", "4", "--ops", "worker", "--events", "40", "--cap-check", "0")
	if len(rep.WorkerSamples) != 2*3 {
		t.Fatalf("%d worker samples:\n%s", len(rep.WorkerSamples), out)
	}
	perS := map[string]float64{}
	for _, s := range rep.WorkerSamples {
		if s.Errors != 0 || s.Done != 40 || s.Events != 40 || s.PerS <= 0 || s.Concurrency != 4 {
			t.Fatalf("bad worker sample %+v", s)
		}
		perS[s.Transport+"/"+s.Consumer] = s.PerS
		if s.CPU != nil {
			what := s.Transport + " " + s.Consumer
			if !strings.Contains(s.CPU.names(), "broker "+s.Transport) || !strings.HasSuffix(s.CPU.names(), "bench") {
				t.Fatalf("%s: CPU of %s", what, s.CPU.names())
			}
			checkCPU(t, what, s.CPU, s.Done, s.Seconds)
		}
	}
	for _, r := range rep.WorkerSummary {
		if r.Consumer != "billing worker" {
			continue
		}
		want := perS[r.Transport+"/billing worker"] / perS[r.Transport+"/raw consumer"]
		if r.Ratio == nil || !near(r.Ratio.Median, want) {
			t.Fatalf("%s: ratio %+v, want %.3f from the same run", r.Transport, r.Ratio, want)
		}
	}
	if !strings.Contains(out, "nsq") || !strings.Contains(out, "jetstream") || !strings.Contains(out, "×raw") {
		t.Fatalf("table:\n%s", out)
	}
}

func TestBenchInProcess(t *testing.T) {
	rep, _ := MustBench(t, "--in-process", "--runs", "1", "--duration", "50ms", "--requests", "10", "--warmup", "2", "--concurrency", "2",
		"--ops", "get,guards", "--cap-check", "3")
	if rep.SeparateProcesses || len(rep.Samples) != 3 || rep.CapCheck == nil || rep.CapCheck.Succeeded != 3 {
		t.Fatalf("report %+v", rep)
	}
	for _, s := range rep.Samples {
		if s.Requests > 10 || s.Errors != 0 {
			t.Fatalf("--requests 10: %+v", s)
		}
		if s.CPU != nil && s.CPU.names() != "bench" {
			t.Fatalf("in process, CPU of %s", s.CPU.names())
		}
	}
	if g := rep.Guards; g == nil || g.Runs != 3 || g.Requests != 10 || len(g.Added) != 3 {
		t.Fatalf("guards %+v", g)
	}
}

func TestBenchOpenLoop(t *testing.T) {
	rep, out := MustBench(t, "--in-process", "--runs", "1", "--duration", "300ms", "--warmup", "2", "--concurrency", "4",
		"--ops", "get", "--rate", "100", "--cap-check", "0")
	for _, s := range rep.Samples {
		// 30 requests scheduled in 300 ms; every one is sent, however late.
		if s.Errors != 0 || s.Requests != 30 || s.Offered != 100 {
			t.Fatalf("sample %+v", s)
		}
	}
	if !strings.Contains(out, "open loop at 100 requests/s") {
		t.Fatalf("table:\n%s", out)
	}
}

func TestBenchFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--replicas", "2"},
		{"--store", "postgres"},
		{"--store", "mysql"},
		{"--ops", "charge,nope"},
		{"--runs", "0"},
		{"--concurrency", "0"},
		{"--in-process", "--proxy-cpuprofile", "x.prof"},
		{"--in-process", "--proxy-memprofile", "x.heap"},
		{"--worker-via", "stripe"},
		{"--rate", "-1"},
		{"--paths", "keybrake,upstream"},
		{"--sim-max-objects", "-1"},
	} {
		env, out := testEnv(nil)
		if err := main.Run(context.Background(), append([]string{"bench"}, args...), env); err == nil || !strings.Contains(err.Error(), "invalid --") {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestBenchRedactsDSN(t *testing.T) {
	got := main.RedactCommand([]string{"keybrake", "bench", "--dsn", "postgres://kb:s3cret@db:5432/kb", "--db=postgresql://u:pw@h/d", "--keys", "5"})
	if strings.Contains(got, "s3cret") || strings.Contains(got, ":pw@") || !strings.Contains(got, "postgres://kb:xxxxx@db:5432/kb") || !strings.Contains(got, "--keys 5") {
		t.Fatal(got)
	}
}

func TestBenchChildEnv(t *testing.T) {
	got := strings.Join(main.ChildEnv([]string{"PATH=/bin", "KEYBRAKE_ADMIN_ADDR=127.0.0.1:1", "STRIPE_SECRET_KEY=sk_live_x", "KEYBRAKE_BENCH_CHILD=1", "HOME=/root"}), " ")
	if got != "PATH=/bin KEYBRAKE_BENCH_CHILD=1 HOME=/root" {
		t.Fatal(got)
	}
}

// TestBenchMemory runs exactly --requests mixed requests against serve
// alone and checks the memory report of every process.
func TestBenchMemory(t *testing.T) {
	html := filepath.Join(t.TempDir(), "bench.html")
	heap := filepath.Join(t.TempDir(), "serve.heap")
	rep, out := MustBench(t, "--ops", "mixed", "--paths", "keybrake", "--runs", "1", "--concurrency", "4", "--requests", "60",
		"--duration", "1m", "--warmup", "4", "--cap-check", "0", "--sim-max-objects", "10", "--html", html, "--proxy-memprofile", heap)
	if fi, err := os.Stat(heap); err != nil || fi.Size() == 0 {
		t.Fatalf("serve's heap profile: %v", err)
	}
	if len(rep.Samples) != 1 || rep.Samples[0].Path != "keybrake" || rep.Samples[0].Requests != 60 || rep.Samples[0].Errors != 0 {
		t.Fatalf("samples %+v", rep.Samples)
	}
	// Half the 4 + 60 (warm-up and phase) are charges, every one on the hot key: $32.00.
	if rep.HotKeyCharged != "32.00" || rep.HotKeySettled != "32.00" {
		t.Fatalf("hot key settled $%s for $%s charged", rep.HotKeySettled, rep.HotKeyCharged)
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc: nothing to sample")
	}
	var names []string
	for _, m := range rep.Memory {
		names = append(names, m.Name)
		if m.PID <= 0 || m.StartKB <= 0 || m.WarmKB <= 0 || m.EndKB <= 0 || m.MaxKB < m.StartKB || m.MaxKB < m.EndKB || m.PeakKB < m.MaxKB || len(m.Samples) < 3 {
			t.Fatalf("memory of %s: %+v", m.Name, m)
		}
	}
	if got := strings.Join(names, ", "); got != "bench (load generator), stripesim, serve replica 1" {
		t.Fatalf("processes watched: %s (the bare proxy is not started without its path)", got)
	}
	if !strings.Contains(out, "memory (RSS in MiB") || !strings.Contains(out, "serve replica 1") {
		t.Fatalf("table:\n%s", out)
	}
	page, err := os.ReadFile(html)
	if err != nil || !strings.Contains(string(page), "resident memory over the run") || strings.Count(string(page), "<polyline") != 3 {
		t.Fatalf("html: %v\n%s", err, page)
	}
}

func TestBenchParseProcStatus(t *testing.T) {
	rss, hwm, err := main.ParseProcStatus([]byte("Name:\tkeybrake\nVmPeak:\t 2000000 kB\nVmHWM:\t  104448 kB\nVmRSS:\t   98304 kB\nThreads:\t9\n"))
	if err != nil || rss != 98304 || hwm != 104448 {
		t.Fatalf("rss %d, hwm %d, %v", rss, hwm, err)
	}
	for _, bad := range []string{"Name:\tx\n", "VmRSS:\t12 MB\n", "VmRSS:\tlots kB\n", "VmRSS:\t1 2 kB\n"} {
		if _, _, err := main.ParseProcStatus([]byte(bad)); err == nil {
			t.Fatalf("%q: no error", bad)
		}
	}
}

// TestServeMemProfileBadPath: serve refuses to start, before it opens the
// store, when --memprofile cannot be created.
func TestServeMemProfileBadPath(t *testing.T) {
	db := filepath.Join(t.TempDir(), "never.db")
	env, out := testEnv(map[string]string{"STRIPE_SECRET_KEY": "sk_test_x"})
	err := main.Run(context.Background(), []string{"serve", "--db", db, "--memprofile", filepath.Join(t.TempDir(), "missing", "x.heap")}, env)
	if err == nil || !strings.Contains(err.Error(), "invalid --memprofile") {
		t.Fatalf("err %v\n%s", err, out)
	}
	if _, err := os.Stat(db); err == nil {
		t.Fatal("the store was opened")
	}
}

// TestBenchCPUMeter: each process's CPU time over the phase is divided by
// the requests, the total is their sum, and a process unreadable at
// either end (exited, or started during the phase) is left out.
func TestBenchCPUMeter(t *testing.T) {
	calls := map[int]int{}
	read := func(pid int) (time.Duration, error) {
		calls[pid]++
		if pid == 3 && calls[pid] > 1 { // exits during the phase
			return 0, errors.New("no such process")
		}
		return time.Duration(calls[pid]*pid) * 10 * time.Millisecond, nil // pid × 10 ms a phase
	}
	c := main.MeterCPU(read, []string{"stripesim", "gone", "serve replica 1"}, "broker nsq", 1000)
	if c == nil {
		t.Fatal("no CPU times")
	}
	var names []string
	for _, p := range c.Processes {
		names = append(names, fmt.Sprintf("%s %.0f", p.Name, p.PerRequest))
	}
	// stripesim (PID 2): 20 ms over 1000 requests, 20 µs each; serve (4): 40; bench (1): 10.
	if got := strings.Join(names, ", "); got != "stripesim 20, serve replica 1 40, bench 10" || !nearRel(c.PerRequest, 70) || c.Cores <= 0 {
		t.Fatalf("processes %s, total %.2f µs, %.2f cores", got, c.PerRequest, c.Cores)
	}
	if main.MeterCPU(read, nil, "", 0) != nil {
		t.Fatal("CPU times for no requests")
	}
	none := func(int) (time.Duration, error) { return 0, errors.New("no /proc") }
	if main.MeterCPU(none, []string{"stripesim"}, "", 10) != nil {
		t.Fatal("CPU times without /proc")
	}
}
