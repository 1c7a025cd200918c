// Package console serves keybrake's operator console at /console: an
// overview of spend, the keys with their caps, a key's windows and live
// event feed, key creation and editing, the audit log and alerts.
//
// Pages are rendered on the server (html/template) from embedded assets;
// a small script (assets/static/app.js, no build step) adds live updates
// over Server-Sent Events, copying, and local times. Every change to a key
// goes through the admin API's own handler in-process (Console.Admin), so
// the console validates and logs exactly as /vault/keys does; summaries
// and the audit log are read from the store.
//
// Access is by admin token, exchanged once at sign-in for a session cookie
// (HttpOnly, SameSite=Strict, Secure over TLS). Sessions live in this
// process, stored by the hash of their token, and expire. Every state
// change needs the session's CSRF token and a same-origin Origin.
package console

import (
	"context"
	"embed"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/keybrake/keybrake"
)

//go:embed assets
var assets embed.FS

// Defaults of the Console's optional fields.
const (
	DefaultSessionTTL   = 12 * time.Hour
	DefaultPollInterval = 500 * time.Millisecond
)

// contentSecurityPolicy allows only the console's own script, styles and
// connections: no inline script, no framing, no form posted elsewhere.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Console is the operator console's handler. Set the fields, then serve it
// under /console (http.Server.Console does).
type Console struct {
	// Store is the same store the proxy and the admin API use.
	Store keybrake.Store
	// Admin is the admin API handler (/vault/keys…); the console sends it
	// every key read and change in-process, authenticated with AdminToken.
	Admin http.Handler
	// AdminToken is what an operator types to sign in.
	AdminToken string
	// Now is the clock; default time.Now.
	Now func() time.Time
	// FlushAudit, if set, is called before the audit log is read, so the
	// console shows the events of requests already answered.
	FlushAudit func()
	// SessionTTL is how long a session lasts after sign-in; default 12 h.
	SessionTTL time.Duration
	// PollInterval is how often live feeds look for new events; default
	// 500 ms.
	PollInterval time.Duration
	// Logger receives sign-ins and failures; default slog.Default().
	Logger *slog.Logger

	once     sync.Once
	pages    map[string]*template.Template
	static   http.Handler
	sessions *sessions
	shutdown chan struct{}
	stopOnce sync.Once
}

func (c *Console) init() {
	c.once.Do(func() {
		if c.Now == nil {
			c.Now = time.Now
		}
		if c.SessionTTL <= 0 {
			c.SessionTTL = DefaultSessionTTL
		}
		if c.PollInterval <= 0 {
			c.PollInterval = DefaultPollInterval
		}
		if c.Logger == nil {
			c.Logger = slog.Default()
		}
		c.pages = parsePages()
		static, _ := fs.Sub(assets, "assets/static")
		c.static = http.StripPrefix("/console/static/", http.FileServer(http.FS(static)))
		c.sessions = newSessions(c.Now)
		c.shutdown = make(chan struct{})
	})
}

// Shutdown ends every live feed, so a graceful server shutdown does not
// wait for browsers to close their streams. The console keeps serving
// pages.
func (c *Console) Shutdown() {
	c.init()
	c.stopOnce.Do(func() { close(c.shutdown) })
}

// ServeHTTP routes a request under /console.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.init()
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")

	path := r.URL.EscapedPath()
	if strings.HasPrefix(path, "/console/static/") && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		h.Set("Cache-Control", "no-cache")
		c.static.ServeHTTP(w, r)
		return
	}
	h.Set("Cache-Control", "no-store")
	switch path {
	case "/console":
		http.Redirect(w, r, "/console/", http.StatusFound)
		return
	case "/console/signin":
		c.serveSignIn(w, r)
		return
	}
	sess := c.sessions.find(r)
	if sess == nil || c.sessionRevoked(r, sess) {
		c.unauthenticated(w, r)
		return
	}
	if !safeMethod(r.Method) {
		if err := checkCSRF(r, sess); err != nil {
			c.Logger.Warn("console request refused", "reason", err.Error(), "method", r.Method, "path", r.URL.Path)
			http.Error(w, "Forbidden: "+err.Error(), http.StatusForbidden)
			return
		}
	}
	ctx := context.WithValue(r.Context(), sessionKey{}, sess)
	c.route(w, r.WithContext(ctx), path)
}

// route dispatches a signed-in request.
func (c *Console) route(w http.ResponseWriter, r *http.Request, path string) {
	rest, _ := strings.CutPrefix(path, "/console/")
	parts := strings.Split(rest, "/")
	get, post := r.Method == http.MethodGet || r.Method == http.MethodHead, r.Method == http.MethodPost
	switch {
	case rest == "" && get:
		c.serveOverview(w, r)
	case rest == "stream" && get:
		c.serveOverviewStream(w, r)
	case rest == "signout" && post:
		c.serveSignOut(w, r)
	case rest == "keys" && get:
		c.serveKeys(w, r)
	case rest == "keys" && post:
		c.serveCreateKey(w, r)
	case rest == "keys/new" && get:
		c.serveNewKey(w, r)
	case len(parts) == 2 && parts[0] == "keys" && validID(parts[1]) && get:
		c.serveKey(w, r, parts[1])
	case len(parts) == 2 && parts[0] == "keys" && validID(parts[1]) && post:
		c.serveUpdateKey(w, r, parts[1])
	case len(parts) == 3 && parts[0] == "keys" && validID(parts[1]) && parts[2] == "revoke" && post:
		c.serveRevokeKey(w, r, parts[1])
	case len(parts) == 3 && parts[0] == "keys" && validID(parts[1]) && parts[2] == "stream" && get:
		c.serveKeyStream(w, r, parts[1])
	case rest == "events" && get:
		c.serveEvents(w, r)
	case rest == "events/stream" && get:
		c.serveEventsStream(w, r)
	case rest == "approvals" && get:
		c.serveApprovals(w, r, "")
	case len(parts) == 2 && parts[0] == "approvals" && validApprovalID(parts[1]) && get:
		c.serveApprovals(w, r, parts[1])
	case len(parts) == 3 && parts[0] == "approvals" && validApprovalID(parts[1]) && (parts[2] == "approve" || parts[2] == "deny") && post:
		c.serveDecideApproval(w, r, parts[1], parts[2])
	case rest == "alerts" && get:
		c.serveAlerts(w, r)
	case rest == "alerts/test" && post:
		c.serveAlertTest(w, r)
	default:
		c.notFound(w, r)
	}
}

// unauthenticated sends a page request to sign-in and refuses everything
// else with 401, so no admin data leaves without a session.
func (c *Console) unauthenticated(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && !strings.HasSuffix(r.URL.Path, "/stream") {
		http.Redirect(w, r, "/console/signin?next="+urlQueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
		return
	}
	http.Error(w, "Sign in to the console first.", http.StatusUnauthorized)
}

func safeMethod(m string) bool { return m == http.MethodGet || m == http.MethodHead }

// validID matches the admin API's key IDs.
func validID(s string) bool {
	id, ok := strings.CutPrefix(s, "vk_")
	if !ok || id == "" || len(id) > 64 {
		return false
	}
	for _, ch := range id {
		if !('0' <= ch && ch <= '9' || 'a' <= ch && ch <= 'z' || 'A' <= ch && ch <= 'Z') {
			return false
		}
	}
	return true
}
