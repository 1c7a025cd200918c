package billing_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/billing"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/stripesim"
)

// MustProxy starts the keybrake proxy in front of e's simulator, on the
// same clock, and returns its base URL.
func MustProxy(tb testing.TB, e *Env) string {
	tb.Helper()
	return kbtest.Proxy(tb, e.SimURL, func(s *khttp.Server) { s.Now = e.Clock.Now }).URL()
}

// MustVaultKey creates a vault key through the admin API and returns it.
func MustVaultKey(tb testing.TB, base, body string) string {
	tb.Helper()
	_, secret := kbtest.VaultKey(tb, base, body)
	return secret
}

func TestProcess_ThroughKeybrake(t *testing.T) {
	ctx := context.Background()
	t.Run("OK", func(t *testing.T) {
		// Through the proxy with a vault key: redeliveries and a lost
		// answer still make one charge.
		e := MustEnv(t)
		base := MustProxy(t, e)
		e.Charger.BaseURL, e.Charger.Key = base, MustVaultKey(t, base, `{"label":"billing-2026-11","total_usd_cap":"100.00"}`)
		if _, err := e.Sim.AddFault(stripesim.Fault{Path: "/v1/charges", Mode: stripesim.FaultCutAfter, Count: 1}); err != nil {
			t.Fatal(err)
		}
		p := e.Processor("w1")
		body := []byte(EventJSON("acct_1", "2026-11", 4200))
		MustResult(t, p.Process(ctx, body), billing.OutcomeTransient, billing.ActionRetry)
		res := p.Process(ctx, body)
		MustResult(t, res, billing.OutcomeCharged, billing.ActionAck)
		MustResult(t, p.Process(ctx, body), billing.OutcomeAlreadyDone, billing.ActionAck)
		cs := e.MustCharges(t, 1)
		if cs[0].ID != res.ChargeID || cs[0].Metadata[billing.MetadataKey] != res.Key {
			t.Fatalf("charge %+v, result %+v", cs[0], res)
		}
	})
	t.Run("OverCap", func(t *testing.T) {
		// keybrake's 429 over cap: retry later, the entry pending with no
		// lease and the reason recorded, nothing charged.
		e := MustEnv(t)
		base := MustProxy(t, e)
		e.Charger.BaseURL, e.Charger.Key = base, MustVaultKey(t, base, `{"label":"billing-2026-11","total_usd_cap":"10.00"}`)
		body := EventJSON("acct_1", "2026-11", 4200)
		res := e.Processor("w1").Process(ctx, []byte(body))
		MustResult(t, res, billing.OutcomeTransient, billing.ActionRetry)
		if !strings.Contains(res.Reason, "keybrake_spend_cap_exceeded") || res.Delay != time.Second {
			t.Fatalf("result = %+v", res)
		}
		entry := e.MustEntry(t, body)
		if entry.State != keybrake.EntryPending || entry.LeaseOwner != "" || !entry.LeaseUntil.IsZero() ||
			!strings.Contains(entry.Reason, "keybrake_spend_cap_exceeded") {
			t.Fatalf("entry = %+v", entry)
		}
		e.MustCharges(t, 0)
	})
}
