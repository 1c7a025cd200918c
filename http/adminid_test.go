package http_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	khttp "github.com/keybrake/keybrake/http"
)

func TestAdminTokens(t *testing.T) {
	e := MustOpen(t)
	as := func(token, method, path, body string) (int, []byte) {
		t.Helper()
		resp, b := e.Do(t, method, path, body, map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json"})
		return resp.StatusCode, b
	}
	resp, body := e.Admin(t, "POST", "/vault/admin_tokens", `{"name":"grafana","role":"viewer"}`)
	if resp.StatusCode != 201 {
		t.Fatalf("create viewer: %d %s", resp.StatusCode, body)
	}
	var created struct {
		Token     string `json:"token"`
		CreatedBy string `json:"created_by"`
	}
	json.Unmarshal(body, &created)
	viewer := created.Token
	if !strings.HasPrefix(viewer, "kbadm_") || created.CreatedBy != "env" {
		t.Fatalf("created: %s", body)
	}
	resp, body = e.Admin(t, "POST", "/vault/admin_tokens", `{"name":"ops","role":"admin"}`)
	json.Unmarshal(body, &created)
	ops := created.Token

	t.Run("ViewerReads", func(t *testing.T) {
		if st, b := as(viewer, "GET", "/vault/keys", ""); st != 200 {
			t.Fatalf("viewer list: %d %s", st, b)
		}
	})
	t.Run("ErrViewerWrites", func(t *testing.T) {
		if st, b := as(viewer, "POST", "/vault/keys", `{"daily_usd_cap":1}`); st != 403 || !strings.Contains(string(b), "grafana") {
			t.Fatalf("viewer create: %d %s", st, b)
		}
		if st, _ := as(viewer, "POST", "/vault/admin_tokens", `{"name":"x","role":"admin"}`); st != 403 {
			t.Fatalf("viewer made a token: %d", st)
		}
	})
	t.Run("ActionsNamed", func(t *testing.T) {
		st, b := as(ops, "POST", "/vault/keys", `{"daily_usd_cap":1,"label":"by-ops"}`)
		if st != 201 {
			t.Fatalf("ops create: %d %s", st, b)
		}
		_, audit := e.Admin(t, "GET", "/vault/audit?limit=100", "")
		var l struct {
			Data []struct{ Actor, Action, Target, Detail string }
		}
		json.Unmarshal(audit, &l)
		want := map[string]string{"key.create": "ops", "token.create": "env"}
		for _, ev := range l.Data {
			if a, ok := want[ev.Action]; ok && ev.Actor == a {
				delete(want, ev.Action)
			}
		}
		if len(want) > 0 {
			t.Fatalf("missing audited actions %v in %s", want, audit)
		}
		if strings.Contains(string(audit), ops) || strings.Contains(string(audit), viewer) {
			t.Fatal("a token appears in the audit log")
		}
	})
	t.Run("ErrRevoked", func(t *testing.T) {
		if st, b := as(ops, "POST", "/vault/admin_tokens/grafana/revoke", ""); st != 200 {
			t.Fatalf("revoke: %d %s", st, b)
		}
		if st, _ := as(viewer, "GET", "/vault/keys", ""); st != 401 {
			t.Fatalf("revoked viewer: %d, want 401", st)
		}
	})
	t.Run("ErrNameReused", func(t *testing.T) {
		if resp, b := e.Admin(t, "POST", "/vault/admin_tokens", `{"name":"grafana","role":"viewer"}`); resp.StatusCode != 400 {
			t.Fatalf("reused name: %d %s", resp.StatusCode, b)
		}
	})
	t.Run("ListShowsNoSecrets", func(t *testing.T) {
		_, b := e.Admin(t, "GET", "/vault/admin_tokens", "")
		if strings.Contains(string(b), ops) || !strings.Contains(string(b), `"env"`) || !strings.Contains(string(b), `"ops"`) {
			t.Fatalf("list: %s", b)
		}
	})
}

func TestAdminTokens_File(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens")
	alice := "kbadm_4f1c9e0b7a2d8c3e5f60718293a4b5c6"
	write := func(body string, mtime time.Time) {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(path, mtime, mtime)
	}
	write("# name role token\nalice admin "+alice+"\n", time.Now().Add(-time.Hour))
	toks, err := khttp.LoadAdminTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	e := MustOpen(t, func(s *khttp.Server) { s.AdminTokens = toks })
	call := func(tok string) int {
		resp, _ := e.Do(t, "GET", "/vault/keys", "", map[string]string{"Authorization": "Bearer " + tok})
		return resp.StatusCode
	}
	if st := call(alice); st != 200 {
		t.Fatalf("file token: %d", st)
	}
	t.Run("ReloadedOnChange", func(t *testing.T) {
		write("alice viewer sha256:"+khttp.HashSecret(alice)+"\n", time.Now())
		deadline := time.Now().Add(5 * time.Second)
		for {
			resp, _ := e.Do(t, "POST", "/vault/keys", `{"daily_usd_cap":1}`, map[string]string{"Authorization": "Bearer " + alice, "Content-Type": "application/json"})
			if resp.StatusCode == 403 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("role change not picked up: %d", resp.StatusCode)
			}
			time.Sleep(100 * time.Millisecond) // polling for the reload
		}
	})
	t.Run("ErrWeakToken", func(t *testing.T) {
		bad := filepath.Join(dir, "weak")
		os.WriteFile(bad, []byte("bob admin kbadm_password\n"), 0o600)
		if _, err := khttp.LoadAdminTokens(bad); err == nil || !strings.Contains(err.Error(), "weak:1") {
			t.Fatalf("weak token accepted: %v", err)
		}
	})
}

func TestCheckTokenStrength(t *testing.T) {
	for _, tc := range []struct {
		tok string
		ok  bool
	}{
		{"adm", false},
		{"kbadm_replicas_test", false},
		{"kbadm_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false},
		{"kbadm_4f1c9e0b7a2d8c3e5f607182", true},
		{"Zq8vN2xL0pR7tY4wK9mB3cF6hJ1s", true},
	} {
		if err := khttp.CheckTokenStrength(tc.tok); (err == nil) != tc.ok {
			t.Errorf("CheckTokenStrength(%q) = %v, want ok=%v", tc.tok, err, tc.ok)
		}
	}
}
