package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

// benchOps are the measurements `keybrake bench --ops` can run, in the
// order they run.
var benchOps = []string{"get", "charge", "keys", "mixed", "worker-nsq", "worker-jetstream", "guards"}

// benchConfig is the configuration of `keybrake bench`.
type benchConfig struct {
	DB              string
	Replicas        int
	Requests        int // caps the requests of one phase; 0: --duration alone
	Duration        time.Duration
	Warmup          int
	Rate            float64 // open loop: requests per second per phase; 0: closed loop
	Runs            int
	Concurrency     []int
	Ops             map[string]bool
	Paths           map[string]bool // direct, bare proxy, keybrake: the paths the HTTP phases measure
	Keys            int
	Events          int
	WorkerVia       string // direct or keybrake: where the worker phases charge
	InProcess       bool
	CapCheck        int
	JSONFile        string
	HTMLFile        string
	ProxyProfile    string
	ProxyMemProfile string           // serve --memprofile of the first replica
	ServeExe        string           // the program the replicas run; empty: this one
	SimMaxObjects   int              // the simulator's --max-objects: 0 keeps every object
	Args            []string         // the command line, for the report
	Now             func() time.Time // the proxies' clock; default time.Now (bench_growth.go moves it)
}

// httpOps returns the HTTP measurements of c, in order.
func (c benchConfig) httpOps() []string {
	var out []string
	for _, o := range []string{"get", "charge", "keys", "mixed"} {
		if c.Ops[o] {
			out = append(out, o)
		}
	}
	return out
}

const benchHelp = `Measures keybrake against the Stripe simulator called directly and through a
bare httputil.ReverseProxy, in the same run, and prints keybrake's cost as
differences and ratios against those baselines.

By default every part runs in a process of its own, started from this
executable on 127.0.0.1 and stopped at the end: the simulator (keybrake
stripesim), the bare reverse proxy, and --replicas keybrake serve processes
over a temp SQLite file or the PostgreSQL of --db. The bench process is the
load generator. --in-process runs them all in the bench process instead.

Each run measures every --ops operation at every --concurrency on every path
(direct, bare proxy, keybrake; with --replicas > 1 also keybrake through its
first replica alone), after a warm-up of each path; the paths are
interleaved and their order rotates from run to run. --runs runs; the table
shows min / median / max across runs of the throughput, the latency
percentiles (p50, p99, max) and keybrake's added p50 and throughput ratio,
each computed against the direct path of the same run. By default the clients
run a closed loop (throughput at saturation); --rate runs an open loop at a
fixed rate, for tail latency below saturation: at 64 closed-loop clients the
mean latency is 64 / throughput whatever the proxy does (Little's law), so
  keybrake bench --ops charge --concurrency 64 --rate 500 --cap-check 0
measures p99 and max per path at 500 charges/s offered over up to 64
connections.

Operations (--ops):
  get               GET /v1/customers/{id}: a passthrough read
  charge            POST /v1/charges of $1.00 on one capped key (a hot key)
  keys              the same charge spread over --keys capped keys
  mixed             get and charge alternating, request by request (the
                    charges on the hot key)
  worker-nsq        the billing worker (keybrake worker's code: ledger claim,
                    Stripe call, outcome) against a raw go-nsq consumer making
                    the same Stripe call and an ack-only consumer, on a real
                    nsqd (keybrake broker), --events events each, at every
                    --concurrency, direct to the simulator (--worker-via
                    keybrake: through keybrake); events/s and the worker/raw
                    ratio of the same run
  worker-jetstream  the same on a real nats-server with JetStream
  worker            both worker-nsq and worker-jetstream
  guards            a capped charge on a key with all four guards against the
                    same key without, interleaved, 3 runs of --requests (or
                    2000) charges

--paths limits the paths measured. With --requests N each phase stops after
exactly N requests (give a --duration long enough), so
  keybrake bench --ops mixed --paths keybrake --runs 1 --concurrency 64 \
    --requests 1000000 --duration 2h --cap-check 0 --sim-max-objects 10000
sends exactly 1,000,000 requests to serve, half GETs and half charges.

Memory: in every run the bench samples the resident set size (VmRSS, and
the kernel's peak VmHWM, from /proc/PID/status) of itself and of every
process it started once a second, and reports for each its RSS at the start,
after the first warm-up, at the end and the largest sampled, in the table,
the JSON ("memory", with every sample) and the HTML (a chart over time).

CPU: on Linux the bench reads the CPU time (user + system, from
/proc/PID/stat) of itself and of every process it started just before and
just after every phase, and reports each process's CPU microseconds per
request (per event in worker phases), their sum ("CPU µs/req") and cores
busy (the sum in CPU seconds over the phase's wall seconds), in the table,
a per-process table and the JSON ("cpu" in every sample and summary row).
Cores busy near the machine's core count means the machine is the limit:
throughput can then be at most cores / CPU per request. --in-process
reports the bench process alone. With a PostgreSQL store on this machine
the server counts as one process, "postgres": the postmaster, every process
it started and those it reaped during the phase.

Store: around every keybrake phase the bench reads each serve's
keybrake_reserve_duration_seconds (GET /metrics) and reports "reserve µs",
the mean time a priced request spent on the store before it was forwarded
(its reservation checked and committed, queueing for the writer included):
the store's share of the added latency.

Outputs: the table on stdout, --json FILE (every run and the summary), --html
FILE (charts and tables in one page). Numbers from a shared machine are
noisy: compare the ratios of one run, across runs. docs/performance.md has
the method and the commands of the published numbers.`

func runBench(ctx context.Context, args []string, env Env) error {
	fs := flagSet("bench", benchHelp, env)
	c := benchConfig{Args: append([]string{"keybrake", "bench"}, args...)}
	var conc, store, dsn string
	fs.StringVar(&c.DB, "db", envDefault(env, "KEYBRAKE_BENCH_DB", ""), "store: empty for a SQLite file in a temp dir, or a postgres:// DSN (KEYBRAKE_BENCH_DB)")
	fs.StringVar(&store, "store", "", "sqlite or postgres; postgres needs --dsn (or a postgres:// --db)")
	fs.StringVar(&dsn, "dsn", "", "--store postgres: the PostgreSQL DSN, same as --db")
	fs.IntVar(&c.Replicas, "replicas", 1, "keybrake serve replicas sharing the store, the load spread round-robin (PostgreSQL only beyond 1)")
	fs.IntVar(&c.Requests, "requests", 0, "stop each phase after this many requests even before --duration; 0: --duration alone (guards: charges per run, default 2000)")
	fs.DurationVar(&c.Duration, "duration", 3*time.Second, "duration of each phase (one operation, one path, one concurrency, one run)")
	fs.Float64Var(&c.Rate, "rate", 0, "open loop: schedule this many requests per second in each HTTP phase, taken by whichever client is free, latency counted from each request's scheduled time, or from its release if the generator's own timer woke late (for tail latency below saturation); 0: closed loop, each client sends when its last request is answered (throughput at saturation)")
	fs.IntVar(&c.Warmup, "warmup", 200, "requests sent on every path before each run's phases of an operation (keys: at least enough that every replica meets each of its keys first)")
	fs.IntVar(&c.Runs, "runs", 3, "times every phase is repeated, interleaved; the summary is min / median / max across runs")
	fs.StringVar(&conc, "concurrency", "1,64", "comma-separated client counts (worker-*: consumer concurrency); every phase runs at each")
	paths := fs.String("paths", "direct,bare,keybrake", "the paths the HTTP phases measure, comma-separated: direct (the simulator), bare (the bare proxy), keybrake; the ratios need direct")
	ops := fs.String("ops", "get,charge", "what to measure, comma-separated: "+strings.Join(benchOps, ", ")+", worker (both brokers)")
	fs.IntVar(&c.Keys, "keys", 1000, "keys: the number of capped keys the charges are spread over")
	fs.IntVar(&c.Events, "events", 2000, "worker-*: billing events each consumer drains per phase")
	fs.StringVar(&c.WorkerVia, "worker-via", "direct", "worker-*: where both consumers charge: direct (the simulator, the worker's own cost) or keybrake (through the first replica with a capped vault key, the production path)")
	fs.BoolVar(&c.InProcess, "in-process", false, "run the simulator, the bare proxy and keybrake in the bench process instead of processes of their own (faster to start, less faithful)")
	fs.IntVar(&c.CapCheck, "cap-check", 500, "after measuring, 64 clients race for a key capped at this many dollars ($1.00 charges): exactly that many must pass; 0 skips")
	fs.StringVar(&c.JSONFile, "json", "", "also write the report (every run, the summary) as JSON to this file, - for stdout")
	fs.StringVar(&c.HTMLFile, "html", "", "also write an HTML report with SVG charts to this file")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the bench process to this file (with --in-process: of everything)")
	fs.IntVar(&c.SimMaxObjects, "sim-max-objects", 0, "the simulator keeps about this many charges (and other objects) each, forgetting the oldest finished ones as serve's built-in simulator does, so its memory stays bounded over a long run (stripesim --max-objects); 0 keeps everything")
	fs.StringVar(&c.ProxyProfile, "proxy-cpuprofile", "", "write a CPU profile of the first keybrake serve process to this file (serve --cpuprofile)")
	fs.StringVar(&c.ServeExe, "serve-exe", "", "run the keybrake serve replicas from this keybrake executable instead of this one (an A/B of two builds under the same load generator); not with --in-process")
	fs.StringVar(&c.ProxyMemProfile, "proxy-memprofile", "", "write a heap profile of the first keybrake serve process to this file when it stops (serve --memprofile), for where its memory goes")
	bareUpstream := fs.String("bare-proxy", "", "internal: serve only the bench's bare reverse proxy to this upstream on --bare-addr (how bench starts its baseline process)")
	bareAddr := fs.String("bare-addr", "127.0.0.1:0", "internal: the address of --bare-proxy")
	var g growthConfig
	g.flags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench takes no arguments, got %q (flags start with --)", fs.Args())
	}
	if *bareUpstream != "" {
		return runBareProxy(ctx, *bareUpstream, *bareAddr)
	}
	if err := c.parse(conc, *ops, store, dsn); err != nil {
		return err
	}
	if err := c.parsePaths(*paths); err != nil {
		return err
	}
	if err := g.validate(); err != nil {
		return err
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if g.PerDay > 0 {
		return runGrowth(ctx, c, g, env)
	}
	rep, err := runBenchReport(ctx, c, env)
	if rep != nil {
		table := env.Stdout
		if c.JSONFile == "-" {
			table = env.Stderr // stdout is the JSON's alone
		}
		rep.print(table)
		if werr := rep.write(c, env); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return err
	}
	if fails := rep.Failures(); len(fails) > 0 {
		return fmt.Errorf("the bench saw failures:\n  %s", strings.Join(fails, "\n  "))
	}
	return nil
}

// parse validates the flags and fills the parsed fields, naming the first
// bad flag.
func (c *benchConfig) parse(conc, ops, store, dsn string) error {
	for _, s := range strings.Split(conc, ",") {
		var n int
		if _, err := fmt.Sscanf(strings.TrimSpace(s), "%d", &n); err != nil || n < 1 || n > 1024 {
			return fmt.Errorf("invalid --concurrency %q: want numbers from 1 to 1024", conc)
		}
		c.Concurrency = append(c.Concurrency, n)
	}
	c.Ops = map[string]bool{}
	for _, o := range strings.Split(ops, ",") {
		o = strings.TrimSpace(o)
		switch {
		case o == "worker":
			c.Ops["worker-nsq"], c.Ops["worker-jetstream"] = true, true
		case slices.Contains(benchOps, o):
			c.Ops[o] = true
		default:
			return fmt.Errorf("invalid --ops %q: want a list of %s, worker", ops, strings.Join(benchOps, ", "))
		}
	}
	switch store {
	case "", "sqlite":
		if dsn != "" {
			return fmt.Errorf("invalid --dsn: only with --store postgres")
		}
	case "postgres":
		if dsn == "" && !isPostgres(c.DB) {
			return fmt.Errorf("invalid --store postgres: needs --dsn postgres://…")
		}
		if dsn != "" {
			c.DB = dsn
		}
	default:
		return fmt.Errorf("invalid --store %q: want sqlite or postgres", store)
	}
	if store == "sqlite" && isPostgres(c.DB) {
		return fmt.Errorf("invalid --store sqlite with a postgres:// --db")
	}
	switch {
	case c.Replicas < 1 || (c.Replicas > 1 && !isPostgres(c.DB)):
		return fmt.Errorf("invalid --replicas %d: several replicas need --store postgres", c.Replicas)
	case c.Requests < 0 || c.Duration <= 0:
		return fmt.Errorf("invalid --requests or --duration: want a non-negative count and a positive duration")
	case c.Runs < 1 || c.Runs > 100:
		return fmt.Errorf("invalid --runs %d: want 1 to 100", c.Runs)
	case c.Rate < 0 || c.Rate > 1e6:
		return fmt.Errorf("invalid --rate %v: want 0 (closed loop) or requests per second up to 1000000", c.Rate)
	case c.SimMaxObjects < 0:
		return fmt.Errorf("invalid --sim-max-objects %d: want 0 (keep everything) or more", c.SimMaxObjects)
	case c.Warmup < 0:
		return fmt.Errorf("invalid --warmup %d: want 0 or more", c.Warmup)
	case c.Keys < 1 || c.Keys > 100000:
		return fmt.Errorf("invalid --keys %d: want 1 to 100000", c.Keys)
	case c.Events < 1:
		return fmt.Errorf("invalid --events %d: want 1 or more", c.Events)
	case c.WorkerVia != "direct" && c.WorkerVia != "keybrake":
		return fmt.Errorf("invalid --worker-via %q: want direct or keybrake", c.WorkerVia)
	case c.ServeExe != "" && c.InProcess:
		return fmt.Errorf("invalid --serve-exe: the replicas run in this process with --in-process")
	case (c.ProxyProfile != "" || c.ProxyMemProfile != "") && c.InProcess:
		return fmt.Errorf("invalid --proxy-cpuprofile or --proxy-memprofile: the proxy runs in the bench process with --in-process; use --cpuprofile")
	}
	return nil
}

// parsePaths validates --paths.
func (c *benchConfig) parsePaths(paths string) error {
	c.Paths = map[string]bool{}
	for _, p := range strings.Split(paths, ",") {
		switch p = strings.TrimSpace(p); p {
		case "direct", "keybrake":
			c.Paths[p] = true
		case "bare":
			c.Paths[pathBare] = true
		default:
			return fmt.Errorf("invalid --paths %q: want a list of direct, bare, keybrake", paths)
		}
	}
	return nil
}

// measures reports whether the HTTP phases measure path; every path when
// --paths was not parsed (tests building a config by hand).
func (c benchConfig) measures(path string) bool {
	if path == pathReplica1 {
		path = pathKeybrake
	}
	return c.Paths == nil || c.Paths[path]
}

func isPostgres(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}
