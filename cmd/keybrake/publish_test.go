package main_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keybrake/keybrake/billing"
	main "github.com/keybrake/keybrake/cmd/keybrake"
)

// writeFile writes content to name in a temp dir and returns its path.
func writeFile(tb testing.TB, name, content string) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}

func runPublish(tb testing.TB, addr string, args ...string) (string, error) {
	tb.Helper()
	env, out := testEnv(map[string]string{})
	err := main.Run(context.Background(), append([]string{"publish", "--transport", "nsq", "--nsqd", addr, "--topic", "billing"}, args...), env)
	return out.String(), err
}

func TestPublish(t *testing.T) {
	t.Run("JSONL", func(t *testing.T) {
		n := MustNSQD(t)
		addr := n.RealTCPAddr().String()
		got := Subscribe(t, addr, "billing")
		lines := []string{
			`{"customer_id":"acct_1","billing_period":"2026-11","amount":100,"currency":"usd","source":"tok_visa"}`,
			`{"customer_id":"acct_2","billing_period":"2026-11","amount":200,"currency":"eur","stripe_customer":"cus_2"}`,
			`{"customer_id":"acct_3","billing_period":"2026-11","amount":300,"currency":"usd","payment_method":"pm_card_visa","metadata":{"plan":"pro"}}`,
		}
		out, err := runPublish(t, addr, writeFile(t, "events.jsonl", lines[0]+"\n\n"+lines[1]+"\r\n"+lines[2]))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "published 3 of 3 events to nsq topic billing") {
			t.Fatalf("output %q", out)
		}
		for _, want := range lines {
			if b := Receive(t, got); string(b) != want {
				t.Fatalf("published %s, want %s", b, want)
			}
		}
	})

	t.Run("CSV", func(t *testing.T) {
		n := MustNSQD(t)
		addr := n.RealTCPAddr().String()
		got := Subscribe(t, addr, "billing")
		csv := "customer_id,billing_period,amount,currency,source,description,metadata.plan\n" +
			"acct_1,2026-11,4200,usd,tok_visa,\"November, pro\",pro\n" +
			"acct_2,2026-11,99,usd,tok_visa,,\n"
		out, err := runPublish(t, addr, writeFile(t, "events.csv", csv))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "published 2 of 2") {
			t.Fatalf("output %q", out)
		}
		ev1, err := billing.DecodeEvent(Receive(t, got))
		if err != nil || ev1.CustomerID != "acct_1" || ev1.Amount != 4200 || ev1.Description != "November, pro" || ev1.Metadata["plan"] != "pro" {
			t.Fatalf("event %+v, %v", ev1, err)
		}
		ev2, err := billing.DecodeEvent(Receive(t, got))
		if err != nil || ev2.CustomerID != "acct_2" || ev2.Description != "" || ev2.Metadata != nil {
			t.Fatalf("event %+v, %v", ev2, err)
		}
	})

	t.Run("ErrBadLinesPublishNothing", func(t *testing.T) {
		n := MustNSQD(t)
		addr := n.RealTCPAddr().String()
		for _, tc := range []struct {
			name, file, content string
			want                []string
		}{
			{"JSONL", "events.jsonl",
				`{"customer_id":"acct_1","billing_period":"2026-11","amount":100,"currency":"usd","source":"tok_visa"}` + "\n" +
					`{"customer_id":"acct_2","billing_period":"2026-11","amount":"100","currency":"usd","source":"tok_visa"}` + "\n" +
					`{"customer_id":"acct_3",` + "\n" +
					`{"customer_id":"acct_4","billing_period":"2026-11","amount":100,"currency":"usd","source":"tok_visa","amout":1}` + "\n",
				[]string{"3 invalid event(s)", "line 2: amount", "line 3:", "line 4:", "amout"}},
			{"CSV", "events.csv",
				"customer_id,billing_period,amount,currency,source\n" +
					"acct_1,2026-11,100,usd,tok_visa\n" +
					"acct_2,2026-11,12.50,usd,tok_visa\n" +
					"acct_3,2026-11,100,usd\n",
				[]string{"line 3: amount", "line 4: wrong number of fields"}},
			{"CSVUnknownColumn", "events.csv", "customer_id,billing_period,amount,currency,sauce\n", []string{`line 1: unknown column "sauce"`}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				out, err := runPublish(t, addr, writeFile(t, tc.file, tc.content))
				if err == nil {
					t.Fatalf("no error; output %q", out)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				if !strings.Contains(err.Error(), "nothing published") {
					t.Errorf("error %q does not say nothing was published", err)
				}
			})
		}
		if c := topicCount(n, "billing"); c != 0 {
			t.Fatalf("%d messages published", c)
		}
	})

	t.Run("ErrConfigNamesField", func(t *testing.T) {
		file := writeFile(t, "events.jsonl", "")
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"publish", file}, "--nsqd"},
			{[]string{"publish", "--nsqd", "127.0.0.1:1", "--lookupd", "127.0.0.1:2", file}, "--lookupd"},
			{[]string{"publish", "--nsqd", "nohost", file}, "--nsqd"},
			{[]string{"publish", "--transport", "kafka", "--nsqd", "127.0.0.1:1", file}, "--transport"},
			{[]string{"publish", "--nsqd", "127.0.0.1:1", "--format", "xml", file}, "--format"},
			{[]string{"publish", "--nsqd", "127.0.0.1:1", "--topic", "", file}, "--topic"},
		} {
			env, _ := testEnv(map[string]string{})
			err := main.Run(context.Background(), tc.args, env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.want)
			}
		}
	})

	t.Run("EnvDefaults", func(t *testing.T) {
		n := MustNSQD(t)
		addr := n.RealTCPAddr().String()
		got := Subscribe(t, addr, "invoices")
		env, out := testEnv(map[string]string{"KEYBRAKE_NSQD": addr, "KEYBRAKE_TOPIC": "invoices", "KEYBRAKE_PUBLISH_FORMAT": "jsonl"})
		line := `{"customer_id":"acct_1","billing_period":"2026-11","amount":100,"currency":"usd","source":"tok_visa"}`
		if err := main.Run(context.Background(), []string{"publish", writeFile(t, "events.txt", line)}, env); err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := json.Unmarshal(Receive(t, got), &v); err != nil || v["customer_id"] != "acct_1" {
			t.Fatalf("%v %v; output %s", v, err, out)
		}
	})
}
