package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"

	khttp "github.com/keybrake/keybrake/http"
)

// ListenConfig is how `keybrake serve` faces the network: TLS, the admin
// listener, the connection bound, the proxies trusted to name clients,
// and the admin identities.
type ListenConfig struct {
	TLSCert         string // --tls-cert, KEYBRAKE_TLS_CERT
	TLSKey          string // --tls-key, KEYBRAKE_TLS_KEY
	AdminAddr       string // --admin-addr, KEYBRAKE_ADMIN_ADDR
	MetricsOnProxy  bool   // --metrics-on-proxy, KEYBRAKE_METRICS_ON_PROXY
	MaxConns        int    // --max-conns, KEYBRAKE_MAX_CONNS
	TrustedProxies  string // --trusted-proxies, KEYBRAKE_TRUSTED_PROXIES
	AdminTokensFile string // --admin-tokens-file, KEYBRAKE_ADMIN_TOKENS_FILE
	PublicURL       string // --public-url, KEYBRAKE_PUBLIC_URL

	trusted []netip.Prefix
	tokens  *khttp.AdminTokens
}

func (c *ListenConfig) flags(fs *flag.FlagSet, env Env) {
	fs.StringVar(&c.TLSCert, "tls-cert", envDefault(env, "KEYBRAKE_TLS_CERT", ""), "PEM certificate (chain) to serve TLS with on every listener; reloaded when the file changes (KEYBRAKE_TLS_CERT)")
	fs.StringVar(&c.TLSKey, "tls-key", envDefault(env, "KEYBRAKE_TLS_KEY", ""), "PEM private key of --tls-cert (KEYBRAKE_TLS_KEY)")
	fs.StringVar(&c.AdminAddr, "admin-addr", envDefault(env, "KEYBRAKE_ADMIN_ADDR", ""), "serve the admin API and /metrics on this address instead of --addr, e.g. 127.0.0.1:8081 (KEYBRAKE_ADMIN_ADDR)")
	fs.StringVar(&c.PublicURL, "public-url", envDefault(env, "KEYBRAKE_PUBLIC_URL", ""), "base URL people reach the admin listener at (behind a reverse proxy), for the console and signed approval links in alerts, e.g. https://keybrake.example.com; default: the listener's own address (KEYBRAKE_PUBLIC_URL)")
	fs.BoolVar(&c.MetricsOnProxy, "metrics-on-proxy", envDefault(env, "KEYBRAKE_METRICS_ON_PROXY", "") == "true", "also serve /metrics on --addr without a token (KEYBRAKE_METRICS_ON_PROXY)")
	fs.IntVar(&c.MaxConns, "max-conns", envInt(env, "KEYBRAKE_MAX_CONNS", khttp.DefaultMaxConns), "open connections per listener; more wait in the accept queue (KEYBRAKE_MAX_CONNS)")
	fs.StringVar(&c.TrustedProxies, "trusted-proxies", envDefault(env, "KEYBRAKE_TRUSTED_PROXIES", ""), "CIDRs of load balancers whose X-Forwarded-For names the client for the auth-failure limit, e.g. 10.0.0.0/8; from anyone else the header is ignored (KEYBRAKE_TRUSTED_PROXIES)")
	fs.StringVar(&c.AdminTokensFile, "admin-tokens-file", envDefault(env, "KEYBRAKE_ADMIN_TOKENS_FILE", ""), "file of named admin tokens, `name role token` per line (role admin or viewer; token or sha256:<hex>); re-read on change and on SIGHUP (KEYBRAKE_ADMIN_TOKENS_FILE)")
}

// validate checks every listener setting and loads the admin tokens, so a
// bad one refuses to start with the field named.
func (c *ListenConfig) validate(envToken string) error {
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return fmt.Errorf("invalid --tls-cert/--tls-key (KEYBRAKE_TLS_CERT/KEYBRAKE_TLS_KEY): give both or neither")
	}
	for _, f := range []struct{ flag, path string }{{"--tls-cert", c.TLSCert}, {"--tls-key", c.TLSKey}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("invalid %s: %v", f.flag, err)
		}
	}
	if c.PublicURL != "" {
		if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("invalid --public-url (KEYBRAKE_PUBLIC_URL) %q: want an absolute http(s) URL like https://keybrake.example.com", c.PublicURL)
		}
	}
	if c.AdminAddr != "" {
		if _, _, err := net.SplitHostPort(c.AdminAddr); err != nil {
			return fmt.Errorf("invalid --admin-addr (KEYBRAKE_ADMIN_ADDR) %q: %v", c.AdminAddr, err)
		}
	}
	if c.MaxConns < 1 {
		return fmt.Errorf("invalid --max-conns (KEYBRAKE_MAX_CONNS): want a positive number of connections")
	}
	c.trusted = nil
	for _, p := range strings.Split(c.TrustedProxies, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		pfx, err := netip.ParsePrefix(p)
		if err != nil {
			a, aerr := netip.ParseAddr(p)
			if aerr != nil {
				return fmt.Errorf("invalid --trusted-proxies (KEYBRAKE_TRUSTED_PROXIES) %q: want CIDRs like 10.0.0.0/8 or addresses", p)
			}
			pfx = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		c.trusted = append(c.trusted, pfx.Masked())
	}
	if envToken != "" {
		if err := khttp.CheckTokenStrength(envToken); err != nil {
			return fmt.Errorf("KEYBRAKE_ADMIN_TOKEN is weak: %v; or unset it and serve prints a generated one", err)
		}
	}
	if c.AdminTokensFile != "" {
		toks, err := khttp.LoadAdminTokens(c.AdminTokensFile)
		if err != nil {
			return fmt.Errorf("invalid --admin-tokens-file (KEYBRAKE_ADMIN_TOKENS_FILE): %v", err)
		}
		c.tokens = toks
	}
	return nil
}

// apply copies the validated settings to the server.
func (c *ListenConfig) apply(s *khttp.Server) error {
	s.TLSCertFile, s.TLSKeyFile = c.TLSCert, c.TLSKey
	s.AdminAddr, s.MetricsOnProxy = c.AdminAddr, c.MetricsOnProxy
	s.PublicURL = strings.TrimSuffix(c.PublicURL, "/")
	s.MaxConns, s.TrustedProxies = c.MaxConns, c.trusted
	s.AdminTokens = c.tokens
	return nil
}

// reloadOnHangup re-reads the admin tokens file on SIGHUP until ctx ends.
func (m *ServeMain) reloadOnHangup(ctx context.Context) {
	toks := m.Config.Listen.tokens
	if toks == nil {
		return
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	go func() {
		defer signal.Stop(ch)
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
				if err := toks.Reload(); err != nil {
					m.logger.Error("SIGHUP: admin tokens file does not load; keeping the previous tokens", "path", toks.Path, "err", err)
				} else {
					m.logger.Info("SIGHUP: admin tokens file reloaded", "path", toks.Path)
				}
			}
		}
	}()
}
