package http_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/stripe"
)

// replica starts a second keybrake server on the Env's store, simulator and
// clock, as a second replica behind a load balancer would run.
func (e *Env) replica(tb testing.TB) *khttp.Server {
	tb.Helper()
	s := khttp.NewServer()
	s.Addr = "127.0.0.1:0"
	s.Store = e.Store
	s.Upstream = mustURL(tb, e.SimURL)
	s.UpstreamKey = "sk_test_upstream_secret_do_not_leak"
	s.AdminToken = adminToken
	s.Now = e.Clock.Now
	s.Simulated = true
	s.Logger = slog.New(slog.DiscardHandler)
	s.Rates = stripe.Rates{"eur": 1_080_000, "jpy": 6_700, "kwd": 3_250_000}
	if err := s.Open(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// Two replicas on one PostgreSQL store, MCP clients on both spending one
// capped key: the cap holds exactly, as it does for REST clients.
func TestMCPTwoReplicasExactCap(t *testing.T) {
	store := kbtest.Postgres(t)
	e := MustOpen(t, func(s *khttp.Server) { s.Store = store })
	other := e.replica(t)
	keyID, secret := e.CreateKey(t, `{"daily_usd_cap": 50, "allowed_endpoints": ["refunds.create"]}`)
	pi := e.paymentIntent(t, 100000)
	const clients = 40
	var (
		wg              sync.WaitGroup
		mu              sync.Mutex
		allowed, denied int
		failures        []string
	)
	for i := range clients {
		base := e.Server.URL()
		if i%2 == 1 {
			base = other.URL()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := func() (*mcp.CallToolResult, error) {
				cs, err := mcpConnect(base, secret, fmt.Sprintf("agent-%d", i), nil)
				if err != nil {
					return nil, err
				}
				defer cs.Close()
				return cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_refund", Arguments: map[string]any{"payment_intent": pi, "amount": 700}})
			}()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				failures = append(failures, err.Error())
			case res.IsError && strings.Contains(text(res), "spend cap"):
				denied++
			case res.IsError:
				failures = append(failures, text(res))
			default:
				allowed++
			}
		}()
	}
	wg.Wait()
	mcpTransport.CloseIdleConnections()
	if len(failures) > 0 {
		t.Fatalf("%d failures, first: %s", len(failures), failures[0])
	}
	if allowed != 7 || denied != clients-7 {
		t.Fatalf("allowed %d, denied %d; want 7 and %d", allowed, denied, clients-7)
	}
	if n := len(e.Sim.GroundTruth().Refunds); n != 7 {
		t.Fatalf("%d refunds upstream, want 7", n)
	}
	if sp := e.Spend(t, keyID); sp.Day != usd(49) || sp.Uncertain != 0 || sp.Held != 0 {
		t.Fatalf("spend %+v, want 49.00 settled", sp)
	}
	other.FlushAudit()
	if n := len(e.events(t, keyID)); n != clients {
		t.Fatalf("%d events, want %d", n, clients)
	}
}

// A session lives in the replica that opened it. On another replica its
// Mcp-Session-Id is unknown: 404, which the Go SDK's client reports as
// ErrSessionMissing; the client opens a new session there, and a call
// retried with the same idempotency_key replays instead of spending twice.
func TestMCPSessionOnAnotherReplica(t *testing.T) {
	store := kbtest.Postgres(t)
	e := MustOpen(t, func(s *khttp.Server) { s.Store = store })
	other := e.replica(t)
	keyID, secret := e.CreateKey(t, `{"daily_usd_cap": 50, "allowed_endpoints": ["refunds.create"]}`)
	pi := e.paymentIntent(t, 10000)
	args := map[string]any{"payment_intent": pi, "amount": 3000, "idempotency_key": "refund-order-42"}

	cs := e.MCP(t, secret, "agent", nil)
	first := mustOK(t, call(t, cs, "create_refund", args))

	req, err := http.NewRequest("POST", other.URL()+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range mcpHeaders(secret, cs.ID()) {
		req.Header.Set(k, v)
	}
	resp, err := mcpTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("session of replica A on replica B: %d, want 404", resp.StatusCode)
	}

	again, err := mcpConnect(other.URL(), secret, "agent", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		again.Close()
		mcpTransport.CloseIdleConnections()
	})
	if again.ID() == cs.ID() {
		t.Fatal("replica B reused replica A's session ID")
	}
	replay := mustOK(t, call(t, again, "create_refund", args))
	if replay["id"] != first["id"] {
		t.Fatalf("retry on replica B made refund %v after %v", replay["id"], first["id"])
	}
	if n := len(e.Sim.GroundTruth().Refunds); n != 1 {
		t.Fatalf("%d refunds upstream, want 1", n)
	}
	if sp := e.Spend(t, keyID); sp.Day != usd(30) {
		t.Fatalf("spent %s, want 30.00", sp.Day)
	}
}
