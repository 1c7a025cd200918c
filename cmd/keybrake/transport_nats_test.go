package main_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	jsapi "github.com/nats-io/nats.go/jetstream"

	"github.com/keybrake/keybrake/billing"
	main "github.com/keybrake/keybrake/cmd/keybrake"
)

// mustNATS starts an embedded NATS server with JetStream.
func mustNATS(tb testing.TB) *server.Server {
	tb.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: tb.TempDir(),
		HTTPHost: "127.0.0.1", HTTPPort: -1, NoLog: true, NoSigs: true})
	if err != nil {
		tb.Fatal(err)
	}
	ns.Start()
	tb.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		tb.Fatal("nats server not ready")
	}
	return ns
}

// `keybrake publish --transport jetstream` twice (deduplicated by
// Nats-Msg-Id), a worker refused for want of a start policy, then
// `keybrake worker --transport jetstream` charging each event once.
func TestWorker_JetStreamEndToEnd(t *testing.T) {
	ns := mustNATS(t)
	m, _ := MustServe(t, map[string]string{"KEYBRAKE_ADMIN_TOKEN": "kbadm_e2e_4f1c9e0b7a2d8c3e5f60"})
	vaultKey := mustVaultKey(t, m, `{"daily_usd_cap":1000,"label":"billing-2026-11"}`)
	var lines []string
	for i := 1; i <= 3; i++ {
		lines = append(lines, fmt.Sprintf(`{"customer_id":"acct_%d","billing_period":"2026-11","amount":%d,"currency":"usd","source":"tok_visa"}`, i, 1000+i))
	}
	file := writeFile(t, "events.jsonl", strings.Join(lines, "\n"))
	env, log := testEnv(map[string]string{"KEYBRAKE_VAULT_KEY": vaultKey, "KEYBRAKE_NAMESPACE": "e2e", "KEYBRAKE_NATS_URL": ns.ClientURL()})
	for range 2 {
		if err := main.Run(context.Background(), []string{"publish", "--transport", "jetstream", "--topic", "billing.events", file}, env); err != nil {
			t.Fatalf("publish: %v\n%s", err, log)
		}
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jsapi.New(nc)
	st, err := js.Stream(context.Background(), "BILLING")
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != 3 {
		t.Fatalf("stream holds %d events, want 3 (the second publish deduplicated)", n)
	}

	args := []string{"worker", "--transport", "jetstream", "--topic", "billing.events", "--upstream", m.HTTP.URL(),
		"--ledger", t.TempDir() + "/ledger.db", "--ack-wait", "2s"}
	if err := main.Run(context.Background(), args, env); err == nil || !strings.Contains(err.Error(), "deliver_policy") {
		t.Fatalf("worker without a start policy = %v, want a refusal naming deliver_policy", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- main.Run(ctx, append(args, "--deliver-policy", "all"), env) }()
	Eventually(t, "every event acknowledged", func() bool {
		select {
		case err := <-done:
			t.Fatalf("worker exited: %v\n%s", err, log)
		default:
		}
		c, err := js.Consumer(context.Background(), "BILLING", "keybrake")
		if err != nil {
			return false
		}
		ci, err := c.Info(context.Background())
		return err == nil && ci.AckFloor.Stream == 3
	})
	cancel()
	if err := Receive(t, done); err != nil {
		t.Fatalf("worker: %v\n%s", err, log)
	}
	keys := map[string]bool{}
	for _, c := range m.Sim.GroundTruth().Charges {
		keys[c.Metadata[billing.MetadataKey]] = true
	}
	if n := len(m.Sim.GroundTruth().Charges); n != 3 || len(keys) != 3 {
		t.Fatalf("%d charges with %d keys, want 3", n, len(keys))
	}
}

func TestWorker_NATSBadConfigNamesField(t *testing.T) {
	base := []string{"worker", "--namespace", "ns", "--vault-key", "vault_key_x"}
	for _, tc := range []struct {
		name string
		args []string
		vars map[string]string
		want string
	}{
		{"ErrDeliverPolicy", append(base, "--transport", "jetstream", "--deliver-policy", "everything"), nil, "--deliver-policy"},
		{"ErrStartSequence", append(base, "--transport", "jetstream", "--deliver-policy", "by_start_sequence"), nil, "--deliver-policy"},
		{"ErrStartSequenceEnv", append(base, "--transport", "jetstream"), map[string]string{"KEYBRAKE_START_SEQUENCE": "x"}, "KEYBRAKE_START_SEQUENCE"},
		{"ErrStartTime", append(base, "--transport", "jetstream", "--deliver-policy", "by_start_time", "--start-time", "yesterday"), nil, "--start-time"},
		{"ErrStream", append(base, "--transport", "jetstream", "--stream", "a.b"), nil, "--stream"},
		{"ErrDurable", append(base, "--transport", "jetstream", "--durable", "a*"), nil, "--durable"},
		{"ErrAckWait", append(base, "--transport", "jetstream", "--ack-wait", "10ms"), nil, "--ack-wait"},
		{"ErrMaxDeliver", append(base, "--transport", "jetstream", "--max-deliver", "-1"), nil, "--max-deliver"},
		{"ErrNATSURL", append(base, "--transport", "nats", "--nats-url", "::"), nil, "--nats-url"},
		{"ErrMonitorURL", append(base, "--transport", "nats", "--nats-monitor-url", "localhost:8222"), nil, "--nats-monitor-url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, _ := testEnv(tc.vars)
			err := main.Run(context.Background(), tc.args, env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

func TestWorker_NATSHelpListsFlags(t *testing.T) {
	env, out := testEnv(nil)
	main.Run(context.Background(), []string{"worker", "--help"}, env)
	for _, f := range []string{"--nats-url", "--stream", "--subject", "--durable", "--deliver-policy", "--queue", "--ack-wait", "--max-deliver", "--dead-letter-subject", "KEYBRAKE_DELIVER_POLICY", "jetstream"} {
		if !strings.Contains(out.String(), strings.TrimPrefix(f, "-")) {
			t.Errorf("worker --help does not mention %s", f)
		}
	}
}
