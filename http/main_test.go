package http_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/stripe"
	"github.com/keybrake/keybrake/stripesim"
)

const adminToken = "kbadm_test_token"

// Clock is an injected clock shared by the proxy and the simulator.
type Clock = kbtest.Clock

// NewClock returns a clock stopped at t.
func NewClock(t time.Time) *Clock { return kbtest.NewClock(t) }

// Env is a keybrake server on 127.0.0.1:0 with a SQLite store in a temp dir
// and the simulator as its upstream.
type Env struct {
	Server *khttp.Server
	Sim    *stripesim.Server
	SimURL string
	Store  keybrake.Store
	Clock  *Clock
	Dir    string // the directory of the SQLite database and its -wal and -shm
}

// Option adjusts the server before it opens.
type Option func(*khttp.Server)

// MustOpen starts an Env; t.Cleanup closes it.
func MustOpen(tb testing.TB, opts ...Option) *Env {
	tb.Helper()
	clock := NewClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	sim, err := stripesim.New(stripesim.Options{Now: clock.Now})
	if err != nil {
		tb.Fatal(err)
	}
	simSrv := httptest.NewServer(sim)
	tb.Cleanup(simSrv.Close)

	dir := tb.TempDir()
	if strings.ContainsAny(dir, "?#") {
		// A fuzz seed's name has a '#', which a SQLite path may not.
		var err error
		if dir, err = os.MkdirTemp("", "keybrake-test-"); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { os.RemoveAll(dir) })
	}
	store, err := kbtest.OpenSQLite(tb, filepath.Join(dir, "keybrake.db"))
	if err != nil {
		tb.Fatal(err)
	}
	s := khttp.NewServer()
	s.Addr = "127.0.0.1:0"
	s.Store = store
	s.Upstream = mustURL(tb, simSrv.URL)
	s.UpstreamKey = "sk_test_upstream_secret_do_not_leak"
	s.AdminToken = adminToken
	s.Now = clock.Now
	s.Simulated = true
	s.Logger = slog.New(slog.DiscardHandler)
	s.Rates = stripe.Rates{"eur": 1_080_000, "jpy": 6_700, "kwd": 3_250_000}
	khttp.SetAdminMiddleware(s, ValidateAdmin(tb)) // openapi_test.go
	for _, o := range opts {
		o(s)
	}
	if err := s.Open(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		s.Close()
		store.Close()
	})
	return &Env{Server: s, Sim: sim, SimURL: simSrv.URL, Store: s.Store, Clock: clock, Dir: dir}
}

// CreateKey creates a vault key through the admin API and returns its id
// and secret.
func (e *Env) CreateKey(tb testing.TB, body string) (id, secret string) {
	tb.Helper()
	resp, out := e.Admin(tb, "POST", "/vault/keys", body)
	if resp.StatusCode != http.StatusCreated {
		tb.Fatalf("create key: %d %s", resp.StatusCode, out)
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

// Admin calls the admin API with the admin token.
func (e *Env) Admin(tb testing.TB, method, path, body string) (*http.Response, []byte) {
	tb.Helper()
	return e.Do(tb, method, path, body, map[string]string{"Authorization": "Bearer " + adminToken, "Content-Type": "application/json"})
}

// Do sends a raw request to the server.
func (e *Env) Do(tb testing.TB, method, path, body string, headers map[string]string) (*http.Response, []byte) {
	tb.Helper()
	req, err := http.NewRequest(method, e.Server.URL()+path, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	if body != "" && headers["Content-Type"] == "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp, out
}

// Stripe returns a stripe-go client that talks to keybrake with secret. It
// does not retry, so each test sees every answer.
func (e *Env) Stripe(secret string) *stripego.Client {
	// stripe-go insists that request paths start with /v1, so Go clients use
	// keybrake's /v1/ root; other SDKs may use the /stripe prefix.
	return StripeClient(e.Server.URL(), secret, 0)
}

// Direct returns a stripe-go client that talks to the simulator with the real
// secret, as somebody outside keybrake would.
func (e *Env) Direct() *stripego.Client {
	return StripeClient(e.SimURL, "sk_test_upstream_secret_do_not_leak", 0)
}

// StripeClient returns a stripe-go client for base with retries.
func StripeClient(base, secret string, retries int64) *stripego.Client {
	cfg := &stripego.BackendConfig{
		URL:               stripego.String(base),
		MaxNetworkRetries: stripego.Int64(retries),
		LeveledLogger:     &stripego.LeveledLogger{Level: stripego.LevelNull},
		HTTPClient:        &http.Client{Timeout: 30 * time.Second},
	}
	return stripego.NewClient(secret, stripego.WithBackends(stripego.NewBackendsWithConfig(cfg)))
}

// Spend returns the key's counted spend today.
func (e *Env) Spend(tb testing.TB, keyID string) keybrake.Spend {
	tb.Helper()
	k, err := e.Store.FindKeyByID(context.Background(), keyID)
	if err != nil {
		tb.Fatal(err)
	}
	loc, _ := k.Location()
	day, month := keybrake.Buckets(e.Clock.Now(), loc)
	sp, err := e.Store.Spend(context.Background(), keyID, day, month)
	if err != nil {
		tb.Fatal(err)
	}
	return sp
}

// SucceededUSD is the ground truth: USD cents of the simulator's charges
// that succeeded, minus nothing refunded (tests that refund check apart).
func (e *Env) SucceededCents(currency string) (n int, cents int64) {
	for _, c := range e.Sim.GroundTruth().Charges {
		if c.Status == "succeeded" && c.Currency == currency {
			n++
			cents += c.Amount
		}
	}
	return n, cents
}

// MustResolve runs the resolver until no reservation is left uncertain or
// interrupted. A pass that fails (a slow machine timing out a replay) leaves
// its lease; the injected clock is moved past the lease for the next pass.
func (e *Env) MustResolve(tb testing.TB) {
	tb.Helper()
	for i := 0; i < 10; i++ {
		if _, err := e.Server.Resolve(context.Background()); err != nil {
			tb.Fatal(err)
		}
		open := 0
		for _, state := range []string{keybrake.StateUncertain, keybrake.StateReserved} {
			rs, err := e.Store.FindReservations(context.Background(), keybrake.ReservationFilter{State: state})
			if err != nil {
				tb.Fatal(err)
			}
			open += len(rs)
		}
		if open == 0 {
			return
		}
		e.Clock.Advance(3 * time.Minute)
	}
	tb.Fatal("reservations still unresolved after 10 resolver passes")
}

// StripeErr asserts err is a *stripe.Error with the HTTP status and returns it.
func StripeErr(tb testing.TB, err error, status int) *stripego.Error {
	tb.Helper()
	se, ok := err.(*stripego.Error)
	if !ok {
		tb.Fatalf("err = %T %v, want *stripe.Error with status %d", err, err, status)
	}
	if se.HTTPStatusCode != status {
		tb.Fatalf("status = %d (%s: %s), want %d", se.HTTPStatusCode, se.Code, se.Msg, status)
	}
	return se
}

func mustURL(tb testing.TB, s string) *urlURL {
	tb.Helper()
	u, err := parseURL(s)
	if err != nil {
		tb.Fatal(err)
	}
	return u
}

// NoLeak asserts the upstream secret appears nowhere in b.
func NoLeak(tb testing.TB, b []byte) {
	tb.Helper()
	if bytes.Contains(b, []byte("sk_test_upstream_secret_do_not_leak")) {
		tb.Fatalf("upstream secret leaked: %s", b)
	}
}

// Metrics fetches /metrics with the admin token: on a listener that serves
// both the proxy and the admin API, the metrics are the admin's.
func (e *Env) Metrics() (*http.Response, error) {
	req, err := http.NewRequest("GET", e.Server.URL()+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	return http.DefaultClient.Do(req)
}
