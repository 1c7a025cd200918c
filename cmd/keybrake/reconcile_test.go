package main_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/keybrake/keybrake/billing"
	main "github.com/keybrake/keybrake/cmd/keybrake"
	"github.com/keybrake/keybrake/sqlite"
)

// A billing run with every kind of discrepancy, reconciled against serve
// (simulator upstream) and the ledger; the missing event is republished.
func TestReconcile(t *testing.T) {
	n := MustNSQD(t)
	addr := n.RealTCPAddr().String()
	m, _ := MustServe(t, map[string]string{"KEYBRAKE_ADMIN_TOKEN": "kbadm_rec_4f1c9e0b7a2d8c3e5f60"})
	vaultKey := mustVaultKey(t, m, `{"daily_usd_cap":1000}`)
	ledgerPath := filepath.Join(t.TempDir(), "ledger.db")
	ledger, err := sqlite.Open(ledgerPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ledger.Close()
	proc := &billing.Processor{Ledger: ledger, Charger: &billing.StripeCharger{BaseURL: m.HTTP.URL(), Key: vaultKey}, Namespace: "rec"}

	ev := func(customer, source string, amount int) string {
		return fmt.Sprintf(`{"customer_id":"%s","billing_period":"2026-11","amount":%d,"currency":"usd","source":"%s"}`, customer, amount, source)
	}
	keyOf := func(body string) string {
		e, err := billing.DecodeEvent([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return e.Key("rec")
	}
	ok, dup, missing, declined, mismatched := ev("acct_ok", "tok_visa", 100), ev("acct_dup", "tok_visa", 200),
		ev("acct_missing", "tok_visa", 300), ev("acct_declined", "tok_chargeDeclined", 400), ev("acct_mismatch", "tok_visa", 500)
	for _, body := range []string{ok, dup, declined} {
		if r := proc.Process(context.Background(), []byte(body)); r.Action != billing.ActionAck {
			t.Fatalf("process %s: %+v", body, r)
		}
	}
	// A second charge for acct_dup under another Idempotency-Key, as a
	// worker keyed on NSQ's Attempts would create; and a charge for
	// acct_mismatch of the wrong amount that the ledger never heard of.
	sc := stripego.NewClient(vaultKey, stripego.WithBackends(stripego.NewBackendsWithConfig(&stripego.BackendConfig{
		URL: stripego.String(m.HTTP.URL()), MaxNetworkRetries: stripego.Int64(0), LeveledLogger: &stripego.LeveledLogger{Level: stripego.LevelNull}})))
	for _, c := range []struct {
		key    string
		amount int64
	}{{keyOf(dup), 200}, {keyOf(mismatched), 501}} {
		p := &stripego.ChargeCreateParams{Amount: stripego.Int64(c.amount), Currency: stripego.String("usd"),
			Source: &stripego.PaymentSourceSourceParams{Token: stripego.String("tok_visa")}}
		p.AddMetadata(billing.MetadataKey, c.key)
		if _, err := sc.V1Charges.Create(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}

	file := writeFile(t, "expected.jsonl", strings.Join([]string{ok, dup, missing, declined, mismatched}, "\n"))
	republished := Subscribe(t, addr, "billing")
	env, out := testEnv(map[string]string{"KEYBRAKE_VAULT_KEY": vaultKey})
	err = main.Run(context.Background(), []string{"reconcile", "--upstream", m.HTTP.URL(), "--ledger", ledgerPath, "--namespace", "rec",
		"--republish", "--transport", "nsq", "--nsqd", addr, "--topic", "billing", "--progress-every", "2", file}, env)
	if err == nil || !strings.Contains(err.Error(), "3 finding(s)") {
		t.Fatalf("reconcile: %v\n%s", err, out)
	}
	log := out.String()
	for _, want := range []string{
		"duplicated line 2 " + keyOf(dup) + ": 2 charges",
		"missing    line 3 " + keyOf(missing) + ": never processed",
		"declined   line 4 " + keyOf(declined),
		"mismatched line 5 " + keyOf(mismatched) + ": charge ch_",
		"is 501 usd, the event 500 usd",
		"expected 5: ok 1, missing 1, duplicated 1, mismatched 1, declined 1, failed 0; unexpected ledger entries 0",
		"republished 1 of 1 missing events to nsq topic billing",
		"reconcile: checked 2 of 5 events", "reconcile: checked 5 of 5 events",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("output lacks %q:\n%s", want, log)
		}
	}
	if b := Receive(t, republished); string(b) != missing {
		t.Fatalf("republished %s, want %s", b, missing)
	}
}
