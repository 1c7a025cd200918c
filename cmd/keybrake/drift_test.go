package main_test

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	main "github.com/keybrake/keybrake/cmd/keybrake"
	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/stripesim"
	stripego "github.com/stripe/stripe-go/v82"
)

// keybrake drift finds a charge made on the simulator outside keybrake.
func TestDrift(t *testing.T) {
	_, simURL := kbtest.Simulator(t, stripesim.Options{})
	db := filepath.Join(t.TempDir(), "keybrake.db")
	envs := map[string]string{"STRIPE_SECRET_KEY": kbtest.UpstreamSecret}
	run := func() (string, error) {
		var out, errOut bytes.Buffer
		err := main.Run(context.Background(), []string{"drift", "--db", db, "--upstream", simURL},
			main.Env{Stdout: &out, Stderr: &errOut, Getenv: func(k string) string { return envs[k] }})
		return out.String(), err
	}
	if out, err := run(); err != nil || !strings.Contains(out, "no drift") {
		t.Fatalf("empty: %v\n%s", err, out)
	}
	cfg := &stripego.BackendConfig{URL: stripego.String(simURL), MaxNetworkRetries: stripego.Int64(0),
		LeveledLogger: &stripego.LeveledLogger{Level: stripego.LevelNull}, HTTPClient: &http.Client{Timeout: 30 * time.Second}}
	sc := stripego.NewClient(kbtest.UpstreamSecret, stripego.WithBackends(stripego.NewBackendsWithConfig(cfg)))
	ch, err := sc.V1Charges.Create(context.Background(), &stripego.ChargeCreateParams{Amount: stripego.Int64(4200), Currency: stripego.String("usd"),
		Source: &stripego.PaymentSourceSourceParams{Token: stripego.String("tok_visa")}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := run()
	if err == nil || !strings.Contains(out, "unseen") || !strings.Contains(out, ch.ID) || !strings.Contains(out, "4200 usd") {
		t.Fatalf("after a direct charge: %v\n%s", err, out)
	}
}
