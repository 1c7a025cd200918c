package http_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	khttp "github.com/keybrake/keybrake/http"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestAccessLog(t *testing.T) {
	var buf syncBuf
	e := MustOpen(t, func(s *khttp.Server) { s.Logger = slog.New(slog.NewJSONHandler(&buf, nil)) })
	id, secret := e.CreateKey(t, `{"allowed_endpoints":["charges.create"]}`)
	chargeAs(t, e, secret)
	chargeAs(t, e, "vault_key_unknownunknownunknownunknown")
	var lines []map[string]any
	for _, l := range strings.Split(buf.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "proxied request" {
			lines = append(lines, m)
		}
	}
	if len(lines) != 2 {
		t.Fatalf("access lines = %d, want 2:\n%s", len(lines), buf.String())
	}
	ok := lines[0]
	if ok["key_id"] != id || ok["operation"] != "charges.create" || ok["decision"] != "allow" || ok["amount"] != float64(100) || ok["request_id"] == "" || ok["latency"] == nil {
		t.Fatalf("allowed line: %v", ok)
	}
	if lines[1]["decision"] != "deny" {
		t.Fatalf("unknown key line: %v", lines[1])
	}
	for _, secretish := range []string{secret, "vault_key_unknown", "sk_test_upstream_secret_do_not_leak", "Bearer"} {
		if strings.Contains(buf.String(), secretish) {
			t.Fatalf("the log carries %q", secretish)
		}
	}
}
