package main_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	stripego "github.com/stripe/stripe-go/v82"

	main "github.com/keybrake/keybrake/cmd/keybrake"
)

// keybrake approvals lists, approves and denies the requests a running
// serve holds for a person, and refuses bad use with a precise error.
func TestApprovals(t *testing.T) {
	const token = "kbadm_approvals_7d2e91c04b5a6f38"
	m, _ := MustServe(t, map[string]string{"KEYBRAKE_ADMIN_TOKEN": token})
	vars := map[string]string{"KEYBRAKE_ADMIN_TOKEN": token, "KEYBRAKE_URL": m.HTTP.URL()}
	run := func(cmd string, args ...string) (string, error) {
		env, out := testEnv(vars)
		env.Stderr = &syncBuffer{}
		err := main.Run(context.Background(), append([]string{cmd}, args...), env)
		return out.String(), err
	}
	out, err := run("keys", "create", `{"label":"agent","total_usd_cap":1000,"allowed_endpoints":["charges.create"],"approval":{"above_usd":100}}`)
	var k struct {
		ID       string `json:"id"`
		VaultKey string `json:"vault_key"`
	}
	if err != nil || json.Unmarshal([]byte(out), &k) != nil {
		t.Fatalf("keys create: %v %s", err, out)
	}
	sc := stripego.NewClient(k.VaultKey, stripego.WithBackends(stripego.NewBackendsWithConfig(&stripego.BackendConfig{
		URL: stripego.String(m.HTTP.URL()), MaxNetworkRetries: stripego.Int64(0), LeveledLogger: &stripego.LeveledLogger{Level: stripego.LevelNull}})))
	charge := func(idem string) error {
		p := &stripego.ChargeCreateParams{Amount: stripego.Int64(150_00), Currency: stripego.String("usd"),
			Source: &stripego.PaymentSourceSourceParams{Token: stripego.String("tok_visa")}}
		p.SetIdempotencyKey(idem)
		_, err := sc.V1Charges.Create(context.Background(), p)
		return err
	}
	for _, idem := range []string{"ik-a", "ik-b"} {
		if err := charge(idem); err == nil || !strings.Contains(err.Error(), "keybrake_approval_required") {
			t.Fatalf("charge %s: want approval required, got %v", idem, err)
		}
	}
	list := func(args ...string) map[string]string { // id -> state
		t.Helper()
		out, err := run("approvals", append([]string{"list"}, args...)...)
		var raw struct {
			Data []map[string]any `json:"data"`
		}
		if err != nil || json.Unmarshal([]byte(out), &raw) != nil {
			t.Fatalf("approvals list %v: %v %s", args, err, out)
		}
		got := map[string]string{}
		for _, a := range raw.Data {
			got[a["idempotency_key"].(string)] = a["id"].(string) + " " + a["state"].(string)
		}
		return got
	}
	pending := list()
	if len(pending) != 2 || !strings.HasSuffix(pending["ik-a"], " pending") {
		t.Fatalf("pending: %v", pending)
	}
	idA, idB := strings.Fields(pending["ik-a"])[0], strings.Fields(pending["ik-b"])[0]
	if got := list("--key", "vk_other"); len(got) != 0 {
		t.Fatalf("--key of another key: %v", got)
	}
	if out, err := run("approvals", "approve", idA); err != nil || !strings.Contains(out, `"decided_by": "env"`) || !strings.Contains(out, `"state": "approved"`) {
		t.Fatalf("approve: %v %s", err, out)
	}
	if out, err := run("approvals", "deny", idB); err != nil || !strings.Contains(out, `"state": "denied"`) {
		t.Fatalf("deny: %v %s", err, out)
	}
	if got := list("--state", "all"); !strings.HasSuffix(got["ik-a"], " approved") || !strings.HasSuffix(got["ik-b"], " denied") {
		t.Fatalf("all: %v", got)
	}
	if got := list(); len(got) != 0 {
		t.Fatalf("pending after deciding both: %v", got)
	}
	if err := charge("ik-a"); err != nil {
		t.Fatalf("approved retry: %v", err)
	}
	if got := list("--state", "used"); !strings.HasSuffix(got["ik-a"], " used") {
		t.Fatalf("used: %v", got)
	}
	for name, args := range map[string][]string{
		"ErrNoAction":     {},
		"ErrUnknown":      {"delete", idA},
		"ErrNoID":         {"approve"},
		"ErrBadID":        {"approve", "vk_1"},
		"ErrTwoIDs":       {"deny", idA, idB},
		"ErrDecidedTwice": {"deny", idA},
		"ErrNotFound":     {"approve", "apr_0000000000000000"},
		"ErrState":        {"list", "--state", "expired"},
		"ErrListArgs":     {"list", idA},
	} {
		t.Run(name, func(t *testing.T) {
			if out, err := run("approvals", args...); err == nil {
				t.Fatalf("approvals %v: no error (%s)", args, out)
			}
		})
	}
	t.Run("ErrNoToken", func(t *testing.T) {
		env, _ := testEnv(map[string]string{"KEYBRAKE_URL": m.HTTP.URL()})
		if err := main.Run(context.Background(), []string{"approvals", "list"}, env); err == nil || !strings.Contains(err.Error(), "KEYBRAKE_ADMIN_TOKEN") {
			t.Fatalf("no token: %v", err)
		}
	})
	t.Run("ErrBadToken", func(t *testing.T) {
		env, _ := testEnv(map[string]string{"KEYBRAKE_URL": m.HTTP.URL(), "KEYBRAKE_ADMIN_TOKEN": "kbadm_wrong_000000000000"})
		if err := main.Run(context.Background(), []string{"approvals", "approve", idB}, env); err == nil {
			t.Fatal("a wrong token decided")
		}
	})
}
