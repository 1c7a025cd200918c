package main_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keybrake/keybrake/billing"
	main "github.com/keybrake/keybrake/cmd/keybrake"
	"github.com/keybrake/keybrake/stripesim"
)

// freeEndpoint returns tcp://127.0.0.1:<a port that was free a moment ago>.
func freeEndpoint(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return "tcp://" + l.Addr().String()
}

// zmqEvents is the publish input of the ZeroMQ end-to-end tests: four
// charges, a decline, and the first event again.
func zmqEvents(tb testing.TB) string {
	var lines []string
	for i := 1; i <= 4; i++ {
		lines = append(lines, fmt.Sprintf(`{"customer_id":"acct_%d","billing_period":"2026-11","amount":%d,"currency":"usd","source":"tok_visa"}`, i, 1000+i))
	}
	lines = append(lines, `{"customer_id":"acct_declined","billing_period":"2026-11","amount":500,"currency":"usd","source":"tok_chargeDeclined"}`)
	lines = append(lines, lines[0])
	return writeFile(tb, "events.jsonl", strings.Join(lines, "\n"))
}

// mustOneChargeEach fails unless the simulator holds 4 succeeded charges and
// 1 failed one, one per key.
func mustOneChargeEach(tb testing.TB, charges []stripesim.Charge) {
	tb.Helper()
	keys := map[string]bool{}
	succeeded, failed := 0, 0
	for _, c := range charges {
		switch c.Status {
		case "succeeded":
			succeeded++
		case "failed":
			failed++
		}
		k := c.Metadata[billing.MetadataKey]
		if keys[k] || !strings.HasPrefix(k, "kb_e2e_") {
			tb.Errorf("charge %s has key %q: a duplicate or not in namespace e2e", c.ID, k)
		}
		keys[k] = true
	}
	if succeeded != 4 || failed != 1 {
		tb.Fatalf("%d succeeded and %d failed charges, want 4 and 1", succeeded, failed)
	}
}

// The whole path in-process for each ZeroMQ pattern: `keybrake serve`
// (simulator upstream), `keybrake worker --transport zmq-…`, and `keybrake
// publish --transport` its producer, twice: the second run charges nothing
// new.
func TestWorker_ZMQEndToEnd(t *testing.T) {
	for _, tc := range []struct {
		worker, producer string
		ack              bool
	}{
		{"zmq-rep", "zmq-req", false},
		{"zmq-pull", "zmq-push", true},
		{"zmq-router", "zmq-dealer", false},
	} {
		t.Run(tc.worker, func(t *testing.T) {
			m, _ := MustServe(t, map[string]string{"KEYBRAKE_ADMIN_TOKEN": "kbadm_e2e_4f1c9e0b7a2d8c3e5f60"})
			vaultKey := mustVaultKey(t, m, `{"daily_usd_cap":1000,"label":"billing-2026-11"}`)
			endpoint := freeEndpoint(t)
			var ack []string
			if tc.ack {
				ack = []string{"--ack-endpoint", freeEndpoint(t)}
			}

			env, log := testEnv(map[string]string{"KEYBRAKE_VAULT_KEY": vaultKey})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- main.Run(ctx, append([]string{"worker", "--transport", tc.worker, "--bind", endpoint,
					"--upstream", m.HTTP.URL(), "--ledger", filepath.Join(t.TempDir(), "ledger.db"), "--namespace", "e2e"}, ack...), env)
			}()

			events := zmqEvents(t)
			for run := 1; run <= 2; run++ {
				penv, out := testEnv(map[string]string{"KEYBRAKE_NAMESPACE": "e2e"})
				args := append([]string{"publish", "--transport", tc.producer, "--connect", endpoint, "--zmq-timeout", "2s"}, ack...)
				err := main.Run(context.Background(), append(args, events), penv)
				if err != nil || !strings.Contains(out.String(), "published 6 of 6") {
					t.Fatalf("publish run %d: %v\n%s\nworker log:\n%s", run, err, out, log)
				}
				mustOneChargeEach(t, m.Sim.GroundTruth().Charges)
			}

			cancel() // SIGTERM
			if err := Receive(t, done); err != nil {
				t.Fatalf("worker: %v\n%s", err, log)
			}
		})
	}
}

func TestWorker_ZMQBadConfigNamesField(t *testing.T) {
	worker := []string{"worker", "--namespace", "ns", "--vault-key", "vault_key_x"}
	publish := []string{"publish", "--zmq-namespace", "ns"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"ErrWorkerIsNotProducer", append(publish, "--transport", "zmq-rep", "--connect", "tcp://127.0.0.1:5555"), "publish with zmq-req"},
		{"ErrProducerIsNotWorker", append(worker, "--transport", "zmq-dealer", "--connect", "tcp://127.0.0.1:5555"), "run the worker with zmq-router"},
		{"ErrNoEndpoint", append(worker, "--transport", "zmq-rep"), "--bind"},
		{"ErrBothEndpoints", append(worker, "--transport", "zmq-rep", "--bind", "tcp://127.0.0.1:5555", "--connect", "tcp://127.0.0.1:5556"), "--connect"},
		{"ErrEndpointScheme", append(worker, "--transport", "zmq-rep", "--bind", "127.0.0.1:5555"), "--bind"},
		{"ErrEndpointPort", append(worker, "--transport", "zmq-router", "--bind", "tcp://127.0.0.1"), "--bind"},
		{"ErrPullNoAck", append(worker, "--transport", "zmq-pull", "--bind", "tcp://127.0.0.1:5555"), "--ack-endpoint"},
		{"ErrAckNotPull", append(worker, "--transport", "zmq-rep", "--bind", "tcp://127.0.0.1:5555", "--ack-endpoint", "tcp://127.0.0.1:5556"), "--ack-endpoint"},
		{"ErrAckEndpoint", append(worker, "--transport", "zmq-pull", "--bind", "tcp://127.0.0.1:5555", "--ack-endpoint", "udp://x"), "--ack-endpoint"},
		{"ErrReqBinds", append(publish, "--transport", "zmq-req", "--bind", "tcp://127.0.0.1:5555"), "--bind"},
		{"ErrPushNoAck", append(publish, "--transport", "zmq-push", "--connect", "tcp://127.0.0.1:5555"), "--ack-endpoint"},
		{"ErrNamespace", []string{"publish", "--transport", "zmq-req", "--connect", "tcp://127.0.0.1:5555"}, "--zmq-namespace"},
		{"ErrTimeout", append(publish, "--transport", "zmq-req", "--connect", "tcp://127.0.0.1:5555", "--zmq-timeout", "0s"), "--zmq-timeout"},
		{"ErrAttempts", append(publish, "--transport", "zmq-dealer", "--connect", "tcp://127.0.0.1:5555", "--zmq-attempts", "0"), "--zmq-attempts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, _ := testEnv(nil)
			err := main.Run(context.Background(), tc.args, env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v: %v, want an error naming %s", tc.args, err, tc.want)
			}
		})
	}
}
