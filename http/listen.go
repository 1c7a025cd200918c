package http

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Server timeouts. Reading a request (headers and a body of at most
// MaxBodyBytes) is bounded so slow clients cannot hold connections; writing
// the answer may take as long as the upstream request plus a margin, since
// the proxy writes only once Stripe answered.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 60 * time.Second
	idleTimeout       = 120 * time.Second
	writeMargin       = 30 * time.Second
	maxHeaderBytes    = 64 << 10
)

// DefaultMaxConns bounds the open connections of each listener. Past it,
// new connections wait in the kernel's accept queue instead of each taking
// a goroutine, a file descriptor and, on a money-moving request, a store
// connection.
const DefaultMaxConns = 4096

// listen opens the proxy listener and, when AdminAddr is set, the admin
// listener, with TLS on both when a certificate is configured.
func (s *Server) listen() error {
	var tlsCfg *tls.Config
	if s.TLSCertFile != "" || s.TLSKeyFile != "" {
		if s.TLSCertFile == "" || s.TLSKeyFile == "" {
			return fmt.Errorf("TLS needs both a certificate file and a key file")
		}
		cr, err := newCertReloader(s.TLSCertFile, s.TLSKeyFile, s.logger())
		if err != nil {
			return err
		}
		tlsCfg = cr.tlsConfig()
	}
	ln, err := s.openListener(s.Addr, tlsCfg, "proxy")
	if err != nil {
		return err
	}
	var handler http.Handler = s
	if s.AdminAddr != "" {
		handler = portHandler{s: s, proxy: true}
	}
	s.ln, s.server = ln, s.newHTTPServer(handler)
	console, _ := s.Console.(interface{ Shutdown() })
	if console != nil && s.AdminAddr == "" {
		s.server.RegisterOnShutdown(console.Shutdown)
	}
	go s.server.Serve(ln)
	if s.AdminAddr != "" {
		aln, err := s.openListener(s.AdminAddr, tlsCfg, "admin")
		if err != nil {
			s.server.Close()
			return fmt.Errorf("admin listener: %w", err)
		}
		s.adminLn, s.adminServer = aln, s.newHTTPServer(portHandler{s: s, admin: true})
		if console != nil {
			s.adminServer.RegisterOnShutdown(console.Shutdown)
		}
		go s.adminServer.Serve(aln)
	}
	return nil
}

func (s *Server) openListener(addr string, tlsCfg *tls.Config, name string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	max := s.MaxConns
	if max <= 0 {
		max = DefaultMaxConns
	}
	ln = newLimitListener(ln, max)
	if tlsCfg != nil {
		return tls.NewListener(ln, tlsCfg), nil
	}
	if !loopback(ln.Addr()) {
		s.logger().Warn("serving PLAIN HTTP beyond loopback: vault keys and admin tokens cross the network unencrypted. Set --tls-cert and --tls-key, or keep keybrake on 127.0.0.1 behind a TLS-terminating proxy.", "listener", name, "addr", ln.Addr().String())
	}
	return ln, nil
}

// loopback reports whether a listener's address is reachable only from
// this machine.
func loopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

func (s *Server) newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      s.UpstreamTimeout + writeMargin,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          nil,
	}
}

// AdminURL returns the base URL of the admin listener, or URL() when the
// admin API shares the proxy's listener.
func (s *Server) AdminURL() string {
	if s.adminLn == nil {
		return s.URL()
	}
	return s.scheme() + "://" + s.adminLn.Addr().String()
}

func (s *Server) scheme() string {
	if s.TLSCertFile != "" {
		return "https"
	}
	return "http"
}

// portHandler serves one listener when the admin API has its own: the
// proxy's listener serves the Stripe API and the probes (and /metrics only
// with MetricsOnProxy); the admin listener serves the admin API, /metrics
// and the probes.
type portHandler struct {
	s     *Server
	proxy bool
	admin bool
}

func (h portHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.s.route(w, r, h.proxy, h.admin)
}

// route serves r on a listener that serves the proxy, the admin API or
// both. The proxy is routed on the raw path before any cleaning, so
// /stripe/v1/../../vault/keys can never reach the admin API: ServeMux
// would clean it and redirect.
func (s *Server) route(w http.ResponseWriter, r *http.Request, proxy, admin bool) {
	if s.Simulated {
		w.Header().Set("Keybrake-Upstream", "simulator")
	}
	raw := r.URL.EscapedPath()
	switch {
	case proxy && strings.HasPrefix(raw, "/v1/"):
		s.proxy.serve(w, r, s.stripeRoute(), raw) // Stripe's API without its prefix
	case proxy && s.routesVendor(raw):
		s.serveVendor(w, r, raw) // vendor_route.go: /stripe/…, /twilio/…, /resend/…
	case proxy && raw == "/mcp":
		s.mcp.ServeHTTP(w, r)
	case raw == "/healthz":
		s.serveAlive(w, r)
	case raw == "/readyz":
		s.serveReady(w, r)
	case raw == "/metrics" && s.metricsOpen(proxy, admin):
		s.metrics.handler().ServeHTTP(w, r)
	case raw == "/metrics" && admin:
		// One listener for both: the metrics are the admin's to read.
		if _, ok := s.adminGate(w, r, false); ok {
			s.metrics.handler().ServeHTTP(w, r)
		}
	case admin && (raw == "/vault" || strings.HasPrefix(raw, "/vault/")):
		s.serveVault(w, r, raw) // openapi.go
	case admin && s.Console != nil && (raw == "/console" || strings.HasPrefix(raw, "/console/")):
		s.Console.ServeHTTP(w, r)
	case admin && s.Console != nil && raw == "/" && r.Method == http.MethodGet:
		http.Redirect(w, r, "/console/", http.StatusFound)
	case proxy:
		s.writeStripeError(w, r, notFound(r, admin), nil)
	default:
		s.writeAdminError(w, r, notFound(r, admin))
	}
}

// metricsOpen reports whether /metrics is served without credentials: on
// an admin-only listener always, on a listener that serves the proxy only
// when MetricsOnProxy asks for it.
func (s *Server) metricsOpen(proxy, admin bool) bool {
	if proxy {
		return s.MetricsOnProxy
	}
	return admin
}

// limitListener accepts at most n connections at a time; Accept waits for
// a slot, leaving further clients in the kernel's accept queue.
type limitListener struct {
	net.Listener
	sem  chan struct{}
	done chan struct{}
	once sync.Once
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
