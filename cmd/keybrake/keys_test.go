package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	main "github.com/keybrake/keybrake/cmd/keybrake"
)

// keybrake keys drives the admin API of a running serve: create, show,
// update, list, revoke, events, and precise errors for bad use.
func TestKeys(t *testing.T) {
	m, _ := MustServe(t, map[string]string{"KEYBRAKE_ADMIN_TOKEN": "kbadm_keys_4f1c9e0b7a2d8c3e5f60"})
	vars := map[string]string{"KEYBRAKE_ADMIN_TOKEN": "kbadm_keys_4f1c9e0b7a2d8c3e5f60", "KEYBRAKE_URL": m.HTTP.URL()}
	var stderr *syncBuffer
	run := func(args ...string) (string, error) {
		env, out := testEnv(vars)
		stderr = &syncBuffer{}
		env.Stderr = stderr // apart from stdout, which must stay JSON
		err := main.Run(context.Background(), append([]string{"keys"}, args...), env)
		return out.String(), err
	}
	out, err := run("create", `{"label":"agent-7","daily_usd_cap":25}`)
	if err != nil {
		t.Fatalf("create: %v %s", err, out)
	}
	// No allowed_endpoints: the default set, said on stderr too.
	if !strings.Contains(stderr.String(), "notice: allowed_endpoints was not given") || !strings.Contains(out, `"charges.create"`) {
		t.Fatalf("create without allowed_endpoints printed %s / %s", out, stderr)
	}
	var k struct {
		ID       string `json:"id"`
		VaultKey string `json:"vault_key"`
	}
	if err := json.Unmarshal([]byte(out), &k); err != nil || !strings.HasPrefix(k.VaultKey, "vault_key_") {
		t.Fatalf("create printed %s", out)
	}
	if out, err := run("update", k.ID, `{"daily_usd_cap":10}`); err != nil || !strings.Contains(out, `"daily_usd_cap": 10.00`) {
		t.Fatalf("update: %v %s", err, out)
	}
	if out, err := run("update", "--allow-secret-reads", k.ID, `{"label":"agent-7b"}`); err != nil || !strings.Contains(out, `"allow_secret_reads": true`) || !strings.Contains(out, `"agent-7b"`) {
		t.Fatalf("update --allow-secret-reads: %v %s", err, out)
	}
	if out, err := run("create", "--allow-secret-reads", `{"allowed_endpoints":["*"]}`); err != nil || !strings.Contains(out, `"allow_secret_reads": true`) || strings.Contains(out, "notices") || stderr.String() != "" {
		t.Fatalf("create --allow-secret-reads: %v %s %s", err, out, stderr)
	}
	if out, err := run("show", k.ID); err != nil || strings.Contains(out, k.VaultKey) || !strings.Contains(out, `"remaining_usd": 10.00`) {
		t.Fatalf("show: %v %s", err, out)
	}
	if out, err := run("list", "--limit", "5"); err != nil || !strings.Contains(out, k.ID) {
		t.Fatalf("list: %v %s", err, out)
	}
	if out, err := run("revoke", k.ID); err != nil || !strings.Contains(out, `"revoked_at": "`) {
		t.Fatalf("revoke: %v %s", err, out)
	}
	if out, err := run("events", k.ID); err != nil || !strings.Contains(out, `"data"`) {
		t.Fatalf("events: %v %s", err, out)
	}
	for name, args := range map[string][]string{
		"ErrNoAction":    {},
		"ErrUnknown":     {"delete", k.ID},
		"ErrBadID":       {"show", "../vault"},
		"ErrBadJSON":     {"create", "{"},
		"ErrAPIRefusal":  {"create", `{"dayly_usd_cap":5}`},
		"ErrNotFound":    {"show", "vk_missing"},
		"ErrLimit":       {"list", "--limit", "0"},
		"ErrUpdateNoArg": {"update", k.ID},
		"ErrSecretTwice": {"create", "--allow-secret-reads", `{"allow_secret_reads":false}`},
		"ErrSecretList":  {"list", "--allow-secret-reads"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := run(args...); err == nil {
				t.Fatalf("keys %v: no error", args)
			}
		})
	}
	t.Run("ErrNoToken", func(t *testing.T) {
		env, _ := testEnv(map[string]string{"KEYBRAKE_URL": m.HTTP.URL()})
		if err := main.Run(context.Background(), []string{"keys", "list"}, env); err == nil || !strings.Contains(err.Error(), "KEYBRAKE_ADMIN_TOKEN") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestKeys_FlagsAfterArguments(t *testing.T) {
	m, _ := MustServe(t, map[string]string{"KEYBRAKE_ADMIN_TOKEN": "kbadm_keys_4f1c9e0b7a2d8c3e5f60"})
	vars := map[string]string{"KEYBRAKE_ADMIN_TOKEN": "kbadm_keys_4f1c9e0b7a2d8c3e5f60", "KEYBRAKE_URL": m.HTTP.URL()}
	var out, errb bytes.Buffer
	env := main.Env{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return vars[k] }}
	if err := main.Run(context.Background(), []string{"keys", "create", `{"allowed_endpoints":["charges.create"]}`}, env); err != nil {
		t.Fatal(err)
	}
	var k struct{ ID string }
	json.Unmarshal(out.Bytes(), &k)
	for _, args := range [][]string{
		{"keys", "events", k.ID, "--limit", "20"},
		{"keys", "rotate", k.ID, "--grace-period", "1h"},
		{"keys", "suspend", k.ID},
		{"keys", "resume", k.ID},
		{"admin-tokens", "create", "grafana", "--role", "viewer"},
		{"admin-tokens", "list"},
	} {
		out.Reset()
		if err := main.Run(context.Background(), args, env); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"keys", "events", k.ID, "--limit", "500"}, "--limit"},
		{[]string{"keys", "rotate", k.ID, "--grace-period", "soon"}, "--grace-period"},
		{[]string{"admin-tokens", "create", "x", "--role", "root"}, "--role"},
	} {
		if err := main.Run(context.Background(), tc.args, env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%v: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}
