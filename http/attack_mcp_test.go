package http_test

import (
	"context"
	"strings"
	"testing"
	"time"

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
