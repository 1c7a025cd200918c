package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/billing"
	main "github.com/keybrake/keybrake/cmd/keybrake"
	"github.com/keybrake/keybrake/sqlite"
)

// mustVaultKey creates a vault key on serve through the admin API.
func mustVaultKey(tb testing.TB, m *main.ServeMain, body string) string {
	tb.Helper()
	req, _ := http.NewRequest("POST", m.HTTP.URL()+"/vault/keys", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+m.HTTP.AdminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		VaultKey string `json:"vault_key"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || v.VaultKey == "" {
		tb.Fatalf("create vault key: %d %v", resp.StatusCode, err)
	}
	return v.VaultKey
}

// The whole path in-process: `keybrake serve` (simulator upstream),
// `keybrake publish` to a real nsqd, `keybrake worker --transport nsq`
// charging through serve with a vault key until SIGTERM (ctx canceled).
func TestWorker_EndToEnd(t *testing.T) {
	n := MustNSQD(t)
	addr := n.RealTCPAddr().String()
	m, _ := MustServe(t, map[string]string{"KEYBRAKE_ADMIN_TOKEN": "kbadm_e2e_4f1c9e0b7a2d8c3e5f60"})
	vaultKey := mustVaultKey(t, m, `{"daily_usd_cap":1000,"label":"billing-2026-11"}`)

	var lines []string
	for i := 1; i <= 4; i++ {
		lines = append(lines, fmt.Sprintf(`{"customer_id":"acct_%d","billing_period":"2026-11","amount":%d,"currency":"usd","source":"tok_visa"}`, i, 1000+i))
	}
	lines = append(lines, `{"customer_id":"acct_declined","billing_period":"2026-11","amount":500,"currency":"usd","source":"tok_chargeDeclined"}`)
	lines = append(lines, lines[0]) // published twice: charged once
	out, err := runPublish(t, addr, writeFile(t, "events.jsonl", strings.Join(lines, "\n")))
	if err != nil || !strings.Contains(out, "published 6 of 6") {
		t.Fatalf("publish: %v\n%s", err, out)
	}

	ledger := filepath.Join(t.TempDir(), "ledger.db")
	env, log := testEnv(map[string]string{"KEYBRAKE_VAULT_KEY": vaultKey})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- main.Run(ctx, []string{"worker", "--transport", "nsq", "--nsqd", addr, "--topic", "billing",
			"--upstream", m.HTTP.URL(), "--ledger", ledger, "--namespace", "e2e", "--msg-timeout", "1s", "--concurrency", "2",
			// The duplicate may arrive while the first copy holds the lease;
			// it is retried when the lease ends.
			"--lease", "1s"}, env)
	}()
	Eventually(t, "every message to be acknowledged", func() bool {
		select {
		case err := <-done:
			t.Fatalf("worker exited: %v\n%s", err, log)
		default:
		}
		// The channel's counters alone can read empty while a message moves
		// from its queue to in-flight: wait for the five outcomes upstream
		// too (a missing one fails the test here, by the deadline).
		c := channelStats(n, "billing", "keybrake")
		return c.MessageCount == 6 && c.Depth == 0 && c.InFlightCount == 0 && c.DeferredCount == 0 &&
			len(m.Sim.GroundTruth().Charges) >= 5
	})
	cancel() // SIGTERM
	if err := Receive(t, done); err != nil {
		t.Fatalf("worker: %v\n%s", err, log)
	}
	if !strings.Contains(log.String(), "shutting down") {
		t.Errorf("no shutdown line in the log:\n%s", log)
	}

	keys := map[string]bool{}
	succeeded, failed := 0, 0
	for _, c := range m.Sim.GroundTruth().Charges {
		switch c.Status {
		case "succeeded":
			succeeded++
		case "failed":
			failed++
		}
		if keys[c.Metadata[billing.MetadataKey]] {
			t.Errorf("two charges with key %s", c.Metadata[billing.MetadataKey])
		}
		keys[c.Metadata[billing.MetadataKey]] = true
	}
	if succeeded != 4 || failed != 1 {
		t.Fatalf("%d succeeded and %d failed charges, want 4 and 1", succeeded, failed)
	}

	s, err := sqlite.Open(ledger)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	states := map[string]int{}
	entries, _, err := s.FindEntries(context.Background(), keybrake.EntryFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		states[e.State]++
		if !strings.HasPrefix(e.Key, "kb_e2e_") {
			t.Errorf("key %s is not in namespace e2e", e.Key)
		}
	}
	if states[keybrake.EntryCharged] != 4 || states[keybrake.EntryDeclined] != 1 || len(entries) != 5 {
		t.Fatalf("ledger states %v", states)
	}
}

func TestWorker_BadConfigNamesField(t *testing.T) {
	base := []string{"worker", "--nsqd", "127.0.0.1:4150", "--namespace", "ns", "--vault-key", "vault_key_x"}
	for _, tc := range []struct {
		name string
		args []string
		vars map[string]string
		want string
	}{
		{"ErrNamespace", []string{"worker", "--nsqd", "127.0.0.1:4150", "--vault-key", "vault_key_x"}, nil, "--namespace"},
		{"ErrNamespaceChars", append(base, "--namespace", "a b"), nil, "--namespace"},
		{"ErrVaultKey", []string{"worker", "--nsqd", "127.0.0.1:4150", "--namespace", "ns"}, nil, "--vault-key"},
		{"ErrUpstreamPath", append(base, "--upstream", "http://127.0.0.1:8080/stripe"), nil, "--upstream"},
		{"ErrUpstreamScheme", append(base, "--upstream", "127.0.0.1:8080"), nil, "--upstream"},
		{"ErrTransport", append(base, "--transport", "kafka"), nil, "--transport"},
		{"ErrNoBroker", []string{"worker", "--namespace", "ns", "--vault-key", "k"}, nil, "--nsqd"},
		{"ErrBothBrokers", append(base, "--lookupd", "127.0.0.1:4161"), nil, "--lookupd"},
		{"ErrMaxAttempts", append(base, "--max-attempts", "0"), nil, "--max-attempts"},
		{"ErrMaxAttemptsEnv", base, map[string]string{"KEYBRAKE_MAX_ATTEMPTS": "many"}, "KEYBRAKE_MAX_ATTEMPTS"},
		{"ErrMsgTimeout", append(base, "--msg-timeout", "10ms"), nil, "--msg-timeout"},
		{"ErrDeadLetterTopic", append(base, "--dead-letter-topic", "billing"), nil, "--dead-letter-topic"},
		{"ErrConcurrency", append(base, "--concurrency", "0"), nil, "--concurrency"},
		{"ErrLogFormat", append(base, "--log-format", "xml"), nil, "--log-format"},
		{"ErrVaultKeyFile", []string{"worker", "--nsqd", "127.0.0.1:4150", "--namespace", "ns", "--vault-key-file", "/nonexistent/key"}, nil, "--vault-key-file"},
		{"ErrArgs", append(base, "extra"), nil, "no arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, _ := testEnv(tc.vars)
			err := main.Run(context.Background(), tc.args, env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v: %v, want an error naming %s", tc.args, err, tc.want)
			}
		})
	}
}

func TestWorker_Help(t *testing.T) {
	env, out := testEnv(nil)
	if err := main.Run(context.Background(), []string{"worker", "--help"}, env); err == nil {
		t.Fatal("--help did not return flag.ErrHelp")
	}
	for _, f := range []string{"--transport", "KEYBRAKE_NSQD", "KEYBRAKE_VAULT_KEY", "KEYBRAKE_LEDGER", "KEYBRAKE_NAMESPACE",
		"KEYBRAKE_MAX_ATTEMPTS", "KEYBRAKE_DEAD_LETTER_TOPIC", "KEYBRAKE_WORKER_UPSTREAM", "KEYBRAKE_NSQLOOKUPD"} {
		if !strings.Contains(out.String(), strings.TrimPrefix(f, "--")) {
			t.Errorf("help does not mention %s:\n%s", f, out)
		}
	}
}
