package billing_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/billing"
	"github.com/keybrake/keybrake/internal/kbtest"
)

// The processor's promises hold on the PostgreSQL ledger too, the one
// several worker machines share: redeliveries charge once, a dead worker's
// claim is taken over with the same key, and concurrent deliveries on many
// workers charge once.
func TestProcess_PostgresLedger(t *testing.T) {
	ctx := context.Background()
	t.Run("FiveDeliveriesOneCharge", func(t *testing.T) {
		e := MustEnvWith(t, kbtest.Postgres(t))
		body := []byte(EventJSON("acct_1", "2026-11", 4200))
		first := e.Processor("w1").Process(ctx, body)
		MustResult(t, first, billing.OutcomeCharged, billing.ActionAck)
		for range 4 {
			MustResult(t, e.Processor("w2").Process(ctx, body), billing.OutcomeAlreadyDone, billing.ActionAck)
		}
		cs := e.MustCharges(t, 1)
		if entry := e.MustEntry(t, string(body)); entry.State != keybrake.EntryCharged || entry.ChargeID != cs[0].ID {
			t.Fatalf("entry %+v, charge %+v", entry, cs[0])
		}
	})
	t.Run("TakeoverAfterCrash", func(t *testing.T) {
		e := MustEnvWith(t, kbtest.Postgres(t))
		body := EventJSON("acct_2", "2026-11", 1500)
		ev, err := billing.DecodeEvent([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		// Worker A claims, then dies before calling Stripe.
		if _, err := e.Ledger.Claim(ctx, keybrake.ClaimArgs{
			Entry: &keybrake.LedgerEntry{Key: ev.Key("test"), Fingerprint: ev.Fingerprint("test"), Amount: ev.Amount, Currency: ev.Currency},
			Owner: "worker_a/dead", Now: e.Clock.Now(), Until: e.Clock.Now().Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
		MustResult(t, e.Processor("worker_b").Process(ctx, []byte(body)), billing.OutcomeTransient, billing.ActionRetry)
		e.MustCharges(t, 0)
		e.Clock.Advance(2 * time.Minute)
		MustResult(t, e.Processor("worker_b").Process(ctx, []byte(body)), billing.OutcomeCharged, billing.ActionAck)
		e.MustCharges(t, 1)
		if entry := e.MustEntry(t, body); entry.Attempts != 2 {
			t.Fatalf("entry %+v, want the takeover as attempt 2", entry)
		}
	})
	t.Run("ConcurrentWorkers", func(t *testing.T) {
		e := MustEnvWith(t, kbtest.Postgres(t))
		body := []byte(EventJSON("acct_3", "2026-11", 900))
		var wg sync.WaitGroup
		var mu sync.Mutex
		charged := 0
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if r := e.Processor("w").Process(ctx, body); r.Outcome == billing.OutcomeCharged {
					mu.Lock()
					charged++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		e.MustCharges(t, 1)
		if charged != 1 {
			t.Fatalf("%d deliveries charged, want 1", charged)
		}
	})
}
