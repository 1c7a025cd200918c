package http

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keybrake/keybrake"
)

// guardSubjects are the parameters, in order, whose first value is what
// the guards call the request's customer: the customer, else the payment
// method or source charged, else (for a refund) the charge or payment
// intent refunded.
var guardSubjects = []string{"customer", "payment_method", "source", "charge", "payment_intent"}

// guardInputs fills in what the store's guards compare on rsv: the
// customer, the duplicate guard's match and the override. Keys without
// guards leave them empty, so the stores' guard indexes stay small.
func guardInputs(r *http.Request, c *call, rsv *keybrake.Reservation) {
	form := c.req.Params
	g := c.key.Guards
	if g.IsZero() || form == nil {
		return
	}
	rsv.Customer = guardCustomer(c.req)
	if d := g.Duplicate; d != nil {
		rsv.DupKey = keybrake.GuardKey(rsv.Customer, rsv.Currency, rsv.Amount, d.MatchMetadata, form.Map("metadata"))
		if why := strings.TrimSpace(r.Header.Get(keybrake.OverrideHeader)); why != "" {
			rsv.Override = true
			if d.AllowOverride {
				c.note = "duplicate guard overridden (" + keybrake.OverrideHeader + ": " + truncate(why, 200) + ")"
			}
		}
	}
}

// guardCustomer is the request's customer for the guards: its Subject,
// else the first of guardSubjects it names, "" for none.
func guardCustomer(req *VendorRequest) string {
	if req.Subject != "" {
		return req.Subject
	}
	form := req.Params
	if form == nil {
		return ""
	}
	for _, p := range guardSubjects {
		if v, ok := form.Get(p); ok && v != "" {
			return v
		}
	}
	return ""
}

// guardRefused writes the refusal of a reservation by a guard, in the
// vendor's shape: a 409 for a duplicate, a 429 with Retry-After for a
// velocity limit, a 403 when the breaker suspended the key.
func (p *proxy) guardRefused(w http.ResponseWriter, r *http.Request, c *call, g *keybrake.GuardRefusal) {
	var (
		status int
		code   string
		kbcode string
		msg    string
	)
	switch g.Guard {
	case keybrake.GuardDuplicate:
		status, code, kbcode = http.StatusConflict, "keybrake_duplicate_charge", keybrake.ECONFLICT
		what := g.EarlierObjectID
		if what == "" {
			what = "a request still in flight"
		}
		d := c.key.Guards.Duplicate
		match := "amount and currency"
		if d.MatchMetadata != "" {
			match = "currency and metadata[" + d.MatchMetadata + "]"
		}
		how := fmt.Sprintf("If it is intended, retry with the header %s: <reason> (audited).", keybrake.OverrideHeader)
		if !d.AllowOverride {
			how = fmt.Sprintf("This key does not allow overriding it; an operator can set guards.duplicate.allow_override and then a request may carry %s: <reason>.", keybrake.OverrideHeader)
		}
		msg = fmt.Sprintf("keybrake refused %s as a duplicate: %s (reservation %s, at %s) has the same customer, %s on vault key %s within the last %ds, under a different Idempotency-Key. Nothing was sent to %s. %s",
			opName(c), what, g.EarlierID, g.EarlierAt.UTC().Format(time.RFC3339), match, c.key.ID, d.WindowSeconds, c.vendorTitle(), how)
	case keybrake.GuardVelocity:
		status, code, kbcode = http.StatusTooManyRequests, "keybrake_velocity_limit", keybrake.EOVERCAP
		wait := max(1, int64(math.Ceil(g.RetryAt.Sub(p.s.Now()).Seconds())))
		w.Header().Set("Retry-After", strconv.FormatInt(wait, 10))
		msg = fmt.Sprintf("keybrake refused %s: velocity limit %q allows %d in its window on vault key %s and %d were made; it frees up at %s (Retry-After: %ds). Nothing was sent to %s.",
			opName(c), g.Rule, g.Limit, c.key.ID, g.Count, g.RetryAt.UTC().Format(time.RFC3339), wait, c.vendorTitle())
	default:
		status, code, kbcode = http.StatusForbidden, "keybrake_key_suspended", keybrake.EFORBIDDEN
		msg = fmt.Sprintf("keybrake refused %s and suspended vault key %s: breaker rule %s tripped. The key refuses every request until an operator resumes it (POST /vault/keys/%s/resume). Nothing was sent to %s.",
			opName(c), c.key.ID, g.Rule, c.key.ID, c.vendorTitle())
		p.s.evictKey(c.key.ID)
		p.s.metrics.suspended(g.Rule)
	}
	p.s.metrics.guardRefusal(g.Guard, g.Rule)
	p.s.metrics.decision(opName(c), "guard_"+g.Guard)
	p.audit(r, c, keybrake.DecisionDeny, msg, 0, "")
	if g.Guard != keybrake.GuardBreaker {
		p.countRefusal(c, msg)
	}
	c.v.WriteError(w, r, &refusal{err: &keybrake.Error{Code: kbcode, Message: msg}, status: status, typ: "invalid_request_error", code: code, retry: "false", detail: g})
}

// countRefusal reports a cap or policy refusal to the key's breaker, which
// may suspend the key. A failure is logged: the refusal stands either way.
func (p *proxy) countRefusal(c *call, reason string) {
	k := c.key
	if k == nil || k.SuspendedAt != nil || k.Guards == nil || k.Guards.Breaker == nil {
		return
	}
	if b := k.Guards.Breaker; b.RefusalBurst == 0 && b.RepeatBody == 0 {
		return
	}
	fp := ""
	if c.req != nil {
		fp = c.fingerprint()
	}
	suspended, err := p.s.Store.CountRefusal(context.Background(), keybrake.RefusalArgs{KeyID: k.ID, Fingerprint: fp, Reason: reason, Now: p.s.Now()})
	if err != nil {
		p.s.logger().Error("breaker: count refusal failed", "key_id", k.ID, "err", err)
		return
	}
	if suspended {
		p.s.evictKey(k.ID)
		p.s.metrics.suspended(keybrake.BreakerRefusals)
		p.s.logger().Warn("breaker suspended a vault key", "key_id", k.ID)
	}
}

// countsForBreaker reports whether a refusal's code is one the breaker's
// refusal_burst counts: caps and policy, not malformed requests.
func countsForBreaker(code string) bool {
	return code == keybrake.EOVERCAP || code == keybrake.EFORBIDDEN
}

// guardMetrics count the guards' refusals and the breaker's suspensions.
type guardMetrics struct {
	refusals    *prometheus.CounterVec
	suspensions *prometheus.CounterVec
}

func newGuardMetrics(reg *prometheus.Registry) guardMetrics {
	g := guardMetrics{
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keybrake_guard_refusals_total", Help: "Requests refused by a key's guards, by guard (duplicate, velocity, field_rule, breaker) and rule name.",
		}, []string{"guard", "rule"}),
		suspensions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keybrake_key_suspensions_total", Help: "Vault keys suspended by a breaker rule.",
		}, []string{"rule"}),
	}
	reg.MustRegister(g.refusals, g.suspensions)
	return g
}

func (m *metrics) guardRefusal(guard, rule string) {
	if len(rule) > 64 {
		rule = rule[:64]
	}
	m.guards.refusals.WithLabelValues(guard, rule).Inc()
}

func (m *metrics) suspended(rule string) { m.guards.suspensions.WithLabelValues(rule).Inc() }
