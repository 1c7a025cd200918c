// Package kbtest holds what the tests of several packages start the same
// way: an injected clock, the Stripe simulator on loopback, a keybrake proxy
// in front of it with a SQLite store, and vault keys made through the admin
// API. It is for tests only.
package kbtest

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/sqlite"
	"github.com/keybrake/keybrake/stripe"
	"github.com/keybrake/keybrake/stripesim"
)

// T0 is where test clocks start.
var T0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// AdminToken is the admin token of the proxies Proxy starts.
const AdminToken = "kbadm_test"

// UpstreamSecret is the Stripe secret the proxies send the simulator; tests
// assert it never leaks.
const UpstreamSecret = "sk_test_upstream_secret_do_not_leak"

// Clock is an injected clock, shared by whatever a test wants to move
// through time together (a ledger, a proxy, the simulator).
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock stopped at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Logger discards logs unless KEYBRAKE_TEST_LOG is set.
func Logger() *slog.Logger {
	if os.Getenv("KEYBRAKE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// Simulator starts the Stripe simulator on a loopback httptest server and
// returns it with its URL; tb.Cleanup stops it.
func Simulator(tb testing.TB, opts stripesim.Options) (*stripesim.Server, string) {
	tb.Helper()
	sim, err := stripesim.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewServer(sim)
	tb.Cleanup(srv.Close)
	return sim, srv.URL
}

// SQLite opens a SQLite store in a temp dir; tb.Cleanup closes it.
func SQLite(tb testing.TB, name string) *sqlite.Store {
	tb.Helper()
	s, err := OpenSQLite(tb, filepath.Join(tb.TempDir(), name))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// sqliteTemplate is a freshly migrated, closed database file that
// OpenSQLite copies, so a test pays the migrations (table rebuilds
// included) once per package, not once per store.
var sqliteTemplate struct {
	once sync.Once
	data []byte
	err  error
}

// OpenSQLite opens a SQLite store at path, which must not exist yet, as a
// copy of a newly migrated database. The caller closes it.
func OpenSQLite(tb testing.TB, path string) (*sqlite.Store, error) {
	tb.Helper()
	sqliteTemplate.once.Do(func() {
		dir, err := os.MkdirTemp("", "keybrake-template-")
		if err != nil {
			sqliteTemplate.err = err
			return
		}
		defer os.RemoveAll(dir)
		tp := filepath.Join(dir, "template.db")
		s, err := sqlite.Open(tp)
		if err != nil {
			sqliteTemplate.err = err
			return
		}
		if sqliteTemplate.err = s.Close(); sqliteTemplate.err != nil { // Close checkpoints the WAL into the file
			return
		}
		sqliteTemplate.data, sqliteTemplate.err = os.ReadFile(tp)
	})
	if sqliteTemplate.err != nil {
		return nil, sqliteTemplate.err
	}
	if err := os.WriteFile(path, sqliteTemplate.data, 0o600); err != nil {
		return nil, err
	}
	return sqlite.Open(path)
}

// Proxy starts keybrake on 127.0.0.1:0 in front of the simulator at simURL,
// with a SQLite store of its own, AdminToken and UpstreamSecret; mod may
// adjust the server before it opens. tb.Cleanup closes it.
func Proxy(tb testing.TB, simURL string, mod func(*khttp.Server)) *khttp.Server {
	tb.Helper()
	store := SQLite(tb, "keybrake.db")
	up, err := url.Parse(simURL)
	if err != nil {
		tb.Fatal(err)
	}
	p := khttp.NewServer()
	p.Addr = "127.0.0.1:0"
	p.Store = store
	p.Upstream = up
	p.UpstreamKey = UpstreamSecret
	p.AdminToken = AdminToken
	p.Simulated = true
	p.Logger = Logger()
	p.Rates = stripe.Rates{}
	if mod != nil {
		mod(p)
	}
	if err := p.Open(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() }) // registered last, so it runs before the store closes
	return p
}

// VaultKey creates a vault key with the JSON policy body through the admin
// API of the proxy at base, and returns the key's id and its secret.
func VaultKey(tb testing.TB, base, body string) (id, secret string) {
	tb.Helper()
	req, err := http.NewRequest("POST", base+"/vault/keys", strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+AdminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		tb.Fatalf("create vault key: %d %s", resp.StatusCode, out)
	}
	var v struct {
		ID       string `json:"id"`
		VaultKey string `json:"vault_key"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		tb.Fatal(err)
	}
	return v.ID, v.VaultKey
}
