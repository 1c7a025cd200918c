package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/console"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/postgres"
	"github.com/keybrake/keybrake/sqlite"
	"github.com/keybrake/keybrake/stripe"
	"github.com/keybrake/keybrake/stripesim"
)

// simulatorSecret is the secret serve uses toward its in-process simulator.
// It is a test key by construction, so it can never touch real money.
const simulatorSecret = "sk_test_keybrake_simulator"

// ServeConfig is the configuration of `keybrake serve`. Every field has a
// flag and an environment variable.
type ServeConfig struct {
	Addr             string        // --addr, KEYBRAKE_ADDR
	DB               string        // --db, KEYBRAKE_DB: a SQLite file path or a postgres:// DSN
	Upstream         string        // --upstream, KEYBRAKE_UPSTREAM
	StripeSecretFile string        // --stripe-secret-file, KEYBRAKE_STRIPE_SECRET_FILE
	StripeSecret     string        // STRIPE_SECRET_KEY (environment only: secrets stay out of ps)
	Vendors          VendorConfig  // Twilio and Resend (serve_vendors.go)
	AdminToken       string        // KEYBRAKE_ADMIN_TOKEN (environment only)
	Rates            string        // --rates, KEYBRAKE_RATES: "eur=1.08,jpy=0.0067"
	ResolveInterval  time.Duration // --resolve-interval, KEYBRAKE_RESOLVE_INTERVAL
	StaleAfter       time.Duration // --stale-after, KEYBRAKE_STALE_AFTER
	HoldTTL          time.Duration // --hold-ttl, KEYBRAKE_HOLD_TTL
	UpstreamTimeout  time.Duration // --upstream-timeout, KEYBRAKE_UPSTREAM_TIMEOUT
	SyncSettle       bool          // --sync-settle, KEYBRAKE_SYNC_SETTLE
	SimState         string        // --sim-state, KEYBRAKE_SIM_STATE
	SimMaxObjects    int           // --sim-max-objects, KEYBRAKE_SIM_MAX_OBJECTS
	LogLevel         string        // --log-level, KEYBRAKE_LOG_LEVEL
	LogFormat        string        // --log-format, KEYBRAKE_LOG_FORMAT
	DriftInterval    time.Duration // --drift-interval, KEYBRAKE_DRIFT_INTERVAL
	DriftWindow      time.Duration // --drift-window, KEYBRAKE_DRIFT_WINDOW
	DriftSuspend     bool          // --drift-suspend, KEYBRAKE_DRIFT_SUSPEND
	AlertInterval    time.Duration // --alert-interval, KEYBRAKE_ALERT_INTERVAL
	KeyMetrics       bool          // --metrics-keys, KEYBRAKE_METRICS_KEYS
	KeyMetricsMax    int           // --metrics-max-keys, KEYBRAKE_METRICS_MAX_KEYS
	Listen           ListenConfig  // TLS, the admin listener, limits (serve_listen.go)
	Retention        time.Duration // --retention, KEYBRAKE_RETENTION: 0 keeps everything (retention.go)
	SentRetention    time.Duration // --sent-retention, KEYBRAKE_SENT_RETENTION: 0 keeps every record (retention.go)
	RetentionEvery   time.Duration // --retention-interval, KEYBRAKE_RETENTION_INTERVAL
	CPUProfile       string        // --cpuprofile, KEYBRAKE_CPUPROFILE (serve_profile.go)
	MemProfile       string        // --memprofile, KEYBRAKE_MEMPROFILE (serve_profile.go)
}

// ServeMain is `keybrake serve`: ParseFlags, then Run, then Close. Tests
// start it in-process on 127.0.0.1:0 with a temp dir.
type ServeMain struct {
	Config ServeConfig
	Env    Env
	// Now, when set, replaces the clock of the proxy (and of the simulator
	// when it is the upstream), for tests of calendar windows.
	Now func() time.Time
	// Transport, when set, carries upstream requests (tests cut connections).
	Transport http.RoundTripper

	Store      keybrake.Store
	HTTP       *khttp.Server
	Sim        *stripesim.Server
	simServer  *http.Server
	vendorSims []*http.Server // the Twilio and Resend simulators (serve_vendors.go)
	simLn      net.Listener
	logger     *slog.Logger
}

// NewServeMain returns a ServeMain with the defaults.
func NewServeMain(env Env) *ServeMain {
	return &ServeMain{Env: env, Config: ServeConfig{
		Addr:            "127.0.0.1:8080",
		DB:              "keybrake.db",
		Upstream:        "https://api.stripe.com",
		ResolveInterval: 10 * time.Second,
		StaleAfter:      2 * time.Minute,
		HoldTTL:         24 * time.Hour,
		UpstreamTimeout: 80 * time.Second,
		SimMaxObjects:   10_000,
		LogLevel:        "info",
		LogFormat:       "text",
		AlertInterval:   5 * time.Second,
		KeyMetricsMax:   khttp.DefaultKeyMetricsMax,
		Retention:       keybrake.DefaultRetention,
		SentRetention:   keybrake.DefaultSentRetention,
		RetentionEvery:  10 * time.Minute,
	}}
}

// ParseFlags reads the environment, then the flags, which win.
func (m *ServeMain) ParseFlags(args []string) error {
	c, env := &m.Config, m.Env
	fs := flagSet("serve", `Runs the spend-cap proxy (/stripe/v1/…), the same Stripe calls as MCP tools
for agents (/mcp, Streamable HTTP, the vault key as bearer token), the admin
API (/vault/keys, /vault/alerts), the alert sender (webhooks, docs/alerts.md),
the operator console (/console/, sign in with the admin token) and /metrics.
With no Stripe secret configured, it runs the built-in Stripe
simulator in-process as its upstream and says so in its log and in the
Keybrake-Upstream: simulator response header.

Environment only (secrets are kept out of the process list):
  STRIPE_SECRET_KEY      the real Stripe secret (sk_… or rk_…); unset = simulator
  KEYBRAKE_ADMIN_TOKEN   the admin API token; unset = one is generated and printed once`+vendorHelp, env)
	fs.StringVar(&c.Addr, "addr", envDefault(env, "KEYBRAKE_ADDR", c.Addr), "listen address (KEYBRAKE_ADDR)")
	fs.StringVar(&c.DB, "db", envDefault(env, "KEYBRAKE_DB", c.DB), "store: a SQLite file path, or a postgres:// DSN for several replicas (KEYBRAKE_DB)")
	fs.StringVar(&c.Upstream, "upstream", envDefault(env, "KEYBRAKE_UPSTREAM", c.Upstream), "Stripe API base URL (KEYBRAKE_UPSTREAM)")
	fs.StringVar(&c.StripeSecretFile, "stripe-secret-file", envDefault(env, "KEYBRAKE_STRIPE_SECRET_FILE", ""), "file holding the Stripe secret, instead of STRIPE_SECRET_KEY (KEYBRAKE_STRIPE_SECRET_FILE)")
	fs.StringVar(&c.Rates, "rates", envDefault(env, "KEYBRAKE_RATES", ""), "USD value of one unit of each non-USD currency, e.g. eur=1.08,jpy=0.0067 (KEYBRAKE_RATES)")
	fs.DurationVar(&c.ResolveInterval, "resolve-interval", envDuration(env, "KEYBRAKE_RESOLVE_INTERVAL", c.ResolveInterval), "how often the resolver settles uncertain reservations; 0 disables (KEYBRAKE_RESOLVE_INTERVAL)")
	fs.DurationVar(&c.StaleAfter, "stale-after", envDuration(env, "KEYBRAKE_STALE_AFTER", c.StaleAfter), "age after which an unanswered reservation counts as interrupted (KEYBRAKE_STALE_AFTER)")
	fs.DurationVar(&c.HoldTTL, "hold-ttl", envDuration(env, "KEYBRAKE_HOLD_TTL", c.HoldTTL), "how long an unconfirmed intent or uncaptured authorization stays held before keybrake cancels it upstream and releases its amount (KEYBRAKE_HOLD_TTL)")
	fs.DurationVar(&c.UpstreamTimeout, "upstream-timeout", envDuration(env, "KEYBRAKE_UPSTREAM_TIMEOUT", c.UpstreamTimeout), "timeout of one upstream request (KEYBRAKE_UPSTREAM_TIMEOUT)")
	fs.BoolVar(&c.SyncSettle, "sync-settle", envDefault(env, "KEYBRAKE_SYNC_SETTLE", "") == "true", "settle every charge before answering it (one more commit on the request path); by default a success is answered first and settled in the next batch, counted in full until then (KEYBRAKE_SYNC_SETTLE=true)")
	fs.IntVar(&c.SimMaxObjects, "sim-max-objects", envInt(env, "KEYBRAKE_SIM_MAX_OBJECTS", c.SimMaxObjects), "the in-process simulator keeps about this many charges (and payment intents, refunds, transfers, payouts, saved idempotent responses) each, forgetting the oldest finished ones, so its memory stays bounded; 0 keeps everything (KEYBRAKE_SIM_MAX_OBJECTS)")
	fs.StringVar(&c.SimState, "sim-state", envDefault(env, "KEYBRAKE_SIM_STATE", ""), "file where the in-process simulator keeps its state across restarts (KEYBRAKE_SIM_STATE)")
	fs.StringVar(&c.LogLevel, "log-level", envDefault(env, "KEYBRAKE_LOG_LEVEL", c.LogLevel), "debug, info, warn or error (KEYBRAKE_LOG_LEVEL)")
	fs.StringVar(&c.LogFormat, "log-format", envDefault(env, "KEYBRAKE_LOG_FORMAT", c.LogFormat), "text or json (KEYBRAKE_LOG_FORMAT)")
	fs.DurationVar(&c.DriftInterval, "drift-interval", envDuration(env, "KEYBRAKE_DRIFT_INTERVAL", c.DriftInterval), "how often the drift watch compares Stripe's recent objects with keybrake's reservations; 0 disables (KEYBRAKE_DRIFT_INTERVAL; docs/drift.md)")
	fs.DurationVar(&c.DriftWindow, "drift-window", envDuration(env, "KEYBRAKE_DRIFT_WINDOW", time.Hour), "how far back each drift watch run looks (KEYBRAKE_DRIFT_WINDOW)")
	fs.BoolVar(&c.DriftSuspend, "drift-suspend", envDefault(env, "KEYBRAKE_DRIFT_SUSPEND", "") == "true", "suspend the key of each drift finding that names one, reason \"drift: <kind> <object>\"; needs --drift-interval (KEYBRAKE_DRIFT_SUSPEND=true; docs/drift.md)")
	fs.DurationVar(&c.AlertInterval, "alert-interval", envDuration(env, "KEYBRAKE_ALERT_INTERVAL", c.AlertInterval), "how often the alert sender delivers webhooks from the outbox (retries back off for 24 h; see docs/alerts.md); 0 disables (KEYBRAKE_ALERT_INTERVAL)")
	fs.BoolVar(&c.KeyMetrics, "metrics-keys", envDefault(env, "KEYBRAKE_METRICS_KEYS", "") == "true", "export per-key spend and remaining gauges on /metrics (KEYBRAKE_METRICS_KEYS=true)")
	fs.IntVar(&c.KeyMetricsMax, "metrics-max-keys", envInt(env, "KEYBRAKE_METRICS_MAX_KEYS", c.KeyMetricsMax), "at most this many keys in the per-key gauges, oldest first (KEYBRAKE_METRICS_MAX_KEYS)")
	c.Listen.flags(fs, env)
	vendorFlags(fs, env, &c.Vendors)
	retentionFlags(fs, env, &c.Retention, &c.SentRetention, &c.RetentionEvery)
	profileFlags(fs, env, &c.CPUProfile, &c.MemProfile)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve takes no arguments, got %q (flags start with --)", fs.Args())
	}
	c.StripeSecret = strings.TrimSpace(env.Getenv("STRIPE_SECRET_KEY"))
	c.AdminToken = strings.TrimSpace(env.Getenv("KEYBRAKE_ADMIN_TOKEN"))
	return nil
}

func envDuration(env Env, name string, def time.Duration) time.Duration {
	v := envDefault(env, name, "")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		// Caught again, with the field named, in validate.
		return -1
	}
	return d
}

// validate checks the configuration and names the first bad field.
func (m *ServeMain) validate() (stripe.Rates, error) {
	c := &m.Config
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return nil, fmt.Errorf("invalid --addr (KEYBRAKE_ADDR) %q: %v", c.Addr, err)
	}
	if c.DB == "" {
		return nil, fmt.Errorf("invalid --db (KEYBRAKE_DB): empty")
	}
	if c.ResolveInterval < 0 {
		return nil, fmt.Errorf("invalid --resolve-interval (KEYBRAKE_RESOLVE_INTERVAL): must be a non-negative duration like 10s")
	}
	if c.AlertInterval < 0 {
		return nil, fmt.Errorf("invalid --alert-interval (KEYBRAKE_ALERT_INTERVAL): must be a non-negative duration like 5s")
	}
	if c.DriftSuspend && c.DriftInterval <= 0 {
		return nil, fmt.Errorf("invalid --drift-suspend (KEYBRAKE_DRIFT_SUSPEND): needs the drift watch running (--drift-interval)")
	}
	if c.KeyMetricsMax < 1 || c.KeyMetricsMax > 100000 {
		return nil, fmt.Errorf("invalid --metrics-max-keys (KEYBRAKE_METRICS_MAX_KEYS): must be from 1 to 100000")
	}
	if c.StaleAfter <= 0 {
		return nil, fmt.Errorf("invalid --stale-after (KEYBRAKE_STALE_AFTER): must be a positive duration like 2m")
	}
	if c.HoldTTL <= 0 {
		return nil, fmt.Errorf("invalid --hold-ttl (KEYBRAKE_HOLD_TTL): must be a positive duration like 24h")
	}
	if c.UpstreamTimeout <= 0 {
		return nil, fmt.Errorf("invalid --upstream-timeout (KEYBRAKE_UPSTREAM_TIMEOUT): must be a positive duration like 80s")
	}
	if c.SimMaxObjects < 0 {
		return nil, fmt.Errorf("invalid --sim-max-objects (KEYBRAKE_SIM_MAX_OBJECTS): want 0 (keep everything) or more")
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return nil, fmt.Errorf("invalid --log-format (KEYBRAKE_LOG_FORMAT) %q: want text or json", c.LogFormat)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return nil, fmt.Errorf("invalid --log-level (KEYBRAKE_LOG_LEVEL) %q: want debug, info, warn or error", c.LogLevel)
	}
	if c.StripeSecretFile != "" {
		if c.StripeSecret != "" {
			return nil, fmt.Errorf("both STRIPE_SECRET_KEY and --stripe-secret-file are set; use one")
		}
		b, err := os.ReadFile(c.StripeSecretFile)
		if err != nil {
			return nil, fmt.Errorf("invalid --stripe-secret-file (KEYBRAKE_STRIPE_SECRET_FILE): %v", err)
		}
		c.StripeSecret = strings.TrimSpace(string(b))
	}
	if c.StripeSecret != "" && !strings.HasPrefix(c.StripeSecret, "sk_") && !strings.HasPrefix(c.StripeSecret, "rk_") {
		return nil, fmt.Errorf("invalid STRIPE_SECRET_KEY: a Stripe secret starts with sk_ or rk_ (a vault key cannot be the upstream secret)")
	}
	u, err := url.Parse(c.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("invalid --upstream (KEYBRAKE_UPSTREAM) %q: want an http(s) URL like https://api.stripe.com", c.Upstream)
	}
	rates, err := stripe.ParseRates(c.Rates)
	if err != nil {
		return nil, fmt.Errorf("invalid --rates (KEYBRAKE_RATES): %s", keybrake.ErrorMessage(err))
	}
	if err := c.Listen.validate(c.AdminToken); err != nil {
		return nil, err
	}
	if err := validateRetention(c.Retention, c.SentRetention, c.RetentionEvery); err != nil {
		return nil, err
	}
	return rates, nil
}

// Run opens the store, the simulator if needed, and the server.
func (m *ServeMain) Run(ctx context.Context) error {
	rates, err := m.validate()
	if err != nil {
		return err
	}
	m.logger = newLogger(m.Env, m.Config.LogLevel, m.Config.LogFormat)
	if m.Store, err = openStore(ctx, m.Config.DB); err != nil {
		return err
	}
	if pg, ok := m.Store.(*postgres.Store); ok && m.Now == nil {
		pg.MaxClockSkew = postgres.DefaultMaxClockSkew // a replica whose clock is off refuses to reserve (docs/guards.md)
	}
	s := khttp.NewServer()
	s.Addr = m.Config.Addr
	s.Store = m.Store
	s.Rates = rates
	s.Logger = m.logger
	s.ResolveInterval = m.Config.ResolveInterval
	s.StaleAfter = m.Config.StaleAfter
	s.HoldTTL = m.Config.HoldTTL
	s.AlertInterval = m.Config.AlertInterval
	s.KeyMetrics, s.KeyMetricsMax = m.Config.KeyMetrics, m.Config.KeyMetricsMax
	s.UpstreamTimeout = m.Config.UpstreamTimeout
	s.SettleAfterAnswer = !m.Config.SyncSettle
	s.Transport = m.Transport
	s.Drift = khttp.DriftConfig{Interval: m.Config.DriftInterval, Window: m.Config.DriftWindow, Suspend: m.Config.DriftSuspend}
	s.Retention = khttp.RetentionConfig{Age: m.Config.Retention, Sent: m.Config.SentRetention, Interval: m.Config.RetentionEvery}
	if m.Now != nil {
		s.Now = m.Now
	}
	if m.Config.StripeSecret == "" {
		if err := m.openSimulator(); err != nil {
			return err
		}
		s.Upstream, _ = url.Parse("http://" + m.simLn.Addr().String())
		s.UpstreamKey = simulatorSecret
		s.Simulated = true
		m.logger.Warn("NO STRIPE SECRET CONFIGURED: the upstream is keybrake's built-in Stripe SIMULATOR, not Stripe. No real money moves. Set STRIPE_SECRET_KEY to proxy the real Stripe API.", "simulator", s.Upstream.String())
	} else {
		s.Upstream, _ = url.Parse(m.Config.Upstream)
		s.UpstreamKey = m.Config.StripeSecret
	}
	if err := m.openVendors(s); err != nil { // serve_vendors.go: /twilio, /resend
		return err
	}
	s.AdminToken = m.Config.AdminToken
	if s.AdminToken == "" && m.Config.Listen.AdminTokensFile == "" {
		s.AdminToken = "kbadm_" + randomHex(24)
		fmt.Fprintf(m.Env.Stderr, "KEYBRAKE_ADMIN_TOKEN is not set; the admin token for this run (a new one at every start; set KEYBRAKE_ADMIN_TOKEN to keep one) is:\n\n    %s\n\n", s.AdminToken)
	}
	if err := m.Config.Listen.apply(s); err != nil {
		return err
	}
	s.Console = &console.Console{Store: m.Store, Admin: s, AdminToken: s.AdminToken, Now: s.Now,
		FlushAudit: s.FlushAudit, Logger: m.logger.With("component", "console")}
	m.HTTP = s
	if err := s.Open(); err != nil {
		return fmt.Errorf("listen on %s: %w", m.Config.Addr, err)
	}
	fmt.Fprintf(m.Env.Stderr, "Console: %s/console/ (sign in with the admin token)\n", s.AdminURL())
	m.logger.Info("keybrake serving", "url", s.URL(), "proxy", s.URL()+"/stripe", "admin", s.AdminURL()+"/vault/keys", "console", s.AdminURL()+"/console/", "store", storeKind(m.Config.DB), "upstream", s.Upstream.Redacted(), "version", Version)
	return nil
}

// openSimulator starts the simulator on a loopback port of its own, so the
// proxy reaches it over real HTTP exactly as it reaches Stripe.
func (m *ServeMain) openSimulator() error {
	opts := stripesim.Options{StatePath: m.Config.SimState, Logger: m.logger.With("component", "stripesim"), MaxObjects: m.Config.SimMaxObjects}
	if m.Now != nil {
		opts.Now = m.Now
	}
	sim, err := stripesim.New(opts)
	if err != nil {
		return fmt.Errorf("start the simulator: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("start the simulator: %w", err)
	}
	m.Sim, m.simLn = sim, ln
	m.simServer = &http.Server{Handler: sim, ReadHeaderTimeout: 10 * time.Second}
	go m.simServer.Serve(ln)
	return nil
}

// Close stops the server, then the simulator, then the store.
func (m *ServeMain) Close() error {
	var errs []error
	if m.HTTP != nil {
		errs = append(errs, m.HTTP.Close())
	}
	if m.simServer != nil {
		errs = append(errs, m.simServer.Close())
	}
	for _, sim := range m.vendorSims {
		errs = append(errs, sim.Close())
	}
	if m.Sim != nil {
		errs = append(errs, m.Sim.Close())
	}
	if m.Store != nil {
		errs = append(errs, m.Store.Close())
	}
	return errors.Join(errs...)
}

func openStore(ctx context.Context, db string) (keybrake.Store, error) {
	if strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://") {
		s, err := postgres.Open(ctx, db)
		if err != nil {
			return nil, fmt.Errorf("open --db (KEYBRAKE_DB) postgres: %w", err)
		}
		return s, nil
	}
	if dir := filepath.Dir(db); dir != "." {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("invalid --db (KEYBRAKE_DB) %q: %v", db, err)
		}
	}
	s, err := sqlite.Open(db)
	if err != nil {
		return nil, fmt.Errorf("open --db (KEYBRAKE_DB) %q: %w", db, err)
	}
	return s, nil
}

func storeKind(db string) string {
	if strings.HasPrefix(db, "postgres") {
		return "postgres"
	}
	return "sqlite:" + db
}

func newLogger(env Env, level, format string) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: lvl}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(env.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(env.Stderr, opts))
}

func runServe(ctx context.Context, args []string, env Env) (err error) {
	m := NewServeMain(env)
	if err := m.ParseFlags(args); err != nil {
		return err
	}
	stopProfile, err := startProfiles(m.Config.CPUProfile, m.Config.MemProfile)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stopProfile()) }() // a profile asked for and not written fails the command
	if err := m.Run(ctx); err != nil {
		m.Close()
		return err
	}
	m.reloadOnHangup(ctx)
	<-ctx.Done()
	m.logger.Info("shutting down: finishing in-flight requests")
	return m.Close()
}
