package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/stripe"
	"github.com/keybrake/keybrake/stripesim"
)

// benchConfig is the configuration of `keybrake bench`.
type benchConfig struct {
	DB          string
	Replicas    int
	Requests    int
	Duration    time.Duration
	Concurrency []int
	JSON        bool
	Ops         map[string]bool
	CapCheck    int
	Keys        int              // proxied charges spread over this many keys (bench_keys.go)
	SyncSettle  bool             // settle before answering, as serve --sync-settle
	Now         func() time.Time // the proxies' clock; default time.Now (bench_growth.go moves it)
}

func runBench(ctx context.Context, args []string, env Env) error {
	fs := flagSet("bench", `Measures the Stripe simulator directly and through keybrake in the same run,
on loopback, and prints the proxy's cost as differences and ratios against
that baseline: added latency (median, p99) of a GET passthrough and of a
capped, durably reserved charge, and throughput at 1 and 64 concurrent
clients. Numbers from one run on a shared machine are noisy: compare ratios,
not absolute values, and run it twice.`, env)
	var c benchConfig
	var conc string
	fs.StringVar(&c.DB, "db", envDefault(env, "KEYBRAKE_BENCH_DB", ""), "store: empty for a SQLite file in a temp dir, or a postgres:// DSN (KEYBRAKE_BENCH_DB)")
	fs.IntVar(&c.Replicas, "replicas", 1, "proxy replicas sharing the store (PostgreSQL only beyond 1)")
	fs.IntVar(&c.Requests, "requests", 2000, "requests per latency measurement")
	fs.DurationVar(&c.Duration, "duration", 3*time.Second, "duration of each throughput measurement")
	fs.StringVar(&conc, "concurrency", "1,64", "comma-separated client counts for the throughput measurements")
	fs.BoolVar(&c.JSON, "json", false, "print the results as JSON")
	ops := fs.String("ops", "get,charge", "what to measure, comma-separated: get (a passthrough read), charge (a capped charge), guards (a capped charge on a key with all four guards vs the same key without, 3 runs)")
	fs.IntVar(&c.CapCheck, "cap-check", 500, "after measuring, 64 clients race for a key capped at this many dollars ($1.00 charges): exactly that many must pass; 0 skips")
	fs.IntVar(&c.Keys, "keys", 1, "spread the proxied requests over this many vault keys (1 is one hot key)")
	fs.BoolVar(&c.SyncSettle, "sync-settle", false, "settle every charge before answering it, as serve --sync-settle (the default answers first)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	var g growthConfig
	g.flags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench takes no arguments, got %q (flags start with --)", fs.Args())
	}
	if err := g.validate(); err != nil {
		return err
	}
	for _, s := range strings.Split(conc, ",") {
		var n int
		if _, err := fmt.Sscanf(strings.TrimSpace(s), "%d", &n); err != nil || n < 1 || n > 1024 {
			return fmt.Errorf("invalid --concurrency %q: want numbers from 1 to 1024", conc)
		}
		c.Concurrency = append(c.Concurrency, n)
	}
	c.Ops = map[string]bool{}
	for _, o := range strings.Split(*ops, ",") {
		if o = strings.TrimSpace(o); o != "get" && o != "charge" && o != "guards" {
			return fmt.Errorf("invalid --ops %q: want a list of get, charge, guards", *ops)
		}
		c.Ops[o] = true
	}
	if c.Replicas < 1 || (c.Replicas > 1 && !strings.HasPrefix(c.DB, "postgres")) {
		return fmt.Errorf("invalid --replicas %d: several replicas need a postgres:// --db", c.Replicas)
	}
	if c.Requests < 10 || c.Duration <= 0 {
		return fmt.Errorf("invalid --requests or --duration")
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
	b, err := newBench(ctx, c)
	if err != nil {
		return err
	}
	defer b.close()
	res, err := b.run(ctx, env.Stderr)
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	res.print(env.Stdout)
	return nil
}

// bench holds a simulator, the proxies in front of it, and a vault key.
type bench struct {
	cfg        benchConfig
	sim        *http.Server
	simHandler *stripesim.Server
	simURL     string
	stores     []keybrake.Store
	proxies    []*khttp.Server
	vaultKey   string
	vaultKeys  []string // --keys beyond 1: the keys requests spread over
	keyIDs     []string
	keyID      string
	client     *http.Client
	dir        string
	customer   string
	bare       *http.Server // a bare httputil.ReverseProxy to the simulator: the floor of any Go proxy
	bareURL    string
}

func newBench(ctx context.Context, cfg benchConfig) (*bench, error) {
	b := &bench{cfg: cfg}
	sim, err := stripesim.New(stripesim.Options{})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b.sim, b.simHandler = &http.Server{Handler: sim}, sim
	go b.sim.Serve(ln)
	b.simURL = "http://" + ln.Addr().String()
	// The floor: a reverse proxy with no logic at all, on the same machine,
	// so the table separates keybrake's own cost from the cost of a hop.
	bareLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	simU, _ := url.Parse(b.simURL)
	rp := httputil.NewSingleHostReverseProxy(simU)
	rp.Transport = &http.Transport{MaxIdleConns: 2048, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute}
	b.bare = &http.Server{Handler: rp}
	go b.bare.Serve(bareLn)
	b.bareURL = "http://" + bareLn.Addr().String()
	b.client = &http.Client{Transport: &http.Transport{MaxIdleConns: 2048, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute}, Timeout: 30 * time.Second}

	db := cfg.DB
	if db == "" {
		if b.dir, err = os.MkdirTemp("", "keybrake-bench-"); err != nil {
			return nil, err
		}
		db = filepath.Join(b.dir, "bench.db")
	}
	upstream, _ := url.Parse(b.simURL)
	for i := 0; i < cfg.Replicas; i++ {
		store, err := openStore(ctx, db)
		if err != nil {
			b.close()
			return nil, err
		}
		b.stores = append(b.stores, store)
		s := khttp.NewServer()
		s.Addr = "127.0.0.1:0"
		s.Store = store
		s.Upstream = upstream
		s.UpstreamKey = simulatorSecret
		s.AdminToken = "kbadm_bench"
		s.Logger = slog.New(slog.DiscardHandler)
		s.Rates = stripe.Rates{}
		s.SettleAfterAnswer = !cfg.SyncSettle
		if cfg.Now != nil {
			s.Now = cfg.Now
		}
		if err := s.Open(); err != nil {
			b.close()
			return nil, err
		}
		b.proxies = append(b.proxies, s)
	}
	// A key capped high enough never to refuse during the run, so every
	// charge takes the full reserve-forward-settle path.
	body := `{"label":"bench","total_usd_cap":1000000000,"daily_usd_cap":1000000000,"per_request_usd_cap":100}`
	req, _ := http.NewRequest("POST", b.proxies[0].URL()+"/vault/keys", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer kbadm_bench")
	var key struct {
		ID       string `json:"id"`
		VaultKey string `json:"vault_key"`
	}
	if err := b.doJSON(req, &key); err != nil {
		b.close()
		return nil, fmt.Errorf("create bench key: %w", err)
	}
	b.vaultKey, b.keyID = key.VaultKey, key.ID
	if err := b.spreadKeys(body); err != nil {
		b.close()
		return nil, err
	}
	var cus struct {
		ID string `json:"id"`
	}
	req, _ = http.NewRequest("POST", b.simURL+"/v1/customers", strings.NewReader("email=bench%40example.com"))
	req.Header.Set("Authorization", "Bearer "+simulatorSecret)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if err := b.doJSON(req, &cus); err != nil {
		b.close()
		return nil, fmt.Errorf("create bench customer: %w", err)
	}
	b.customer = cus.ID
	return b, nil
}

func (b *bench) doJSON(req *http.Request, v any) error {
	resp, err := b.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, body)
	}
	return json.Unmarshal(body, v)
}

func (b *bench) close() {
	for _, p := range b.proxies {
		p.Close()
	}
	for _, s := range b.stores {
		s.Close()
	}
	if b.sim != nil {
		b.sim.Close()
	}
	if b.bare != nil {
		b.bare.Close()
	}
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// target is where a measurement sends its requests.
type target struct {
	name  string
	bases []string // round-robin across replicas
	key   string
	keys  []string // when set, requests spread over these keys instead
}

// pick returns the key of request i of client c.
func (t target) pick(c int, i int64) string {
	if len(t.keys) == 0 {
		return t.key
	}
	return t.keys[(int64(c)*7919+i)%int64(len(t.keys))]
}

// op builds one request against a base URL.
type op func(base, key string, i int64) *http.Request

func (b *bench) getOp() op {
	return func(base, key string, i int64) *http.Request {
		req, _ := http.NewRequest("GET", base+"/v1/customers/"+b.customer, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		return req
	}
}

func chargeOp(base, key string, i int64) *http.Request {
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

// latency runs n sequential requests and returns the sorted durations.
func (b *bench) latency(t target, o op, n int) ([]time.Duration, error) {
	d := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		req := o(t.bases[i%len(t.bases)], t.pick(0, int64(i)), int64(i))
		start := time.Now()
		if err := b.send(req); err != nil {
			return nil, err
		}
		d = append(d, time.Since(start))
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d, nil
}

// load is what one throughput phase measured: requests per second and the
// latency of every request, sorted.
type load struct {
	rate float64
	lat  []time.Duration
}

// throughput runs clients concurrent loops for the duration and returns
// the rate and every request's latency.
func (b *bench) throughput(t target, o op, clients int, dur time.Duration) (load, error) {
	var firstErr atomic.Value
	deadline := time.Now().Add(dur)
	lats := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := int64(0); time.Now().Before(deadline); i++ {
				req := o(t.bases[(c+int(i))%len(t.bases)], t.pick(c, i), i)
				t0 := time.Now()
				if err := b.send(req); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				lats[c] = append(lats[c], time.Since(t0))
			}
		}(c)
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return load{}, err
	}
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	return load{rate: float64(len(all)) / time.Since(start).Seconds(), lat: all}, nil
}

// BenchResult is the output of `keybrake bench`.
type BenchResult struct {
	Store      string             `json:"store"`
	Replicas   int                `json:"replicas"`
	Keys       int                `json:"keys"`
	SyncSettle bool               `json:"sync_settle"`
	Latency    []LatencyRow       `json:"latency"`
	Throughput []ThroughputRow    `json:"throughput"`
	Spend      string             `json:"settled_usd"`
	CapCheck   *CapCheckResult    `json:"cap_check,omitempty"`
	Expected   string             `json:"expected_usd"`
	Guards     *GuardCost         `json:"guards,omitempty"`
	Upstream   map[string]float64 `json:"-"`
}

// LatencyRow compares one operation's latency direct and through keybrake.
type LatencyRow struct {
	Operation    string  `json:"operation"`
	DirectMedian float64 `json:"direct_median_us"`
	ProxyMedian  float64 `json:"proxy_median_us"`
	AddedMedian  float64 `json:"added_median_us"`
	DirectP99    float64 `json:"direct_p99_us"`
	ProxyP99     float64 `json:"proxy_p99_us"`
	AddedP99     float64 `json:"added_p99_us"`
	// BareMedian is the same request through a bare httputil.ReverseProxy
	// (no logic): BareMedian - DirectMedian is what any Go proxy's hop adds.
	BareMedian float64 `json:"bare_proxy_median_us"`
}

// ThroughputRow compares one operation's throughput direct and through keybrake.
type ThroughputRow struct {
	Operation string  `json:"operation"`
	Clients   int     `json:"clients"`
	Direct    float64 `json:"direct_per_s"`
	Proxy     float64 `json:"proxy_per_s"`
	Ratio     float64 `json:"ratio"`
	// Bare is the throughput through a bare httputil.ReverseProxy.
	Bare float64 `json:"bare_proxy_per_s"`
	// Latency under this load, in microseconds: direct and through keybrake.
	DirectP50 float64 `json:"direct_p50_us"`
	DirectP99 float64 `json:"direct_p99_us"`
	ProxyP50  float64 `json:"proxy_p50_us"`
	ProxyP99  float64 `json:"proxy_p99_us"`
	ProxyMax  float64 `json:"proxy_max_us"`
}

func pct(d []time.Duration, p float64) float64 {
	i := int(float64(len(d)-1) * p)
	return float64(d[i].Microseconds())
}

func (b *bench) run(ctx context.Context, progress io.Writer) (*BenchResult, error) {
	direct := target{"direct", []string{b.simURL}, simulatorSecret, nil}
	var bases []string
	for _, p := range b.proxies {
		bases = append(bases, p.URL())
	}
	proxied := target{"keybrake", bases, b.vaultKey, b.vaultKeys}
	bare := target{"bare proxy", []string{b.bareURL}, simulatorSecret, nil}
	res := &BenchResult{Store: storeKind(b.cfg.DB), Replicas: b.cfg.Replicas, Keys: b.cfg.Keys, SyncSettle: b.cfg.SyncSettle}
	if b.cfg.DB == "" {
		res.Store = "sqlite (temp file)"
	}
	var charges int64
	// Warm up connections and caches on both paths.
	for _, t := range []target{direct, proxied} {
		if _, err := b.latency(t, b.getOp(), 50); err != nil {
			return nil, err
		}
	}
	for _, m := range []struct {
		name string
		o    op
		kind string
	}{{"GET passthrough (customers.retrieve)", b.getOp(), "get"}, {"capped charge (charges.create)", chargeOp, "charge"}} {
		if !b.cfg.Ops[m.kind] {
			continue
		}
		fmt.Fprintf(progress, "bench: latency of %s, %d requests each way…\n", m.name, b.cfg.Requests)
		dd, err := b.latency(direct, m.o, b.cfg.Requests)
		if err != nil {
			return nil, err
		}
		pd, err := b.latency(proxied, m.o, b.cfg.Requests)
		if err != nil {
			return nil, err
		}
		bd, err := b.latency(bare, m.o, b.cfg.Requests)
		if err != nil {
			return nil, err
		}
		if strings.Contains(m.name, "charge") {
			charges += int64(b.cfg.Requests)
		}
		res.Latency = append(res.Latency, LatencyRow{
			Operation: m.name, DirectMedian: pct(dd, 0.5), ProxyMedian: pct(pd, 0.5), AddedMedian: pct(pd, 0.5) - pct(dd, 0.5),
			DirectP99: pct(dd, 0.99), ProxyP99: pct(pd, 0.99), AddedP99: pct(pd, 0.99) - pct(dd, 0.99),
			BareMedian: pct(bd, 0.5),
		})
	}
	for _, m := range []struct {
		name string
		o    op
		kind string
	}{{"GET passthrough", b.getOp(), "get"}, {"capped charge", chargeOp, "charge"}} {
		if !b.cfg.Ops[m.kind] {
			continue
		}
		for _, n := range b.cfg.Concurrency {
			fmt.Fprintf(progress, "bench: throughput of %s at %d clients, %s each way…\n", m.name, n, b.cfg.Duration)
			dr, err := b.throughput(direct, m.o, n, b.cfg.Duration)
			if err != nil {
				return nil, err
			}
			pr, err := b.throughput(proxied, m.o, n, b.cfg.Duration)
			if err != nil {
				return nil, err
			}
			br, err := b.throughput(bare, m.o, n, b.cfg.Duration)
			if err != nil {
				return nil, err
			}
			if m.name == "capped charge" {
				charges += int64(len(pr.lat))
			}
			res.Throughput = append(res.Throughput, ThroughputRow{Operation: m.name, Clients: n,
				Direct: dr.rate, Proxy: pr.rate, Ratio: pr.rate / dr.rate, Bare: br.rate,
				DirectP50: pct(dr.lat, 0.5), DirectP99: pct(dr.lat, 0.99),
				ProxyP50: pct(pr.lat, 0.5), ProxyP99: pct(pr.lat, 0.99), ProxyMax: pct(pr.lat, 1)})
		}
	}
	// Zero overspend: the store's settled spend equals the charges the
	// proxy forwarded, to the micro-dollar.
	total, err := b.benchSpend(ctx)
	if err != nil {
		return nil, err
	}
	res.Spend = total.String()
	if b.cfg.CapCheck > 0 {
		fmt.Fprintf(progress, "bench: cap check: 64 clients race for a key capped at $%d…\n", b.cfg.CapCheck)
		cc, err := b.capCheck(ctx, bases, b.cfg.CapCheck)
		if err != nil {
			return nil, err
		}
		res.CapCheck = cc
	}
	if b.cfg.Ops["guards"] {
		if res.Guards, err = b.guardCost(ctx, bases, progress); err != nil {
			return nil, err
		}
	}
	return res, nil
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
// simulator's new charges must both equal the cap.
func (b *bench) capCheck(ctx context.Context, bases []string, capUSD int) (*CapCheckResult, error) {
	body := fmt.Sprintf(`{"label":"bench-cap-check","total_usd_cap":%d}`, capUSD)
	req, _ := http.NewRequest("POST", b.proxies[0].URL()+"/vault/keys", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer kbadm_bench")
	var key struct {
		ID       string `json:"id"`
		VaultKey string `json:"vault_key"`
	}
	if err := b.doJSON(req, &key); err != nil {
		return nil, err
	}
	before := b.simCharges()
	var ok, refused, other atomic.Int64
	var wg sync.WaitGroup
	for c := 0; c < 64; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := 0; i < 10*capUSD; i++ {
				resp, err := b.client.Do(chargeOp(bases[(c+i)%len(bases)], key.VaultKey, 0))
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
		}(c)
	}
	wg.Wait()
	k, err := b.stores[0].FindKeyByID(ctx, key.ID)
	if err != nil {
		return nil, err
	}
	loc, _ := k.Location()
	day, month := keybrake.Buckets(time.Now(), loc)
	sp, err := b.stores[0].Spend(ctx, key.ID, day, month)
	if err != nil {
		return nil, err
	}
	r := &CapCheckResult{CapUSD: capUSD, Succeeded: int(ok.Load()), Refused: int(refused.Load()), Other: int(other.Load()),
		SettledUSD: sp.Total.String(), Upstream: b.simCharges() - before}
	r.Overspend = sp.Total > keybrake.Micros(capUSD)*keybrake.MicrosPerUSD || r.Upstream > capUSD || r.Succeeded > capUSD
	return r, nil
}

// simCharges counts the simulator's charges.
func (b *bench) simCharges() int {
	return len(b.simHandler.GroundTruth().Charges)
}

func (r *BenchResult) print(w io.Writer) {
	fmt.Fprintf(w, "keybrake bench — store: %s, replicas: %d, keys: %d, settle: %s; baseline: the simulator direct, same run\n\n", r.Store, r.Replicas, r.Keys, settleMode(r.SyncSettle))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "latency (µs)\tdirect p50\tproxy p50\tadded p50\tdirect p99\tproxy p99\tadded p99\tbare-proxy p50\t")
	for _, l := range r.Latency {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t\n", l.Operation, l.DirectMedian, l.ProxyMedian, l.AddedMedian, l.DirectP99, l.ProxyP99, l.AddedP99, l.BareMedian)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "throughput (req/s)\tclients\tdirect\tproxy\tproxy/direct\tbare proxy\tbare/direct\tdirect p99 µs\tproxy p50 µs\tproxy p99 µs\tproxy max µs\t")
	for _, t := range r.Throughput {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.2f\t%.0f\t%.2f\t%.0f\t%.0f\t%.0f\t%.0f\t\n", t.Operation, t.Clients, t.Direct, t.Proxy, t.Ratio, t.Bare, t.Bare/t.Direct,
			t.DirectP99, t.ProxyP50, t.ProxyP99, t.ProxyMax)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nbare proxy: httputil.ReverseProxy with no logic in front of the simulator, the floor of any Go proxy on this machine")
	fmt.Fprintf(w, "\nsettled spend on the bench keys: $%s ($1.00 per proxied charge)\n", r.Spend)
	if c := r.CapCheck; c != nil {
		verdict := "no overspend"
		if c.Overspend || c.Succeeded != c.CapUSD {
			verdict = "OVERSPEND OR SHORTFALL"
		}
		fmt.Fprintf(w, "cap check: 64 clients, $1.00 charges, total cap $%d: %d succeeded, %d refused (429), %d other; settled $%s; %d new charges upstream: %s\n",
			c.CapUSD, c.Succeeded, c.Refused, c.Other, c.SettledUSD, c.Upstream, verdict)
	}
	if r.Guards != nil {
		r.Guards.print(w)
	}
}

var _ = bytes.NewReader
