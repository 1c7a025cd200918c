package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	stripego "github.com/stripe/stripe-go/v82"

	main "github.com/keybrake/keybrake/cmd/keybrake"
)

// syncBuffer is a goroutine-safe buffer for a command's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testEnv(vars map[string]string) (main.Env, *syncBuffer) {
	out := &syncBuffer{}
	return main.Env{Stdout: out, Stderr: out, Getenv: func(k string) string { return vars[k] }}, out
}

// MustServe starts `keybrake serve` in-process on 127.0.0.1:0 with a SQLite
// file in a temp dir and no Stripe secret: the embedded defaults.
func MustServe(tb testing.TB, vars map[string]string, args ...string) (*main.ServeMain, *syncBuffer) {
	tb.Helper()
	env, out := testEnv(vars)
	m := main.NewServeMain(env)
	args = append([]string{"--addr", "127.0.0.1:0", "--db", filepath.Join(tb.TempDir(), "keybrake.db")}, args...)
	if err := m.ParseFlags(args); err != nil {
		tb.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	return m, out
}

// The newcomer's path of README.md: serve on the embedded defaults, create a
// vault key with the admin API, charge with stripe-go until the cap refuses,
// read spend and audit trail, revoke, get 401.
func TestServe_NewcomerPath(t *testing.T) {
	m, out := MustServe(t, map[string]string{})
	base := m.HTTP.URL()
	log := out.String()
	if !strings.Contains(log, "SIMULATOR") {
		t.Fatalf("serve did not say loudly that the upstream is the simulator:\n%s", log)
	}
	token := m.HTTP.AdminToken
	if !strings.Contains(log, token) || !strings.HasPrefix(token, "kbadm_") {
		t.Fatalf("generated admin token not printed:\n%s", log)
	}

	admin := func(method, path, body string) (int, []byte) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	status, body := admin("POST", "/vault/keys", `{"vendor":"stripe","label":"demo","daily_usd_cap":25,"allowed_endpoints":["/v1/charges"]}`)
	if status != 201 {
		t.Fatalf("create: %d %s", status, body)
	}
	var key struct {
		ID, VaultKey string `json:"-"`
	}
	var raw map[string]any
	json.Unmarshal(body, &raw)
	key.ID, key.VaultKey = raw["id"].(string), raw["vault_key"].(string)

	sc := stripego.NewClient(key.VaultKey, stripego.WithBackends(stripego.NewBackendsWithConfig(&stripego.BackendConfig{
		URL: stripego.String(base), MaxNetworkRetries: stripego.Int64(2),
		LeveledLogger: &stripego.LeveledLogger{Level: stripego.LevelNull},
	})))
	params := func() *stripego.ChargeCreateParams {
		return &stripego.ChargeCreateParams{Amount: stripego.Int64(1000), Currency: stripego.String("usd"), Source: &stripego.PaymentSourceSourceParams{Token: stripego.String("tok_visa")}}
	}
	for i := 0; i < 2; i++ {
		if _, err := sc.V1Charges.Create(context.Background(), params()); err != nil {
			t.Fatal(err)
		}
	}
	_, err := sc.V1Charges.Create(context.Background(), params())
	se, ok := err.(*stripego.Error)
	if !ok || se.HTTPStatusCode != 429 || !strings.Contains(se.Msg, "daily cap of $25.00") {
		t.Fatalf("third charge: %v", err)
	}
	if n := len(m.Sim.GroundTruth().Charges); n != 2 {
		t.Fatalf("%d charges upstream, want 2 (the SDK's retries must not pass a 429 with Stripe-Should-Retry: false)", n)
	}
	_, body = admin("GET", "/vault/keys/"+key.ID, "")
	if !strings.Contains(string(body), `"spent_usd": 20.00`) {
		t.Fatalf("spend not shown: %s", body)
	}
	_, body = admin("GET", "/vault/keys/"+key.ID+"/events", "")
	if strings.Count(string(body), `"decision": "allow"`) != 2 || strings.Count(string(body), `"decision": "deny"`) != 1 {
		t.Fatalf("audit trail: %s", body)
	}
	if status, body = admin("POST", "/vault/keys/"+key.ID+"/revoke", ""); status != 200 {
		t.Fatalf("revoke: %d %s", status, body)
	}
	_, err = sc.V1Charges.Create(context.Background(), params())
	if se, ok := err.(*stripego.Error); !ok || se.HTTPStatusCode != 401 {
		t.Fatalf("after revoke: %v", err)
	}
	if strings.Contains(out.String(), "sk_test_keybrake_simulator") {
		t.Fatal("the upstream secret appeared in the log")
	}
}

func TestServe_BadConfigNamesField(t *testing.T) {
	for name, tc := range map[string]struct {
		vars map[string]string
		args []string
		want string
	}{
		"Addr":        {nil, []string{"--addr", "nohostport"}, "--addr"},
		"Upstream":    {map[string]string{"STRIPE_SECRET_KEY": "sk_test_x"}, []string{"--upstream", "ftp://x"}, "--upstream"},
		"Secret":      {map[string]string{"STRIPE_SECRET_KEY": "vault_key_abc"}, nil, "STRIPE_SECRET_KEY"},
		"Rates":       {nil, []string{"--rates", "eur=abc"}, "--rates"},
		"RatesEnv":    {map[string]string{"KEYBRAKE_RATES": "zzz=1"}, nil, "KEYBRAKE_RATES"},
		"Interval":    {map[string]string{"KEYBRAKE_RESOLVE_INTERVAL": "soon"}, nil, "--resolve-interval"},
		"LogFormat":   {nil, []string{"--log-format", "xml"}, "--log-format"},
		"SecretFile":  {nil, []string{"--stripe-secret-file", "/nonexistent/secret"}, "--stripe-secret-file"},
		"BothSecrets": {map[string]string{"STRIPE_SECRET_KEY": "sk_test_x", "KEYBRAKE_STRIPE_SECRET_FILE": "/etc/hostname"}, nil, "STRIPE_SECRET_KEY"},
		"SentShort":   {nil, []string{"--sent-retention", "7d"}, "--sent-retention"},
		"SentEnv":     {map[string]string{"KEYBRAKE_SENT_RETENTION": "soon"}, nil, "KEYBRAKE_SENT_RETENTION"},
	} {
		t.Run(name, func(t *testing.T) {
			env, _ := testEnv(tc.vars)
			m := main.NewServeMain(env)
			args := append([]string{"--db", filepath.Join(t.TempDir(), "k.db")}, tc.args...)
			err := m.ParseFlags(args)
			if err == nil {
				err = m.Run(context.Background())
				m.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %s", err, tc.want)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	env, out := testEnv(nil)
	if err := main.Run(context.Background(), []string{"help"}, env); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"serve", "stripesim", "bench", "worker", "publish", "reconcile", "broker", "keys", "chaos"} {
		if !strings.Contains(out.String(), cmd) {
			t.Fatalf("help lacks %s:\n%s", cmd, out)
		}
		env, out := testEnv(nil)
		err := main.Run(context.Background(), []string{cmd, "--help"}, env)
		if err == nil || !strings.Contains(out.String(), "Usage: keybrake "+cmd) {
			t.Fatalf("%s --help: %v\n%s", cmd, err, out)
		}
	}
}
