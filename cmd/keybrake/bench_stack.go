package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/stripe"
	"github.com/keybrake/keybrake/stripesim"
)

// benchAdminToken is the admin token of the bench's keybrake, new for
// every bench process.
var benchAdminToken = "kbadm_" + randomHex(24)

// bench holds what a bench run measures: the simulator, the bare reverse
// proxy in front of it and keybrake's replicas, each in a process of its
// own or all in this one, with the keys and the customer the requests use.
type bench struct {
	cfg       benchConfig
	simURL    string
	bareURL   string
	proxyURLs []string // one per replica; the first also serves the admin API
	vaultKey  string   // the hot key
	keyID     string
	keys      []string    // --keys spread keys, created by the keys operation
	workerKey string      // the worker phases' key with --worker-via keybrake
	workerLog *tailBuffer // the billing worker's warnings and errors in the current phase
	customer  string
	client    *http.Client
	dir       string
	// hotCharges counts the charges keybrake answered 200 on the hot key.
	hotCharges atomic.Int64

	// In process (--in-process, --growth).
	simHandler *stripesim.Server
	servers    []*http.Server
	stores     []keybrake.Store
	proxies    []*khttp.Server

	// In processes of their own.
	children []*benchChild

	mem *memWatch // the RSS of this process and of the children
	cpu *cpuMeter // the CPU time of this process and of the children
}

// newBench starts the parts of a run, in processes or in this one, and
// creates the hot key and the customer.
func newBench(ctx context.Context, cfg benchConfig) (*bench, error) {
	b := &bench{cfg: cfg, client: &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 1100, IdleConnTimeout: time.Minute}}}
	var err error
	if b.dir, err = os.MkdirTemp("", "keybrake-bench-"); err != nil {
		return nil, err
	}
	b.mem, b.cpu = newMemWatch(), newCPUMeter()
	if cfg.InProcess || cfg.Now != nil {
		err = b.startInProcess(ctx)
	} else {
		err = b.startProcesses(ctx)
	}
	if err == nil {
		err = b.setup(ctx)
	}
	if err == nil && isPostgres(cfg.DB) {
		if pm := findPostmaster(ctx, cfg.DB); pm != 0 {
			b.cpu.addServer("postgres", pm)
		}
	}
	if err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

func (b *bench) dbPath() string {
	if b.cfg.DB != "" {
		return b.cfg.DB
	}
	return filepath.Join(b.dir, "bench.db")
}

// startProcesses starts the simulator, the bare proxy and the replicas
// from this executable and waits until each answers.
func (b *bench) startProcesses(ctx context.Context) error {
	httpURL := func(path string) func(string) string {
		return func(addr string) string { return "http://" + addr + path }
	}
	sim, simAddr, err := startOnFreeAddr(ctx, "stripesim", "", func(addr string) []string {
		return []string{"stripesim", "--addr", addr, "--max-objects", fmt.Sprint(b.cfg.SimMaxObjects)}
	}, nil, httpURL("/_sim/clock"))
	if err != nil {
		return err
	}
	b.addChild(sim)
	b.simURL = "http://" + simAddr
	if b.cfg.measures(pathBare) {
		bare, bareAddr, err := startOnFreeAddr(ctx, "bare proxy", "", func(addr string) []string {
			return []string{"bench", "--bare-proxy", b.simURL, "--bare-addr", addr}
		}, nil, httpURL("/healthz"))
		if err != nil {
			return err
		}
		b.addChild(bare)
		b.bareURL = "http://" + bareAddr
	}
	// One at a time: the first applies the migrations.
	env := []string{"STRIPE_SECRET_KEY=" + simulatorSecret, "KEYBRAKE_ADMIN_TOKEN=" + benchAdminToken}
	for i := range b.cfg.Replicas {
		c, addr, err := startOnFreeAddr(ctx, fmt.Sprintf("serve replica %d", i+1), b.cfg.ServeExe, func(addr string) []string {
			args := []string{"serve", "--addr", addr, "--db", b.dbPath(), "--upstream", b.simURL, "--log-level", "warn", "--max-conns", "4096"}
			if i == 0 && b.cfg.ProxyProfile != "" {
				args = append(args, "--cpuprofile", b.cfg.ProxyProfile)
			}
			if i == 0 && b.cfg.ProxyMemProfile != "" {
				args = append(args, "--memprofile", b.cfg.ProxyMemProfile)
			}
			return args
		}, env, httpURL("/readyz"))
		if err != nil {
			return err
		}
		b.addChild(c)
		b.proxyURLs = append(b.proxyURLs, "http://"+addr)
	}
	return nil
}

// addChild keeps a started child, to stop it at the end, and watches its
// memory and CPU time.
func (b *bench) addChild(c *benchChild) {
	b.children = append(b.children, c)
	b.mem.add(c.name, c.cmd.Process.Pid)
	b.cpu.add(c.name, c.cmd.Process.Pid)
}

// startInProcess serves the simulator, the bare proxy and the replicas
// from this process.
func (b *bench) startInProcess(ctx context.Context) error {
	sim, err := stripesim.New(stripesim.Options{MaxObjects: b.cfg.SimMaxObjects})
	if err != nil {
		return err
	}
	b.simHandler = sim
	if b.simURL, err = b.serveLocal(sim); err != nil {
		return err
	}
	upstream, _ := url.Parse(b.simURL)
	if b.bareURL, err = b.serveLocal(bareProxy(upstream)); err != nil {
		return err
	}
	for range b.cfg.Replicas {
		store, err := openStore(ctx, b.dbPath())
		if err != nil {
			return err
		}
		b.stores = append(b.stores, store)
		s := khttp.NewServer()
		s.Addr = "127.0.0.1:0"
		s.Store = store
		s.Upstream = upstream
		s.UpstreamKey = simulatorSecret
		s.AdminToken = benchAdminToken
		s.Logger = slog.New(slog.DiscardHandler)
		s.Rates = stripe.Rates{}
		if b.cfg.Now != nil {
			s.Now = b.cfg.Now
		}
		if err := s.Open(); err != nil {
			return err
		}
		b.proxies = append(b.proxies, s)
		b.proxyURLs = append(b.proxyURLs, s.URL())
	}
	return nil
}

func (b *bench) serveLocal(h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h}
	b.servers = append(b.servers, srv)
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), nil
}

// setup creates the hot key, capped high enough never to refuse during
// the run so every charge takes the full reserve-forward-settle path, and
// the customer the GETs read.
func (b *bench) setup(ctx context.Context) error {
	var err error
	if b.keyID, b.vaultKey, err = b.createKey(ctx, "bench"); err != nil {
		return fmt.Errorf("create bench key: %w", err)
	}
	var cus struct {
		ID string `json:"id"`
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", b.simURL+"/v1/customers", strings.NewReader("email=bench%40example.com"))
	req.Header.Set("Authorization", "Bearer "+simulatorSecret)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if err := b.doJSON(req, &cus); err != nil {
		return fmt.Errorf("create bench customer: %w", err)
	}
	b.customer = cus.ID
	return nil
}

// benchCaps are the caps of every measured key: never reached in a run.
const benchCaps = `"total_usd_cap":1000000000,"daily_usd_cap":1000000000,"per_request_usd_cap":100`

// createKey creates a capped key with benchCaps and returns its ID and
// vault key.
func (b *bench) createKey(ctx context.Context, label string) (id, secret string, err error) {
	return b.createKeyBody(ctx, `{"label":"`+label+`",`+benchCaps+`}`)
}

func (b *bench) createKeyBody(ctx context.Context, body string) (id, secret string, err error) {
	req, _ := http.NewRequestWithContext(ctx, "POST", b.proxyURLs[0]+"/vault/keys", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+benchAdminToken)
	var key struct {
		ID       string `json:"id"`
		VaultKey string `json:"vault_key"`
	}
	if err := b.doJSON(req, &key); err != nil {
		return "", "", err
	}
	return key.ID, key.VaultKey, nil
}

// createSpreadKeys creates the --keys keys of the keys operation, 16 at a
// time.
func (b *bench) createSpreadKeys(ctx context.Context, progress io.Writer) error {
	if len(b.keys) > 0 {
		return nil
	}
	fmt.Fprintf(progress, "bench: creating %d keys…\n", b.cfg.Keys)
	keys := make([]string, b.cfg.Keys)
	var next atomic.Int64
	var wg sync.WaitGroup
	var fail atomic.Value
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < len(keys); i = int(next.Add(1)) - 1 {
				_, secret, err := b.createKey(ctx, fmt.Sprintf("bench-spread-%d", i))
				if err != nil {
					fail.CompareAndSwap(nil, err)
					return
				}
				keys[i] = secret
			}
		}()
	}
	wg.Wait()
	if err, _ := fail.Load().(error); err != nil {
		return fmt.Errorf("create spread keys: %w", err)
	}
	b.keys = keys
	return nil
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

// spent returns the key's total settled spend, read through the admin API.
func (b *bench) spent(ctx context.Context, keyID string) (keybrake.Micros, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", b.proxyURLs[0]+"/vault/keys/"+keyID, nil)
	req.Header.Set("Authorization", "Bearer "+benchAdminToken)
	var k struct {
		Budget struct {
			Total struct {
				Spent keybrake.Micros `json:"spent_usd"`
			} `json:"total"`
		} `json:"budget"`
	}
	if err := b.doJSON(req, &k); err != nil {
		return 0, err
	}
	return k.Budget.Total.Spent, nil
}

// capturedCents returns the USD cents the simulator has captured in all.
func (b *bench) capturedCents(ctx context.Context) (int64, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", b.simURL+"/_sim/moved", nil)
	var m stripesim.MoneyMoved
	if err := b.doJSON(req, &m); err != nil {
		return 0, err
	}
	return m.Total.Captured["usd"], nil
}

// close stops the children (serve first, so its profile is written), then
// what runs in process, and removes the temp dir.
func (b *bench) close() error {
	var errs []error
	for i := len(b.children) - 1; i >= 0; i-- {
		if err := b.children[i].stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if b.mem != nil {
		b.mem.close()
	}
	for _, p := range b.proxies {
		p.Close()
	}
	for _, s := range b.stores {
		s.Close()
	}
	for _, s := range b.servers {
		s.Close()
	}
	if b.simHandler != nil {
		b.simHandler.Close()
	}
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
	if len(errs) > 0 {
		return fmt.Errorf("stop the bench's processes: %v", errs)
	}
	return nil
}
