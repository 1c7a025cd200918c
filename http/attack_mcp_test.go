package http_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
)

// Red team of /mcp as an agent holding a vault key (2026-12-01).

// /mcp authenticated vault keys without the auth limit of the REST routes:
// an address could try keys there without end, and an address locked out
// on the REST routes still had its guesses answered on /mcp (a 401 for a
// wrong key, 200 for a right one). It now shares the address's bucket.
func TestAttackMCP_AuthLimitBypass(t *testing.T) {
	e := MustOpen(t, func(s *khttp.Server) { s.AuthFailures = khttp.AuthLimit{Burst: 3, Every: time.Hour} })
	_, good := e.CreateKey(t, `{"daily_usd_cap":10}`)
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	for i := range 3 {
		if resp, body := e.Do(t, "POST", "/mcp", init, mcpHeaders("vault_key_wrongwrongwrongwrongwrong", "")); resp.StatusCode != 401 {
			t.Fatalf("guess %d: %d %s, want 401", i, resp.StatusCode, body)
		}
	}
	// The 4th guess, and the right key, are refused alike, on /mcp and on
	// the REST routes: the /mcp failures counted.
	for name, secret := range map[string]string{"guess": "vault_key_wrongwrongwrongwrongwrong", "right key": good} {
		resp, body := e.Do(t, "POST", "/mcp", init, mcpHeaders(secret, ""))
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), `"jsonrpc": "2.0"`) {
			t.Fatalf("/mcp %s while locked out: %d %s", name, resp.StatusCode, body)
		}
	}
	if resp, _ := e.Do(t, "GET", "/v1/charges", "", map[string]string{"Authorization": "Bearer " + good}); resp.StatusCode != 429 {
		t.Fatalf("REST after /mcp failures: %d, want 429", resp.StatusCode)
	}
	// Each failure is audited, as on the REST routes (the admin API is
	// locked out too, so the store is read directly).
	e.Server.FlushAudit()
	es, _, err := e.Store.FindEvents(context.Background(), keybrake.EventFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, ev := range es {
		if ev.Operation == "auth.unauthorized" && ev.Path == "/mcp" {
			failed++
		}
	}
	if failed != 3 {
		t.Fatalf("%d /mcp failures audited, want 3", failed)
	}
}

// The wrapper decided whether a POST was a tools/call with encoding/json,
// which matches names case-insensitively, while the SDK runs what its own
// case-sensitive decoder reads. A revoked key's session sent
// {"method":"tools/list","Method":"tools/call"}: let through as a call (to
// be refused and audited by the request path), the SDK ran tools/list, and
// the revoked key kept a live session reading its tools and budget, with
// nothing audited and the session never ended.
func TestAttackMCP_RevokedSessionSmuggledMethod(t *testing.T) {
	e := MustOpen(t)
	keyID, secret := e.CreateKey(t, `{"daily_usd_cap": 50, "allowed_endpoints": ["refunds.create"]}`)
	sid := rawInitialize(t, e, secret)
	if resp, body := e.Admin(t, "POST", "/vault/keys/"+keyID+"/revoke", ""); resp.StatusCode != 200 {
		t.Fatalf("revoke: %d %s", resp.StatusCode, body)
	}
	for _, msg := range []string{
		`{"jsonrpc":"2.0","id":3,"method":"tools/list","Method":"tools/call"}`,
		`{"jsonrpc":"2.0","id":4,"METHOD":"tools/call","method":"tools/list"}`,
	} {
		resp, body := e.Do(t, "POST", "/mcp", msg, mcpHeaders(secret, sid))
		if resp.StatusCode != 401 || strings.Contains(string(body), "create_refund") {
			t.Fatalf("%s on a revoked key's session: %d %s", msg, resp.StatusCode, body)
		}
	}
	if khttp.MCPSessionOpen(e.Server, sid) {
		t.Fatal("the revoked key's session is still open")
	}
}

// A tool call that needs a person's approval said "Do not retry this call
// as it is: stop, or ask a person to raise the limit", while the approval
// is used only by the same call again under the same idempotency_key. The
// tool error now says so; the approved retry is forwarded once and counted
// once, and the agent has no tool to approve it itself.
func TestAttackMCP_ApprovalThenRetry(t *testing.T) {
	e := MustOpen(t)
	keyID, secret := e.CreateKey(t, `{"daily_usd_cap": 500, "allowed_endpoints": ["*"], "allow_unpriced": true, "approval": {"above_usd": 10}}`)
	pi := e.paymentIntent(t, 10000)
	cs := e.MCP(t, secret, "agent", nil)
	for _, name := range toolNames(t, cs) {
		if strings.Contains(name, "approv") {
			t.Fatalf("the agent has a tool %s", name)
		}
	}
	args := map[string]any{"payment_intent": pi, "amount": 5000}
	res := call(t, cs, "create_refund", args)
	if msg := text(res); !res.IsError || !strings.Contains(msg, "waiting for a person's approval") || !strings.Contains(msg, "no idempotency_key") || strings.Contains(msg, "Do not retry") {
		t.Fatalf("approval without idempotency_key: isError=%v %s", res.IsError, msg)
	}
	args["idempotency_key"] = "ticket-9"
	res = call(t, cs, "create_refund", args)
	msg := text(res)
	if !res.IsError || !strings.Contains(msg, `same idempotency_key ("ticket-9")`) || strings.Contains(msg, "Do not retry") {
		t.Fatalf("approval: isError=%v %s", res.IsError, msg)
	}
	detail := res.StructuredContent.(map[string]any)["error"].(map[string]any)["error"].(map[string]any)["keybrake"].(map[string]any)
	id, _ := detail["approval_id"].(string)
	// Until a person decides, the same call is held again, not forwarded.
	if again := call(t, cs, "create_refund", args); !again.IsError || len(e.Sim.GroundTruth().Refunds) != 0 {
		t.Fatalf("pending retry: isError=%v %s", again.IsError, text(again))
	}
	if resp, body := e.Admin(t, "POST", "/vault/approvals/"+id+"/approve", ""); resp.StatusCode != 200 {
		t.Fatalf("approve %s: %d %s", id, resp.StatusCode, body)
	}
	// Other arguments under the approved idempotency_key are refused.
	if other := call(t, cs, "create_refund", map[string]any{"payment_intent": pi, "amount": 9000, "idempotency_key": "ticket-9"}); !other.IsError {
		t.Fatalf("approved key with another amount: %s", text(other))
	}
	first := mustOK(t, call(t, cs, "create_refund", args))
	second := mustOK(t, call(t, e.MCP(t, secret, "agent", nil), "create_refund", args))
	if first["id"] != second["id"] || len(e.Sim.GroundTruth().Refunds) != 1 {
		t.Fatalf("approved retries made refunds %v and %v (%d upstream)", first["id"], second["id"], len(e.Sim.GroundTruth().Refunds))
	}
	if sp := e.Spend(t, keyID); sp.Day != usd(50) {
		t.Fatalf("spent %s, want 50.00", sp.Day)
	}
}

// gateFirst holds the first POST /v1/refunds upstream until release is
// closed, and lets every later one through at once: a retry that overtakes
// the request it retries.
type gateFirst struct {
	base    http.RoundTripper
	arrived chan struct{} // closed when the first refund is upstream
	release chan struct{}
	once    sync.Once
}

func (g *gateFirst) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/v1/refunds") {
		first := false
		g.once.Do(func() { first = true })
		if first {
			close(g.arrived)
			<-g.release
		}
	}
	return g.base.RoundTrip(r)
}

// An agent called create_refund with an idempotency_key and, while the
// call was upstream, called it again in another session with the same
// idempotency_key (what an agent whose first call timed out does). The
// second call replayed the first's reservation and was forwarded at once;
// it reached Stripe first and made the refund, and the first then got
// Stripe's saved answer (or, on Stripe, a 409 for the key in use), which
// released the reservation they shared: a $30.00 refund moved and $0.00
// was counted against the $50 daily cap. The same holds for any two REST
// requests with one Idempotency-Key. Now a replay of a reservation still
// upstream is refused with Stripe's 409 idempotency_key_in_use, forwarded
// nothing, and the first call settles as usual.
func TestAttackMCP_ConcurrentRetryUncounted(t *testing.T) {
	for name, later := range map[string]bool{"SettleBeforeAnswer": false, "SettleAfterAnswer": true} {
		t.Run(name, func(t *testing.T) { concurrentRetry(t, later) })
	}
}

// concurrentRetry is TestAttackMCP_ConcurrentRetryUncounted; with later,
// successes settle after the answer, and the retry sent right after the
// first call's answer, its settlement possibly still queued, replays.
func concurrentRetry(t *testing.T, later bool) {
	g := &gateFirst{base: http.DefaultTransport, arrived: make(chan struct{}), release: make(chan struct{})}
	e := MustOpen(t, func(s *khttp.Server) { s.Transport = g; s.SettleAfterAnswer = later })
	keyID, secret := e.CreateKey(t, `{"daily_usd_cap": 50, "allowed_endpoints": ["refunds.create"]}`)
	pi := e.paymentIntent(t, 10000)
	args := map[string]any{"payment_intent": pi, "amount": 3000, "idempotency_key": "refund-42"}
	first := make(chan *mcp.CallToolResult, 1)
	go func() {
		cs, err := e.MCPConnect(secret, "agent", nil)
		if err != nil {
			first <- nil
			return
		}
		defer cs.Close()
		res, _ := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_refund", Arguments: args})
		first <- res
	}()
	<-g.arrived
	again := call(t, e.MCP(t, secret, "agent", nil), "create_refund", args)
	close(g.release)
	res := <-first
	if res == nil || res.IsError {
		t.Fatalf("first call failed: %v", res)
	}
	if !again.IsError || !strings.Contains(text(again), "idempotency_key_in_use") {
		t.Fatalf("retry while the first was upstream: isError=%v %s", again.IsError, text(again))
	}
	if n := len(e.Sim.GroundTruth().Refunds); n != 1 {
		t.Fatalf("%d refunds upstream, want 1", n)
	}
	if sp := e.Spend(t, keyID); sp.Day != usd(30) {
		t.Fatalf("a $30.00 refund counted %s", sp.Day)
	}
	// Once answered, the retry replays it.
	if r := mustOK(t, call(t, e.MCP(t, secret, "agent", nil), "create_refund", args)); r["id"] != mustOK(t, res)["id"] {
		t.Fatalf("retry after the answer made refund %v", r["id"])
	}
}
