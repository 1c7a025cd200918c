package stripesim_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	stripe "github.com/stripe/stripe-go/v82"

	"github.com/keybrake/keybrake/stripesim"
)

// testKey is the secret key the tests authenticate with.
const testKey = "sk_test_keybrake123456"

// epoch is the fixed base clock of the tests.
var epoch = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// fakeClock is a base clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// env is a simulator behind a loopback HTTP server.
type env struct {
	sim   *stripesim.Server
	srv   *httptest.Server
	clock *fakeClock
}

// MustEnv starts a simulator with a fixed clock; it is closed when the test ends.
func MustEnv(tb testing.TB) *env {
	tb.Helper()
	return MustEnvWith(tb, stripesim.Options{})
}

// MustEnvWith starts a simulator with opts; a nil Now gets the fixed clock.
func MustEnvWith(tb testing.TB, opts stripesim.Options) *env {
	tb.Helper()
	clock := &fakeClock{t: epoch}
	if opts.Now == nil {
		opts.Now = clock.Now
	}
	sim, err := stripesim.New(opts)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	srv := httptest.NewServer(sim)
	tb.Cleanup(func() {
		srv.Close()
		if err := sim.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return &env{sim: sim, srv: srv, clock: clock}
}

// client returns a stripe-go client of the simulator that never retries.
func (e *env) client(key string) *stripe.Client {
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(e.srv.URL),
		MaxNetworkRetries: stripe.Int64(0),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	return stripe.NewClient(key, stripe.WithBackends(&stripe.Backends{API: backend}))
}

// sdk is e.client(testKey).
func (e *env) sdk() *stripe.Client { return e.client(testKey) }

// response is a raw HTTP answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

// errorBody is Stripe's error shape.
type errorBody struct {
	Error struct {
		Type          string          `json:"type"`
		Code          string          `json:"code"`
		DeclineCode   string          `json:"decline_code"`
		Message       string          `json:"message"`
		Param         string          `json:"param"`
		Charge        string          `json:"charge"`
		PaymentIntent json.RawMessage `json:"payment_intent"`
	} `json:"error"`
}

func (r response) apiError(tb testing.TB) errorBody {
	tb.Helper()
	var e errorBody
	if err := json.Unmarshal(r.body, &e); err != nil || e.Error.Type == "" || e.Error.Message == "" {
		tb.Fatalf("not a Stripe error (status %d): %s", r.status, r.body)
	}
	return e
}

func (r response) object(tb testing.TB) map[string]any {
	tb.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		tb.Fatalf("decode %s: %v", r.body, err)
	}
	return m
}

// do sends a raw request. headers are name, value pairs; "Authorization" is
// set to Bearer testKey unless given.
func (e *env) do(tb testing.TB, method, path, body string, headers ...string) response {
	tb.Helper()
	resp, err := e.send(context.Background(), method, path, body, headers...)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

func (e *env) send(ctx context.Context, method, path, body string, headers ...string) (response, error) {
	req, err := http.NewRequestWithContext(ctx, method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
		} else {
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return response{}, err
	}
	return response{status: res.StatusCode, header: res.Header, body: b}, nil
}

// form encodes name, value pairs.
func form(kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return v.Encode()
}

// stripeErr returns the *stripe.Error in err, failing the test otherwise.
func stripeErr(tb testing.TB, err error) *stripe.Error {
	tb.Helper()
	var se *stripe.Error
	if !errors.As(err, &se) {
		tb.Fatalf("want a *stripe.Error, got %v", err)
	}
	return se
}

// wantStatus fails unless r has the status.
func wantStatus(tb testing.TB, r response, status int) {
	tb.Helper()
	if r.status != status {
		tb.Fatalf("status = %d, want %d: %s", r.status, status, r.body)
	}
}

// countObjects is the number of objects of every kind in the ground truth.
func countObjects(sim *stripesim.Server) int {
	gt := sim.GroundTruth()
	return len(gt.Customers) + len(gt.Charges) + len(gt.PaymentIntents) + len(gt.Refunds) + len(gt.Transfers) + len(gt.Payouts)
}
