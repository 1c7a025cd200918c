package replicas_test

import (
	"context"
	"encoding/json"
	"github.com/keybrake/keybrake/internal/kbtest"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/postgres"
	"github.com/keybrake/keybrake/stripesim"
)

const (
	adminToken  = "kbadm_replicas_test_4f1c9e0b7a2d8c"
	upstreamKey = "sk_test_replicas_upstream_secret"
)

// MustServerDSN returns the DSN of the test server (kbtest.PostgresServerDSN).
func MustServerDSN(tb testing.TB) string {
	tb.Helper()
	return kbtest.PostgresServerDSN(tb)
}

// MustDatabase returns a DSN selecting a fresh schema (kbtest.PostgresSchema).
func MustDatabase(tb testing.TB, serverDSN string) string {
	tb.Helper()
	return kbtest.PostgresSchema(tb, serverDSN)
}

// withParam returns dsn with one more URL query parameter.
func withParam(dsn, key, value string) string { return kbtest.WithParam(dsn, key, value) }

// poolDSN keeps a Store's pool small: many replicas share one test server.
func poolDSN(dsn string) string { return withParam(dsn, "pool_max_conns", "16") }

// MustStore opens a Store (a pool of its own) on dsn, closed when the test
// ends.
func MustStore(tb testing.TB, dsn string) *postgres.Store {
	tb.Helper()
	s, err := postgres.Open(context.Background(), poolDSN(dsn))
	if err != nil {
		tb.Fatalf("postgres.Open: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// Sim is the simulator every replica forwards to.
type Sim struct {
	*stripesim.Server
	URL string
}

// MustSim starts a simulator on 127.0.0.1.
func MustSim(tb testing.TB) *Sim {
	tb.Helper()
	sim, err := stripesim.New(stripesim.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewServer(sim)
	tb.Cleanup(srv.Close)
	return &Sim{Server: sim, URL: srv.URL}
}

// Replica is one in-process keybrake server with its own pool on the shared
// database.
type Replica struct {
	*khttp.Server
	Store *postgres.Store
}

// MustReplica starts a replica on 127.0.0.1:0 in front of sim.
func MustReplica(tb testing.TB, dsn string, sim *Sim) *Replica {
	tb.Helper()
	return mustReplicaWith(tb, dsn, sim, nil)
}

// mustReplicaWith is MustReplica with mod applied to the server before it
// opens.
func mustReplicaWith(tb testing.TB, dsn string, sim *Sim, mod func(*Replica)) *Replica {
	tb.Helper()
	store := MustStore(tb, dsn)
	s := khttp.NewServer()
	s.Addr = "127.0.0.1:0"
	s.Store = store
	u, _ := url.Parse(sim.URL)
	s.Upstream = u
	s.UpstreamKey = upstreamKey
	s.AdminToken = adminToken
	s.Logger = slog.New(slog.DiscardHandler)
	r := &Replica{Server: s, Store: store}
	if mod != nil {
		mod(r)
	}
	if err := s.Open(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return r
}

// client is shared by the tests: enough idle connections for hundreds of
// concurrent requests, and a bound on each.
var client = &http.Client{
	Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 512},
	Timeout:   2 * time.Minute,
}

// Do sends a request to base+path and returns the status and body.
func Do(tb testing.TB, method, url, body string, headers map[string]string) (int, []byte) {
	tb.Helper()
	status, out, err := do(method, url, body, headers)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, url, err)
	}
	return status, out
}

func do(method, url, body string, headers map[string]string) (int, []byte, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// Admin calls a replica's admin API.
func Admin(tb testing.TB, base, method, path, body string) (int, []byte) {
	tb.Helper()
	return Do(tb, method, base+path, body, map[string]string{"Authorization": "Bearer " + adminToken, "Content-Type": "application/json"})
}

// MustCreateKey creates a vault key through base's admin API and returns its
// ID and secret.
func MustCreateKey(tb testing.TB, base, body string) (id, secret string) {
	tb.Helper()
	status, out := Admin(tb, base, "POST", "/vault/keys", body)
	if status != http.StatusCreated {
		tb.Fatalf("create key: %d %s", status, out)
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

// Charge creates a charge of cents USD through base with the vault key.
func Charge(base, secret string, cents int64, idemKey string) (int, []byte, error) {
	h := map[string]string{"Authorization": "Bearer " + secret}
	if idemKey != "" {
		h["Idempotency-Key"] = idemKey
	}
	return do("POST", base+"/v1/charges", "amount="+strconv.FormatInt(cents, 10)+"&currency=usd&source=tok_visa", h)
}

// StripeErrorType returns error.type of a Stripe-shaped error body.
func StripeErrorType(body []byte) string {
	var v struct {
		Error struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	json.Unmarshal(body, &v)
	return v.Error.Type
}

// MustSpend returns what counts against keyID's caps today (UTC keys).
func MustSpend(tb testing.TB, s keybrake.Store, keyID string) keybrake.Spend {
	tb.Helper()
	day, month := keybrake.Buckets(time.Now(), time.UTC)
	sp, err := s.Spend(context.Background(), keyID, day, month)
	if err != nil {
		tb.Fatal(err)
	}
	return sp
}

// MustOpenReservations returns the reservations still reserved or uncertain.
func MustOpenReservations(tb testing.TB, s keybrake.Store) []*keybrake.Reservation {
	tb.Helper()
	var open []*keybrake.Reservation
	for _, state := range []string{keybrake.StateReserved, keybrake.StateUncertain} {
		rs, err := s.FindReservations(context.Background(), keybrake.ReservationFilter{State: state})
		if err != nil {
			tb.Fatal(err)
		}
		open = append(open, rs...)
	}
	return open
}

// USD is dollars in micros.
func USD(d int64) keybrake.Micros { return keybrake.Micros(d * 1_000_000) }

// CentsMicros is cents in micros.
func CentsMicros(c int64) keybrake.Micros { return keybrake.Micros(c * 10_000) }
