package billing_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/billing"
	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/stripesim"
)

// T0 is where every test clock starts.
var T0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// Clock is an injected clock shared by the ledger, the processors and the
// simulator, so advancing it past Stripe's 24 hours moves all of them.
type Clock = kbtest.Clock

// Env is a simulator on httptest, a SQLite ledger in a temp dir, and a
// Charger pointed at the simulator.
type Env struct {
	Clock   *Clock
	Sim     *stripesim.Server
	SimURL  string
	Ledger  keybrake.Ledger
	Charger *billing.StripeCharger
}

// MustEnv starts an Env on a SQLite ledger; t.Cleanup stops it.
func MustEnv(tb testing.TB) *Env {
	tb.Helper()
	return MustEnvWith(tb, kbtest.SQLite(tb, "ledger.db"))
}

// MustEnvWith starts an Env on the given ledger.
func MustEnvWith(tb testing.TB, ledger keybrake.Ledger) *Env {
	tb.Helper()
	clock := kbtest.NewClock(T0)
	sim, simURL := kbtest.Simulator(tb, stripesim.Options{Now: clock.Now})
	return &Env{Clock: clock, Sim: sim, SimURL: simURL, Ledger: ledger,
		Charger: &billing.StripeCharger{BaseURL: simURL, Key: "sk_test_billing"}}
}

// Processor returns a processor on the env's ledger, charger and clock.
func (e *Env) Processor(owner string) *billing.Processor {
	return &billing.Processor{Ledger: e.Ledger, Charger: e.Charger, Namespace: "test", Owner: owner,
		Lease: time.Minute, Now: e.Clock.Now}
}

// Charges returns the simulator's charges: every charge it created,
// including those whose answer a fault lost.
func (e *Env) Charges() []stripesim.Charge {
	return e.Sim.GroundTruth().Charges
}

// MustCharges fails unless the simulator created exactly n charges.
func (e *Env) MustCharges(tb testing.TB, n int) []stripesim.Charge {
	tb.Helper()
	cs := e.Charges()
	if len(cs) != n {
		tb.Fatalf("simulator has %d charges, want %d: %+v", len(cs), n, cs)
	}
	return cs
}

// MustEntry returns the ledger entry of ev.
func (e *Env) MustEntry(tb testing.TB, body string) *keybrake.LedgerEntry {
	tb.Helper()
	ev, err := billing.DecodeEvent([]byte(body))
	if err != nil {
		tb.Fatal(err)
	}
	entry, err := e.Ledger.FindEntry(context.Background(), ev.Key("test"))
	if err != nil {
		tb.Fatalf("FindEntry: %v", err)
	}
	return entry
}

// EventJSON returns a valid event body for customer, period and amount.
func EventJSON(customer, period string, amount int64, extra ...string) string {
	fields := []string{
		fmt.Sprintf(`"customer_id":%q`, customer),
		fmt.Sprintf(`"billing_period":%q`, period),
		fmt.Sprintf(`"amount":%d`, amount),
		`"currency":"usd"`,
	}
	if len(extra) == 0 {
		extra = []string{`"source":"tok_visa"`}
	}
	return "{" + strings.Join(append(fields, extra...), ",") + "}"
}

// MustResult fails unless res has the outcome and action.
func MustResult(tb testing.TB, res billing.Result, o billing.Outcome, a billing.Action) {
	tb.Helper()
	if res.Outcome != o || res.Action != a {
		tb.Fatalf("result = %+v, want outcome %s and action %s", res, o, a)
	}
}

// FlakyLedger wraps a Ledger, failing Finish while FailFinish is set and
// reporting every Extend on Extends.
type FlakyLedger struct {
	keybrake.Ledger
	mu         sync.Mutex
	failFinish bool
	Extends    chan time.Time // the until of each successful Extend, if non-nil
}

// FailFinish makes Finish fail (the store went down) or work again.
func (l *FlakyLedger) FailFinish(fail bool) {
	l.mu.Lock()
	l.failFinish = fail
	l.mu.Unlock()
}

// Finish fails with EUNAVAILABLE while FailFinish is set.
func (l *FlakyLedger) Finish(ctx context.Context, args keybrake.FinishArgs) (*keybrake.LedgerEntry, error) {
	l.mu.Lock()
	fail := l.failFinish
	l.mu.Unlock()
	if fail {
		return nil, keybrake.Errorf(keybrake.EUNAVAILABLE, "the ledger is down")
	}
	return l.Ledger.Finish(ctx, args)
}

// Extend reports the new lease end on Extends.
func (l *FlakyLedger) Extend(ctx context.Context, key, owner string, now, until time.Time) (*keybrake.LedgerEntry, error) {
	e, err := l.Ledger.Extend(ctx, key, owner, now, until)
	if err == nil && l.Extends != nil {
		select {
		case l.Extends <- until:
		default:
		}
	}
	return e, err
}
