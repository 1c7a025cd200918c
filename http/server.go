// Package http serves keybrake over HTTP: the spend-cap proxy in front of the
// Stripe API (/stripe/v1/… and /v1/…), the same Stripe calls as MCP tools
// for agents (/mcp), the admin API (/vault/keys…) and the Prometheus
// metrics (/metrics).
package http

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sync"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/alert"
	"github.com/keybrake/keybrake/stripe"
)

// DefaultMaxBodyBytes bounds request bodies. Stripe's own requests are a few
// kilobytes; a megabyte leaves room and keeps hostile bodies cheap.
const DefaultMaxBodyBytes = 1 << 20

// Server is keybrake's HTTP server. Set the exported fields, then Open.
type Server struct {
	// Addr is the listen address, e.g. "127.0.0.1:8080" or "127.0.0.1:0".
	Addr string
	// Store keeps keys, reservations and the audit log.
	Store keybrake.Store
	// Upstream is the Stripe API base URL, e.g. https://api.stripe.com.
	Upstream *url.URL
	// UpstreamKey is the real Stripe secret. It never leaves this process
	// except in the Authorization header sent upstream.
	UpstreamKey string
	// Transport sends upstream requests; tests inject one to cut connections.
	Transport http.RoundTripper
	// UpstreamTimeout bounds one upstream request. Default 80 s, like
	// stripe-go's own client timeout.
	UpstreamTimeout time.Duration
	// AdminToken authenticates the admin API.
	AdminToken string
	// Rates converts non-USD amounts to USD.
	Rates stripe.Rates
	// Twilio and Resend, when set, serve /twilio/… and /resend/…
	// (vendor_twilio.go, vendor_resend.go); nil refuses those routes.
	Twilio *TwilioConfig
	Resend *ResendConfig
	// Simulated marks the upstream as the built-in simulator: every response
	// carries Keybrake-Upstream: simulator so nobody mistakes it for Stripe.
	Simulated bool
	// MaxBodyBytes bounds request bodies; default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// ResolveInterval is how often the resolver looks for uncertain
	// reservations; 0 disables the background loop (tests call Resolve).
	ResolveInterval time.Duration
	// StaleAfter is how long a reservation may stay "reserved" before the
	// resolver treats it as interrupted (its replica died). Default 2 min.
	StaleAfter time.Duration
	// SettleAfterAnswer answers a charge that succeeded upstream before
	// its settlement commits, when the store can settle later
	// (keybrake.LaterSettler): the request path then pays one commit, the
	// reservation's. Until the settlement commits the reservation counts
	// in full; after a crash the resolver settles it (settle_later.go).
	SettleAfterAnswer bool
	// HoldTTL is how long keybrake keeps a hold on an object that can still
	// move money (an unconfirmed payment intent, an uncaptured
	// authorization) before the hold sweeper ends it: it cancels the object
	// upstream with the real key and releases the hold. Default 24 h.
	HoldTTL time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger receives structured logs; default slog.Default().
	Logger *slog.Logger
	// ID names this replica in resolver leases; default random.
	ID string
	// Console, when set, serves /console (and / redirects to it): the
	// operator console (package console). Its Shutdown, if it has one,
	// runs when the server shuts down, ending its live streams.
	Console http.Handler
	// Drift configures the drift watch (drift.go); a zero Interval
	// disables it.
	Drift DriftConfig

	// AlertInterval is how often the alert sender delivers the outbox;
	// 0 disables the background loop (tests call SendAlerts).
	AlertInterval time.Duration
	// AlertClient sends webhooks; default: no redirects followed.
	AlertClient *http.Client
	// AlertTimeout bounds one webhook attempt; default 10 s.
	AlertTimeout time.Duration
	// AlertRetryFor is how long a failing delivery is retried; default 24 h.
	AlertRetryFor time.Duration
	// PublicURL is the base URL people reach the admin listener at, for the
	// console and signed approve/deny links in approval_required alerts;
	// default AdminURL() (approval_link.go).
	PublicURL string
	// KeyMetrics exports per-key spend and remaining gauges on /metrics,
	// for at most KeyMetricsMax keys (default DefaultKeyMetricsMax).
	KeyMetrics    bool
	KeyMetricsMax int

	// Listeners (see listen.go). TLSCertFile and TLSKeyFile serve TLS on
	// every listener, reloaded when the files change. AdminAddr, when set,
	// moves the admin API and /metrics to a listener of their own; the
	// proxy's listener then serves /metrics only if MetricsOnProxy. MaxConns
	// bounds each listener's open connections (default DefaultMaxConns).
	TLSCertFile    string
	TLSKeyFile     string
	AdminAddr      string
	MetricsOnProxy bool
	MaxConns       int
	// TrustedProxies are the peers whose X-Forwarded-For names the client
	// for the auth-failure limit; from anyone else the header is ignored.
	TrustedProxies []netip.Prefix
	// AuthFailures limits failed authentications per client address;
	// the zero value is DefaultAuthFailures.
	AuthFailures AuthLimit
	// AdminTokens are named admin identities besides AdminToken (which is
	// the admin named "env"); see admintokens.go.
	AdminTokens *AdminTokens
	// Retention prunes old audit events, reservations and alerts, and old
	// records of sent objects, in the background (retention.go); a zero
	// Age and Sent keep everything.
	Retention RetentionConfig

	metrics     *metrics
	audit       *auditLog
	keys        *keyCache               // nil when the store cannot report key changes
	keysSync    keybrake.SyncKeyWatcher // when set, says whether the store's key reports are never late now
	stopWatch   context.CancelFunc
	ln          net.Listener
	server      *http.Server
	adminLn     net.Listener
	adminServer *http.Server
	limiter     *authLimiter
	proxy       *proxy
	vendors     map[string]*vendorRoute // by route prefix (vendor_route.go)
	mcp         *mcpServer
	// answered holds the IDs of reservations answered upstream whose
	// settlement is queued (settle_later.go): still "reserved" in the
	// store, but a retry of them replays instead of being refused as in
	// progress.
	answered sync.Map
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup

	sweepMu   sync.Mutex
	nextSweep time.Time

	sender *alert.Sender

	adminMiddleware func(http.Handler) http.Handler // wraps the admin API in tests (export_test.go)
}

// NewServer returns a Server with safe defaults.
func NewServer() *Server {
	return &Server{
		Addr:            "127.0.0.1:8080",
		MaxBodyBytes:    DefaultMaxBodyBytes,
		UpstreamTimeout: 80 * time.Second,
		StaleAfter:      2 * time.Minute,
		HoldTTL:         24 * time.Hour,
		Now:             time.Now,
		Rates:           stripe.Rates{},
	}
}

// Open validates the configuration, starts listening and serving, and starts
// the resolver loop if ResolveInterval is set.
func (s *Server) Open() error {
	if err := s.init(); err != nil {
		return err
	}
	if err := s.listen(); err != nil {
		return err
	}
	if s.ResolveInterval > 0 {
		s.wg.Add(1)
		go s.resolveLoop()
	}
	if s.Drift.Interval > 0 {
		s.wg.Add(1)
		go s.driftLoop()
	}
	s.startAlerts()
	s.startRetention()
	return nil
}

// init checks the configuration and builds the proxy. It is separate from
// Open so tests can serve the handler with httptest.
func (s *Server) init() error {
	switch {
	case s.Store == nil:
		return keybrake.ErrorParam("store", "no store configured")
	case s.Upstream == nil:
		return keybrake.ErrorParam("upstream", "no upstream URL configured")
	case s.UpstreamKey == "":
		return keybrake.ErrorParam("upstream_key", "no upstream secret key configured")
	case s.AdminToken == "" && s.AdminTokens == nil:
		return keybrake.ErrorParam("admin_token", "no admin token configured")
	case s.Retention.Age > 0 && s.Retention.Age < keybrake.MinRetention:
		return keybrake.ErrorParam("retention", "retention %s is shorter than the minimum %s", s.Retention.Age, keybrake.MinRetention)
	case s.Retention.Sent > 0 && s.Retention.Sent < keybrake.MinSentRetention:
		return keybrake.ErrorParam("sent_retention", "sent retention %s is shorter than the minimum %s", s.Retention.Sent, keybrake.MinSentRetention)
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	if s.MaxBodyBytes <= 0 {
		s.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if s.UpstreamTimeout <= 0 {
		s.UpstreamTimeout = 80 * time.Second
	}
	if s.HoldTTL <= 0 {
		s.HoldTTL = 24 * time.Hour
	}
	if s.StaleAfter <= 0 {
		s.StaleAfter = 2 * time.Minute
	}
	if s.Transport == nil {
		s.Transport = newTransport()
	}
	if s.ID == "" {
		s.ID = "replica_" + randomToken(6)
	}
	if s.Rates == nil {
		s.Rates = stripe.Rates{}
	}
	s.stop = make(chan struct{})
	s.metrics = newMetrics()
	if s.AlertClient == nil {
		s.AlertClient = defaultAlertClient()
	}
	s.initAlerts()
	s.audit = newAuditLog(s.Store, s.logger())
	s.limiter = newAuthLimiter(s.AuthFailures, s.Now)
	var err error
	if err = s.watchKeys(); err != nil {
		return fmt.Errorf("watch keys: %w", err)
	}
	s.proxy = newProxy(s)
	s.openVendors()
	if s.mcp, err = newMCPServer(s); err != nil {
		return fmt.Errorf("mcp: %w", err)
	}
	return nil
}

// Handler initialises the server without listening and returns its handler,
// for embedding in another server or in tests.
func (s *Server) Handler() (http.Handler, error) {
	if err := s.init(); err != nil {
		return nil, err
	}
	return s, nil
}

func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 512
	t.MaxIdleConnsPerHost = 512
	t.IdleConnTimeout = 90 * time.Second
	return t
}

// URL returns the base URL the server listens on.
func (s *Server) URL() string {
	if s.ln == nil {
		return ""
	}
	return s.scheme() + "://" + s.ln.Addr().String()
}

// Close stops the resolver and shuts the listener down gracefully, letting
// in-flight requests finish so no reservation is left dangling.
func (s *Server) Close() error {
	if s.stop != nil {
		s.stopOnce.Do(func() { close(s.stop) })
	}
	s.wg.Wait()
	var err error
	if s.server != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = s.server.Shutdown(ctx)
		if s.adminServer != nil {
			err = errors.Join(err, s.adminServer.Shutdown(ctx))
		}
	}
	if s.audit != nil {
		s.audit.close()
	}
	if s.stopWatch != nil {
		s.stopWatch()
	}
	if s.mcp != nil {
		s.mcp.close()
	}
	return err
}

// FlushAudit returns once every audit event of the requests answered so far
// is written.
func (s *Server) FlushAudit() {
	if s.audit != nil {
		s.audit.Flush()
	}
}

// ServeHTTP serves the proxy, and the admin API unless AdminAddr gives it
// a listener of its own.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.route(w, r, true, s.AdminAddr == "")
}

// HashSecret returns the hex SHA-256 of a vault key: the only form in which
// keybrake stores it. Vault keys carry 192 random bits, so a plain hash is
// safe against guessing and lets lookup be one indexed read.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// randomToken returns n random bytes as lower-case hex.
func randomToken(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return hex.EncodeToString(b)
}

// base62 encodes random bytes for vault keys and ids.
const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// randomID returns a prefix followed by n random base62 characters.
func randomID(prefix string, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	out := make([]byte, n)
	for i := range b {
		out[i] = base62[int(b[i])%62]
	}
	return prefix + string(out)
}

// isUnavailable reports whether err means the store cannot be reached.
func isUnavailable(err error) bool {
	return keybrake.ErrorCode(err) == keybrake.EUNAVAILABLE || errors.Is(err, context.DeadlineExceeded)
}
