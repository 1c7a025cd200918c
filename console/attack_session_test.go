package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestAttackConsole_RevokedTokenKeepsAuditStream: a console session kept
// the admin token it signed in with, and the console reads the audit log
// from the store itself; only pages that also asked the admin API noticed
// the token's revocation. An operator whose named token was revoked (they
// left, or the token leaked) kept streaming every key's audit events from
// /console/events/stream, and could open new streams, for the rest of the
// session's 12 hours. The session now ends, and its open streams with it,
// once the admin API no longer accepts its token.
func TestAttackConsole_RevokedTokenKeepsAuditStream(t *testing.T) {
	s := MustConsole(t, nil)
	resp, out := adminJSON(t, s.URL(), "POST", "/vault/admin_tokens", `{"name":"leaver","role":"viewer"}`)
	var v struct {
		Token string `json:"token"`
	}
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(out, &v) != nil || v.Token == "" {
		t.Fatalf("create token: %d %s", resp.StatusCode, out)
	}
	c := newClient(t, s.URL())
	c.signInWith(v.Token)

	open := func(ctx context.Context) *http.Response {
		req, err := http.NewRequestWithContext(ctx, "GET", s.URL()+"/console/events/stream?after=0", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// The guard only bounds a failing run; a passing one ends the stream
	// at its next token check (every 6 polls of 50 ms).
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	live := open(ctx)
	defer live.Body.Close()
	if live.StatusCode != http.StatusOK {
		t.Fatalf("stream before the revocation: %d", live.StatusCode)
	}
	if resp, out := adminJSON(t, s.URL(), "POST", "/vault/admin_tokens/leaver/revoke", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke: %d %s", resp.StatusCode, out)
	}
	fresh := open(ctx)
	fresh.Body.Close()
	if fresh.StatusCode != http.StatusUnauthorized {
		t.Errorf("a new audit stream of the revoked token's session: %d, want 401", fresh.StatusCode)
	}
	if resp, _ := c.do("GET", "/console/events", nil, nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("the audit log page of the revoked token's session: %d, want a redirect to sign in", resp.StatusCode)
	}
	if _, err := io.Copy(io.Discard, live.Body); err != nil || ctx.Err() != nil {
		t.Errorf("the open audit stream did not end after its token was revoked: %v", err)
	}
}
