package keybrake

import (
	"context"
	"fmt"
	"time"
)

// Guards are a key's policy beyond its caps: what a cap bounds but does not
// notice. A nil or zero Guards guards nothing. The duplicate guard, the
// velocity limits and the breaker's repeat and spend-rate rules are decided
// by the store in the same transaction as the caps (SpendService.Reserve),
// so they are exact under concurrency and across replicas; the field rules
// are decided before (in the proxy's decide step), on the parsed request.
type Guards struct {
	Duplicate *DuplicateGuard `json:"duplicate,omitempty"`
	Velocity  []VelocityLimit `json:"velocity,omitempty"`
	Rules     []FieldRule     `json:"rules,omitempty"`
	Breaker   *Breaker        `json:"breaker,omitempty"`
}

// BreakerOf returns g's breaker, nil for none.
func (g *Guards) BreakerOf() *Breaker {
	if g == nil {
		return nil
	}
	return g.Breaker
}

// Counts reports whether g has a guard that counts the key's own requests
// or reservations on the key's counters: the duplicate guard, a velocity
// limit or the breaker. Field rules count nothing.
func (g *Guards) Counts() bool {
	return g != nil && (g.Duplicate != nil || len(g.Velocity) > 0 || g.Breaker != nil)
}

// IsZero reports whether g guards nothing.
func (g *Guards) IsZero() bool {
	return g == nil || (g.Duplicate == nil && len(g.Velocity) == 0 && len(g.Rules) == 0 && g.Breaker == nil)
}

// OverrideHeader is the request header that lets one request past the
// duplicate guard, on a key whose DuplicateGuard.AllowOverride is set. Its
// value is the reason, kept in the audit log.
const OverrideHeader = "Keybrake-Allow-Duplicate"

// DuplicateGuard refuses a money-moving request whose customer (or payment
// method), currency and amount (or the metadata field MatchMetadata) match
// a reservation made on the same key within WindowSeconds that was not
// released (it is reserved, held, uncertain or settled), when it carries a
// different Idempotency-Key: the same key is a replay, not a duplicate.
// Without MatchMetadata, requests naming no customer (nor payment method,
// source, charge or payment intent) are not compared; with it, requests
// without the metadata field are not.
type DuplicateGuard struct {
	WindowSeconds int64  `json:"window_seconds"`
	MatchMetadata string `json:"match_metadata,omitempty"` // compare metadata[MatchMetadata] instead of the amount
	AllowOverride bool   `json:"allow_override"`           // honour OverrideHeader
}

// Velocity scopes.
const (
	PerKey      = "key"
	PerCustomer = "customer"
)

// VelocityLimit allows at most Limit money-moving requests (reservations)
// in a window of WindowSeconds, sliding (the default) or fixed (see
// WindowSliding and WindowFixed), on the whole key or per customer (or
// payment method), counting the operations named (every operation when
// empty). A request Stripe refused before processing it (released, not a
// decline) does not count; a replay is not counted again. Reads are not
// counted: a limit naming only read operations never refuses.
//
// With Requests set the limit counts requests instead: every request on
// the key of the operations named (reads, unpriced writes and replays
// included) that passed authentication and the key's policy, counted when
// it arrives, before it is priced or reserved, whatever happens to it
// next ("60 requests per minute per key"). Such a limit is decided and
// counted in a transaction of its own (GuardService.CountRequest), not in
// the reservation's; per customer it counts the requests that name one.
type VelocityLimit struct {
	Name          string   `json:"name"`
	Per           string   `json:"per"`
	Operations    []string `json:"operations,omitempty"`
	Limit         int      `json:"limit"`
	WindowSeconds int64    `json:"window_seconds"`
	WindowKind    string   `json:"window_kind,omitempty"` // WindowSliding (default) or WindowFixed
	Requests      bool     `json:"requests,omitempty"`    // count every request, reads too, not only reservations
}

// CountsRequests reports whether v counts every request (Requests) rather
// than reservations.
func (v VelocityLimit) CountsRequests() bool { return v.Requests }

// Applies reports whether the limit counts operation op.
func (v VelocityLimit) Applies(op string) bool {
	if len(v.Operations) == 0 {
		return true
	}
	for _, o := range v.Operations {
		if o == op {
			return true
		}
	}
	return false
}

// FieldRule is a condition, in CEL, that every request of the operations
// named (all when empty) must satisfy. The proxy compiles it when the key
// is created or updated and refuses a request on which it is false or
// cannot be evaluated (fail closed).
type FieldRule struct {
	Name       string   `json:"name"`
	Expr       string   `json:"expr"`
	Operations []string `json:"operations,omitempty"`
}

// Breaker suspends the key when one of its rules trips; a suspended key
// refuses every request until an operator resumes it. A zero field
// disables its rule.
type Breaker struct {
	// RefusalBurst cap or policy refusals within RefusalWindowSeconds.
	RefusalBurst         int   `json:"refusal_burst,omitempty"`
	RefusalWindowSeconds int64 `json:"refusal_window_seconds,omitempty"`
	// RepeatBody requests with the same parameters (fingerprint) under
	// different Idempotency-Keys within RepeatWindowSeconds.
	RepeatBody          int   `json:"repeat_body,omitempty"`
	RepeatWindowSeconds int64 `json:"repeat_window_seconds,omitempty"`
	// SpendMultiple: the spend reserved in the last SpendWindowSeconds
	// (this request included) above SpendMultiple times the key's average
	// per SpendWindowSeconds over the BaselineSeconds before it. A key with
	// no spend in the baseline has no rate to compare with and never trips.
	SpendMultiple      int64 `json:"spend_multiple,omitempty"`
	SpendWindowSeconds int64 `json:"spend_window_seconds,omitempty"`
	BaselineSeconds    int64 `json:"baseline_seconds,omitempty"`
}

// Guard names, in GuardRefusal.Guard and the audit log.
const (
	GuardDuplicate = "duplicate"
	GuardVelocity  = "velocity"
	GuardRule      = "field_rule"
	GuardBreaker   = "breaker"
)

// Breaker rule names, in GuardRefusal.Rule and Key.SuspendedReason.
const (
	BreakerRefusals  = "refusal_burst"
	BreakerRepeat    = "repeat_body"
	BreakerSpendRate = "spend_rate"
)

// GuardRefusal is a store's refusal of a reservation by a guard. Nothing
// was reserved; when Suspended, the key was suspended in the same
// transaction.
type GuardRefusal struct {
	Guard string `json:"guard"`
	Rule  string `json:"rule,omitempty"` // the velocity limit's or the breaker rule's name

	// For the duplicate guard: the earlier reservation and its object.
	EarlierID       string    `json:"earlier_reservation,omitempty"`
	EarlierObjectID string    `json:"earlier_object,omitempty"`
	EarlierAt       time.Time `json:"earlier_at,omitzero"`

	// For velocity limits: the limit, the count in the window and when
	// the oldest counted request leaves it.
	Limit   int       `json:"limit,omitempty"`
	Count   int       `json:"count,omitempty"`
	RetryAt time.Time `json:"retry_at,omitzero"`

	Suspended bool `json:"suspended,omitempty"`
}

// Validate checks the guards' numbers and names; it does not compile field
// rules (the proxy does). Returns EINVALID naming the field.
func (g *Guards) Validate() error {
	if g == nil {
		return nil
	}
	if d := g.Duplicate; d != nil {
		if d.WindowSeconds <= 0 || d.WindowSeconds > 400*86400 {
			return ErrorParam("guards.duplicate.window_seconds", "guards.duplicate.window_seconds must be between 1 and %d.", 400*86400)
		}
		if len(d.MatchMetadata) > 40 {
			return ErrorParam("guards.duplicate.match_metadata", "guards.duplicate.match_metadata is a Stripe metadata key: at most 40 characters.")
		}
	}
	if len(g.Velocity) > 20 {
		return ErrorParam("guards.velocity", "At most 20 velocity limits.")
	}
	names := map[string]bool{}
	for i, v := range g.Velocity {
		p := fmt.Sprintf("guards.velocity[%d]", i)
		switch {
		case v.Name == "" || len(v.Name) > 64:
			return ErrorParam(p+".name", "%s.name is required (at most 64 characters).", p)
		case names[v.Name]:
			return ErrorParam(p+".name", "Two velocity limits are named %q.", v.Name)
		case v.Per != PerKey && v.Per != PerCustomer:
			return ErrorParam(p+".per", "%s.per must be %q or %q.", p, PerKey, PerCustomer)
		case v.Limit <= 0 || v.Limit > 1_000_000:
			return ErrorParam(p+".limit", "%s.limit must be between 1 and 1000000.", p)
		case v.WindowSeconds <= 0 || v.WindowSeconds > 400*86400:
			return ErrorParam(p+".window_seconds", "%s.window_seconds must be between 1 and %d.", p, 400*86400)
		case v.WindowKind != "" && v.WindowKind != WindowSliding && v.WindowKind != WindowFixed:
			return ErrorParam(p+".window_kind", "%s.window_kind must be %q (the default) or %q.", p, WindowSliding, WindowFixed)
		case len(v.Operations) > 50:
			return ErrorParam(p+".operations", "%s.operations: at most 50.", p)
		}
		names[v.Name] = true
	}
	if len(g.Rules) > 20 {
		return ErrorParam("guards.rules", "At most 20 field rules.")
	}
	names = map[string]bool{}
	for i, r := range g.Rules {
		p := fmt.Sprintf("guards.rules[%d]", i)
		switch {
		case r.Name == "" || len(r.Name) > 64:
			return ErrorParam(p+".name", "%s.name is required (at most 64 characters).", p)
		case names[r.Name]:
			return ErrorParam(p+".name", "Two field rules are named %q.", r.Name)
		case r.Expr == "" || len(r.Expr) > 2048:
			return ErrorParam(p+".expr", "%s.expr is required (at most 2048 characters).", p)
		}
		names[r.Name] = true
	}
	if b := g.Breaker; b != nil {
		for _, c := range []struct {
			name  string
			n     int64
			win   int64
			field string
		}{
			{"refusal_burst", int64(b.RefusalBurst), b.RefusalWindowSeconds, "refusal_window_seconds"},
			{"repeat_body", int64(b.RepeatBody), b.RepeatWindowSeconds, "repeat_window_seconds"},
			{"spend_multiple", b.SpendMultiple, b.SpendWindowSeconds, "spend_window_seconds"},
		} {
			if c.n < 0 || c.win < 0 || (c.n > 0) != (c.win > 0) || c.win > 400*86400 {
				return ErrorParam("guards.breaker."+c.field, "guards.breaker.%s and %s go together: both positive (window at most %d seconds) or both absent.", c.name, c.field, 400*86400)
			}
		}
		if b.SpendMultiple > 0 && (b.BaselineSeconds <= b.SpendWindowSeconds || b.BaselineSeconds > 400*86400) {
			return ErrorParam("guards.breaker.baseline_seconds", "guards.breaker.baseline_seconds must be longer than spend_window_seconds (at most %d).", 400*86400)
		}
		if b.RepeatBody == 1 {
			return ErrorParam("guards.breaker.repeat_body", "guards.breaker.repeat_body must be at least 2: the first request is not a repeat.")
		}
	}
	return nil
}

// Window returns n seconds as a duration.
func Window(n int64) time.Duration { return time.Duration(n) * time.Second }

// suspendedError is the refusal of every request on a suspended key.
func (k *Key) suspendedError() *Error {
	why := ""
	if k.SuspendedReason != "" {
		why = " (" + k.SuspendedReason + ")"
	}
	return Errorf(EFORBIDDEN, "This vault key (%s…) was suspended at %s%s; it refuses every request until an operator resumes it (POST /vault/keys/%s/resume).",
		k.SecretPrefix, k.SuspendedAt.UTC().Format(time.RFC3339), why, k.ID)
}

// GuardKey returns what the duplicate guard compares for a request: the
// customer (or payment method), the currency and either the amount or,
// when matchField is set, that metadata field's value (then with or
// without a customer: the field names the business object, e.g. an
// invoice or billing event). It returns "" when there is nothing to
// compare: no customer to compare amounts of, or the metadata field absent.
func GuardKey(customer, currency string, amount int64, matchField string, metadata map[string]string) string {
	if matchField == "" {
		if customer == "" {
			return ""
		}
		return fmt.Sprintf("%s|%s|amount=%d", customer, currency, amount)
	}
	v, ok := metadata[matchField]
	if !ok || v == "" {
		return ""
	}
	return fmt.Sprintf("%s|%s|%s=%s", customer, currency, matchField, v)
}

// RefusalArgs reports a cap or policy refusal on a key to its breaker.
type RefusalArgs struct {
	KeyID       string
	Fingerprint string // the refused request's (Reservation.Fingerprint), counted by repeat_body; "" for none
	Reason      string // the refusal's message, kept as the suspension's reason when it trips
	Now         time.Time
}

// GuardService keeps what the breaker decides on outside a reservation and
// the key's suspension.
type GuardService interface {
	// CountRefusal records a cap or policy refusal on the key and, in the
	// same transaction, suspends the key if its breaker's refusal_burst
	// rule is now met (that many refusals within its window), or its
	// repeat_body rule (reservations and refusals of the same fingerprint
	// within its window). It returns
	// whether this refusal suspended the key. Returns ENOTFOUND for an
	// unknown key.
	CountRefusal(ctx context.Context, args RefusalArgs) (suspended bool, err error)

	// SuspendKey suspends the key at now for reason; suspending twice
	// keeps the first time. Returns ENOTFOUND if the key does not exist.
	SuspendKey(ctx context.Context, id, reason string, now time.Time) (*Key, error)

	// ResumeKey clears the key's suspension. Returns ENOTFOUND if the key
	// does not exist.
	ResumeKey(ctx context.Context, id string, now time.Time) (*Key, error)

	// CountRequest decides and counts a request on the key's velocity
	// limits that count requests (VelocityLimit.Requests), reading the
	// key's guards in the same transaction: the first such limit that
	// applies and is already at its limit refuses (Guard "velocity",
	// with RetryAt), and nothing is counted; otherwise the request counts
	// in every such limit that applies. With args.Held the same is done
	// with the limits that count reservations and name the operation
	// (Guards.HeldLimits), serialised with the key's reservations. Exact
	// under concurrency and across replicas. A key without such limits
	// counts nothing and refuses nothing. Returns ENOTFOUND for an
	// unknown key.
	CountRequest(ctx context.Context, args RequestArgs) (*GuardRefusal, error)
}

// RequestArgs is a request counted by GuardService.CountRequest.
type RequestArgs struct {
	KeyID     string
	Operation string
	Customer  string // what the guards call the request's customer, "" for none
	Now       time.Time
	// Held says the request acts on an existing money object and makes no
	// reservation (a confirm, capture, update or increment of an intent
	// the key holds, a cancel): it is decided and counted in the limits
	// of Guards.HeldLimits instead of those that count requests, so that
	// a limit of one capture an hour also limits captures of held
	// authorizations. HoldOperation is the operation of the reservation
	// that made the hold, "" for none.
	Held          bool
	HoldOperation string
}

// HeldLimits returns the key's velocity limits that a request of op on a
// held object counts in when it arrives (RequestArgs.Held), since it makes
// no reservation: those that count reservations and name op, but not
// holdOp, the operation that made the hold, which such a limit counted
// already (one payment intent created then confirmed is one movement for
// a limit naming both). A limit that names no operation counts new money,
// which the hold counted.
func (g *Guards) HeldLimits(op, holdOp string) []VelocityLimit {
	if g == nil {
		return nil
	}
	var out []VelocityLimit
	for _, v := range g.Velocity {
		if !v.Requests && len(v.Operations) > 0 && v.Applies(op) && (holdOp == "" || !v.Applies(holdOp)) {
			out = append(out, v)
		}
	}
	return out
}

// countedLimits returns the limits GuardService.CountRequest decides and
// counts args in.
func (g *Guards) countedLimits(args RequestArgs) []VelocityLimit {
	if args.Held {
		return g.HeldLimits(args.Operation, args.HoldOperation)
	}
	return g.RequestLimits()
}

// RequestLimits returns the key's velocity limits that count requests.
func (g *Guards) RequestLimits() []VelocityLimit {
	if g == nil {
		return nil
	}
	var out []VelocityLimit
	for _, v := range g.Velocity {
		if v.Requests {
			out = append(out, v)
		}
	}
	return out
}

// CountsRequests reports whether any of the key's velocity limits counts
// requests: only then does a request that reserves nothing (a read) cost
// a store write.
func (g *Guards) CountsRequests() bool {
	if g == nil {
		return false
	}
	for _, v := range g.Velocity {
		if v.Requests {
			return true
		}
	}
	return false
}

// RequestCounters returns, for the request args of a key with guards g,
// the limits it is decided by (deduplicated by scope and limit) and the
// counters it counts in (one per distinct scope): the limits that count
// requests, or for a request on a held object those of HeldLimits.
func RequestCounters(g *Guards, args RequestArgs, now time.Time) (apply []VelocityLimit, counters []GuardCounter) {
	return requestCounters(g.countedLimits(args), args.Operation, args.Customer, now)
}

func requestCounters(ls []VelocityLimit, operation, customer string, now time.Time) (apply []VelocityLimit, counters []GuardCounter) {
	seen, probed := map[string]bool{}, map[string]bool{}
	for _, v := range ls {
		if !v.Applies(operation) || (v.Per == PerCustomer && customer == "") {
			continue
		}
		c := v.Counter(customer, now)
		if k := fmt.Sprintf("%s\x00%d", c.Scope, v.Limit); !probed[k] {
			probed[k] = true
			apply = append(apply, v)
		}
		if !seen[c.Scope] {
			seen[c.Scope] = true
			counters = append(counters, c)
		}
	}
	return apply, counters
}
