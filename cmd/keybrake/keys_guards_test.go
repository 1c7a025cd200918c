package main_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	main "github.com/keybrake/keybrake/cmd/keybrake"
)

func TestKeys_Guards(t *testing.T) {
	m, _ := MustServe(t, map[string]string{"KEYBRAKE_ADMIN_TOKEN": "kbadm_keys_4f1c9e0b7a2d8c3e5f60"})
	vars := map[string]string{"KEYBRAKE_ADMIN_TOKEN": "kbadm_keys_4f1c9e0b7a2d8c3e5f60", "KEYBRAKE_URL": m.HTTP.URL()}
	run := func(args ...string) (string, error) {
		env, out := testEnv(vars)
		env.Stderr = &syncBuffer{}
		err := main.Run(context.Background(), append([]string{"keys"}, args...), env)
		return out.String(), err
	}
	out, err := run("create", "--guards", `{"duplicate":{"window_seconds":600}}`, `{"allowed_endpoints":["charges.create"]}`)
	if err != nil || !strings.Contains(out, `"window_seconds": 600`) {
		t.Fatalf("create --guards: %v %s", err, out)
	}
	var k struct{ ID string }
	if err := json.Unmarshal([]byte(out), &k); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "guards.json")
	os.WriteFile(file, []byte(`{"velocity":[{"name":"per_minute","per":"key","limit":60,"window_seconds":60,"window_kind":"fixed"}]}`), 0o600)
	if out, err := run("update", k.ID, "{}", "--guards", "@"+file); err != nil || !strings.Contains(out, `"per_minute"`) || strings.Contains(out, `"duplicate"`) {
		t.Fatalf("update --guards @file: %v %s", err, out)
	}
	if out, err := run("update", k.ID, "{}", "--guards", "{}"); err != nil || strings.Contains(out, `"per_minute"`) {
		t.Fatalf("update --guards {} (remove): %v %s", err, out)
	}
	if out, err := run("suspend", k.ID); err != nil || !strings.Contains(out, `"suspended_at": "`) {
		t.Fatalf("suspend: %v %s", err, out)
	}
	if out, err := run("resume", k.ID); err != nil || strings.Contains(out, `"suspended_at": "`) {
		t.Fatalf("resume: %v %s", err, out)
	}
	for name, args := range map[string][]string{
		"ErrUnknownField": {"update", k.ID, "{}", "--guards", `{"velocty":[]}`},
		"ErrBadKind":      {"update", k.ID, "{}", "--guards", `{"velocity":[{"name":"v","per":"key","limit":1,"window_seconds":60,"window_kind":"rolling"}]}`},
		"ErrReadsField":   {"update", k.ID, "{}", "--guards", `{"velocity":[{"name":"v","per":"key","limit":1,"window_seconds":60,"include_reads":true}]}`},
		"ErrBadCEL":       {"update", k.ID, "{}", "--guards", `{"rules":[{"name":"r","expr":"amount <="}]}`},
		"ErrTwice":        {"update", k.ID, `{"guards":{}}`, "--guards", "{}"},
		"ErrNoFile":       {"update", k.ID, "{}", "--guards", "@/nonexistent/guards.json"},
		"ErrOnShow":       {"show", k.ID, "--guards", "{}"},
	} {
		t.Run(name, func(t *testing.T) {
			if out, err := run(args...); err == nil {
				t.Fatalf("keys %v: no error: %s", args, out)
			}
		})
	}
}
