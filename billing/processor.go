package billing

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/internal/every"
)

// Defaults of the Processor.
const (
	DefaultLease         = 60 * time.Second
	DefaultSearchAfter   = 23 * time.Hour
	DefaultMaxDelay      = 10 * time.Minute
	DefaultOperatorDelay = 10 * time.Minute
	minRetryDelay        = time.Second
	maxLeaseWait         = 5 * time.Second
)

// Processor runs the billing ledger state machine for one delivery of a
// billing event at a time; it is safe for concurrent use, and any number of
// Processors (in any number of processes) may share one Ledger.
//
//	decode        malformed                         → dead letter
//	claim         key has another fingerprint       → conflict recorded (failed) → dead letter
//	              charged, declined or failed       → already done → ack
//	              live lease of another attempt     → retry after the lease; Stripe not called
//	              claimed                           ↓
//	search        first attempt ≥ SearchAfter ago   → a charge with metadata[keybrake_key] → charged → ack
//	charge        with the same key every time      2xx   → charged  → ack
//	                                                402   → declined → ack
//	                                                400 idempotency_error → search: found → charged → ack
//	                                                                        none  → released → retry
//	                                                other 400 → failed → dead letter
//	                                                else  → released → retry with backoff
//
// If recording the outcome fails after Stripe charged (the store is down),
// Process answers retry: the next delivery claims the entry again (when the
// lease expires) and calls Stripe with the same key, which answers with the
// same charge; past Stripe's 24 hours, the search finds it.
type Processor struct {
	Ledger  keybrake.Ledger
	Charger Charger
	// Namespace goes into every key (see Key); required.
	Namespace string
	// Owner names this worker in lease owners ("host/pid"); each Process
	// call appends a random suffix, since leases are per attempt.
	Owner string
	// Lease is how long a claim holds the entry; DefaultLease if zero. The
	// lease is extended every ExtendEvery (Lease/3 if zero) while Stripe is
	// being called, so only a dead worker's lease expires.
	Lease       time.Duration
	ExtendEvery time.Duration
	// SearchAfter is the age of the first attempt past which the charge is
	// first looked up by metadata: Stripe forgets an Idempotency-Key after
	// 24 hours. DefaultSearchAfter if zero.
	SearchAfter time.Duration
	// Now is the clock of the ledger; time.Now if nil.
	Now func() time.Time
	// Logger receives one line per outcome; nil discards.
	Logger *slog.Logger
	// Backoff returns the delay before retry number attempts (1 for the
	// first retry); nil doubles from one second up to DefaultMaxDelay.
	Backoff func(attempts int) time.Duration
	// OperatorDelay is the least delay after a 401 or 403 (a revoked vault
	// key, a policy refusal), which a person must fix; DefaultOperatorDelay
	// if zero.
	OperatorDelay time.Duration
}

// Process handles one delivery of a billing event and says what the
// transport must do with the message. It never returns ActionAck unless the
// ledger holds a final outcome, and never calls Stripe without holding the
// entry's lease.
func (p *Processor) Process(ctx context.Context, body []byte) Result {
	res := p.process(ctx, body)
	p.log(res)
	return res
}

func (p *Processor) process(ctx context.Context, body []byte) Result {
	if err := p.validate(); err != nil {
		// A misconfigured worker must not dead-letter good messages.
		return Result{Outcome: OutcomeTransient, Action: ActionRetry, Reason: err.Error(), Delay: p.operatorDelay()}
	}
	ev, err := DecodeEvent(body)
	if err != nil {
		return Result{Outcome: OutcomeMalformed, Action: ActionDeadLetter, Reason: malformedReason(err)}
	}
	a := &attempt{p: p, ev: ev, key: ev.Key(p.Namespace), owner: p.newOwner()}
	return a.run(ctx)
}

// validate checks the configuration.
func (p *Processor) validate() error {
	switch {
	case p.Ledger == nil:
		return keybrake.ErrorParam("ledger", "billing: the Processor has no Ledger")
	case p.Charger == nil:
		return keybrake.ErrorParam("charger", "billing: the Processor has no Charger")
	}
	return ValidateNamespace(p.Namespace)
}

func malformedReason(err error) string {
	msg := keybrake.ErrorMessage(err)
	if param := keybrake.ErrorParamOf(err); param != "" {
		return "malformed event: " + param + ": " + msg
	}
	return "malformed event: " + msg
}

func (p *Processor) now() time.Time {
	if p.Now == nil {
		return time.Now()
	}
	return p.Now()
}

func (p *Processor) lease() time.Duration {
	if p.Lease <= 0 {
		return DefaultLease
	}
	return p.Lease
}

func (p *Processor) searchAfter() time.Duration {
	if p.SearchAfter <= 0 {
		return DefaultSearchAfter
	}
	return p.SearchAfter
}

func (p *Processor) operatorDelay() time.Duration {
	if p.OperatorDelay <= 0 {
		return DefaultOperatorDelay
	}
	return p.OperatorDelay
}

// backoff returns the delay before the next delivery after attempts.
func (p *Processor) backoff(attempts int) time.Duration {
	if attempts < 1 {
		attempts = 1
	}
	if p.Backoff != nil {
		return p.Backoff(attempts)
	}
	return DefaultBackoff(attempts)
}

// DefaultBackoff doubles from one second per attempt, up to
// DefaultMaxDelay.
func DefaultBackoff(attempts int) time.Duration {
	if attempts > 20 {
		return DefaultMaxDelay
	}
	d := minRetryDelay << (attempts - 1)
	return min(d, DefaultMaxDelay)
}

// newOwner returns a lease owner unique to one attempt.
func (p *Processor) newOwner() string {
	b := make([]byte, 8)
	rand.Read(b)
	owner := p.Owner
	if owner == "" {
		owner = "worker"
	}
	return owner + "/" + hex.EncodeToString(b)
}

func (p *Processor) log(res Result) {
	if p.Logger == nil {
		return
	}
	level := slog.LevelInfo
	switch {
	case res.Action == ActionDeadLetter:
		level = slog.LevelWarn
	case res.Action == ActionRetry && res.Outcome != OutcomeTransient:
		level = slog.LevelWarn
	}
	if !p.Logger.Enabled(context.Background(), level) {
		return // before boxing the attributes, which cost every event
	}
	p.Logger.Log(context.Background(), level, "billing event", "outcome", string(res.Outcome), "action", res.Action.String(),
		"key", res.Key, "charge", res.ChargeID, "reason", res.Reason, "delay", res.Delay)
}

// attempt is one processing of one delivery.
type attempt struct {
	p     *Processor
	ev    *Event
	key   string
	owner string
}

func (a *attempt) run(ctx context.Context) Result {
	p := a.p
	now := p.now()
	entry := &keybrake.LedgerEntry{Key: a.key, Fingerprint: a.ev.Fingerprint(p.Namespace),
		Amount: a.ev.Amount, Currency: a.ev.Currency, Customer: a.ev.StripeCustomer}
	cr, err := p.Ledger.Claim(ctx, keybrake.ClaimArgs{Entry: entry, Owner: a.owner, Now: now, Until: now.Add(p.lease())})
	if err != nil {
		return a.retry(1, fmt.Sprintf("claim: %v", err))
	}
	e := cr.Entry
	switch {
	case cr.Conflict != nil:
		return Result{Outcome: OutcomeFailed, Action: ActionDeadLetter, Key: a.key, ChargeID: e.ChargeID, State: keybrake.EntryFailed, Reason: cr.Conflict.Reason}
	case e.Terminal():
		return Result{Outcome: OutcomeAlreadyDone, Action: ActionAck, Key: a.key, ChargeID: e.ChargeID, State: e.State,
			Reason: "already " + e.State + reasonSuffix(e.Reason)}
	case !cr.Claimed:
		// Another attempt is calling Stripe right now: come back when its
		// lease would have expired, never sooner than a second, and never
		// later than maxLeaseWait, since most calls end long before their
		// lease does.
		d := min(max(e.LeaseUntil.Sub(now), minRetryDelay), maxLeaseWait)
		return Result{Outcome: OutcomeTransient, Action: ActionRetry, Key: a.key, Reason: "lease held by " + e.LeaseOwner, Delay: d}
	}
	return a.charge(ctx, e)
}

func reasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return ": " + r
}

// charge calls Stripe while holding the lease, then records the outcome.
func (a *attempt) charge(ctx context.Context, e *keybrake.LedgerEntry) Result {
	stop := a.keepLease(ctx)
	res, err := a.callStripe(ctx, e)
	stop()
	if err == nil {
		if res.Status == "failed" {
			return a.finish(ctx, e, keybrake.EntryDeclined, res.ChargeID, "found a failed charge", OutcomeDeclined, ActionAck)
		}
		// succeeded, or pending: a bank debit Stripe accepted, which the
		// bank settles days later. Money is on its way; read as a decline,
		// the ledger would invite a second charge.
		return a.finish(ctx, e, keybrake.EntryCharged, res.ChargeID, "", OutcomeCharged, ActionAck)
	}
	var ce *ChargeError
	errors.As(err, &ce)
	switch ClassOf(err) {
	case ClassDeclined:
		return a.finish(ctx, e, keybrake.EntryDeclined, ce.ChargeID, ce.Error(), OutcomeDeclined, ActionAck)
	case ClassFailed:
		if ce.Type == "idempotency_error" {
			return a.keyUsedBefore(ctx, e, ce)
		}
		return a.finish(ctx, e, keybrake.EntryFailed, "", ce.Error(), OutcomeFailed, ActionDeadLetter)
	case ClassOperator:
		r := a.release(ctx, e, err.Error())
		r.Delay = max(r.Delay, a.p.operatorDelay())
		if a.p.Logger != nil {
			// Nothing was charged, and nothing will be until a person fixes
			// the vault key or its policy: say so loudly.
			a.p.Logger.Error("billing: the vault key or its policy refused the charge; fix it, the event is kept and retried",
				"key", a.key, "err", err, "delay", r.Delay)
		}
		return r
	}
	return a.release(ctx, e, err.Error())
}

// keyUsedBefore handles a 400 idempotency_error: the key was used before,
// with other parameters or, through keybrake, under another vault key
// (after an operator replaced a revoked one, keybrake will not hand over the
// first key's answer). Either way an earlier attempt may have charged the
// customer, so the answer alone never makes the event failed: the charge is
// looked up by metadata. Found with this event's amount, it is the outcome;
// found with another amount, the event is failed naming it; not found (the
// search lags writes, or the key's use charged nothing), the entry stays
// pending and the event is retried, and after the transport's last attempt
// it is dead-lettered with the entry pending for reconciliation.
func (a *attempt) keyUsedBefore(ctx context.Context, e *keybrake.LedgerEntry, ce *ChargeError) Result {
	found, err := a.p.Charger.FindByMetadata(ctx, a.key)
	if err != nil {
		return a.release(ctx, e, fmt.Sprintf("%s; search by metadata: %v", ce.Error(), err))
	}
	c, ok := pick(found)
	switch {
	case !ok:
		return a.release(ctx, e, fmt.Sprintf("%s; no charge with metadata[%s] found (yet)", ce.Error(), MetadataKey))
	case c.Amount != a.ev.Amount || c.Currency != a.ev.Currency:
		return a.finish(ctx, e, keybrake.EntryFailed, "", fmt.Sprintf("%s; the key's charge %s is %d %s, not this event's %d %s",
			ce.Error(), c.ChargeID, c.Amount, c.Currency, a.ev.Amount, a.ev.Currency), OutcomeFailed, ActionDeadLetter)
	case c.Status == "failed":
		return a.finish(ctx, e, keybrake.EntryDeclined, c.ChargeID, "found a "+c.Status+" charge", OutcomeDeclined, ActionAck)
	}
	return a.finish(ctx, e, keybrake.EntryCharged, c.ChargeID, "", OutcomeCharged, ActionAck)
}

// callStripe looks the charge up by metadata when Stripe may have forgotten
// the key, then creates it (or gets the one the key already created).
func (a *attempt) callStripe(ctx context.Context, e *keybrake.LedgerEntry) (ChargeResult, error) {
	if a.p.now().Sub(e.FirstAttemptAt) >= a.p.searchAfter() {
		found, err := a.p.Charger.FindByMetadata(ctx, a.key)
		if err != nil {
			return ChargeResult{}, fmt.Errorf("search by metadata: %w", err)
		}
		if c, ok := pick(found); ok {
			return c, nil
		}
	}
	ev := a.ev
	return a.p.Charger.Charge(ctx, ChargeRequest{Key: a.key, Amount: ev.Amount, Currency: ev.Currency,
		StripeCustomer: ev.StripeCustomer, PaymentMethod: ev.PaymentMethod, Source: ev.Source,
		Description: ev.Description, Metadata: ev.Metadata})
}

// pick returns the succeeded charge among found, else a pending one (a
// bank debit on its way: creating another would charge twice), else a
// declined one (a decline whose answer was lost: no money moved, and
// charging the card again a day later would be a new attempt the event did
// not ask for).
func pick(found []ChargeResult) (ChargeResult, bool) {
	for _, status := range []string{"succeeded", "pending"} {
		for _, c := range found {
			if c.Status == status {
				return c, true
			}
		}
	}
	for _, c := range found {
		if c.Status == "failed" {
			return c, true
		}
	}
	return ChargeResult{}, false
}

// keepLease extends the lease every ExtendEvery until stop is called, on
// a timer rather than a goroutine of its own (internal/every).
func (a *attempt) keepLease(ctx context.Context) (stop func()) {
	d := a.p.ExtendEvery
	if d <= 0 {
		d = a.p.lease() / 3
	}
	return every.Start(d, func() {
		if ctx.Err() != nil {
			return
		}
		now := a.p.now()
		if _, err := a.p.Ledger.Extend(ctx, a.key, a.owner, now, now.Add(a.p.lease())); err != nil && a.p.Logger != nil {
			a.p.Logger.Warn("billing: cannot extend the lease", "key", a.key, "owner", a.owner, "err", err)
		}
	})
}

// finish records a final state. If the ledger cannot record it, the message
// is retried: the next delivery finds the charge again with the same key.
func (a *attempt) finish(ctx context.Context, e *keybrake.LedgerEntry, state, chargeID, reason string, o Outcome, act Action) Result {
	_, err := a.p.Ledger.Finish(ctx, keybrake.FinishArgs{Key: a.key, Owner: a.owner, State: state, ChargeID: chargeID, Reason: reason, Now: a.p.now()})
	if err != nil {
		r := a.retry(e.Attempts, fmt.Sprintf("stripe answered %s (charge %q) but the ledger did not record it: %v", state, chargeID, err))
		r.ChargeID = chargeID
		return r
	}
	return Result{Outcome: o, Action: act, Key: a.key, ChargeID: chargeID, State: state, Reason: reason}
}

// release gives the lease up after a transient failure and asks for a retry
// with a delay growing with the entry's attempts.
func (a *attempt) release(ctx context.Context, e *keybrake.LedgerEntry, reason string) Result {
	if _, err := a.p.Ledger.Release(ctx, a.key, a.owner, reason, a.p.now()); err != nil {
		// The lease will expire by itself; the retry waits for it.
		reason += fmt.Sprintf(" (release: %v)", err)
		r := a.retry(e.Attempts, reason)
		r.Delay = max(r.Delay, a.p.lease())
		return r
	}
	return a.retry(e.Attempts, reason)
}

func (a *attempt) retry(attempts int, reason string) Result {
	return Result{Outcome: OutcomeTransient, Action: ActionRetry, Key: a.key, Reason: reason, Delay: a.p.backoff(attempts)}
}
