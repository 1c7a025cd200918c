package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keybrake/keybrake"
)

// A guardPlan is what deciding a key's guards needs that depends only on
// the guards, worked out once per guards text (the keys column) instead of
// on every reservation: the decoded guards, the velocity limits that count
// reservations with their counter scopes, and the spend-rate scopes. A
// plan is shared and never changed once made.
type guardPlan struct {
	g *keybrake.Guards

	limits   []planLimit // probed: deduplicated by scope and limit
	counters []planLimit // counted in: deduplicated by scope
}

// planLimit is a velocity limit with its scope: the whole scope for a
// per-key limit, the scope before the customer for a per-customer one.
type planLimit struct {
	v           keybrake.VelocityLimit
	scope       string
	perCustomer bool
}

// scopeFor is keybrake.VelocityLimit.Scope(customer).
func (l *planLimit) scopeFor(customer string) string {
	if l.perCustomer {
		return l.scope + customer
	}
	return l.scope
}

// applies reports whether the limit decides and counts a reservation of
// operation for customer.
func (l *planLimit) applies(operation, customer string) bool {
	return l.v.Applies(operation) && (!l.perCustomer || customer != "")
}

// plans caches guard plans by guards text. Keys' guards change seldom; the
// cache is dropped whole when it fills.
type planCache struct {
	mu sync.Mutex
	m  map[string]*guardPlan
}

const planCacheSize = 4096

// planOf returns the plan of a guards column, nil for a key without guards.
func (s *Store) planOf(raw string) (*guardPlan, error) {
	if raw == "" {
		return nil, nil
	}
	s.plans.mu.Lock()
	p, ok := s.plans.m[raw]
	s.plans.mu.Unlock()
	if ok {
		return p, nil
	}
	g, err := decodeGuards(raw)
	if err != nil {
		return nil, err
	}
	p = newGuardPlan(g)
	s.plans.mu.Lock()
	if s.plans.m == nil || len(s.plans.m) >= planCacheSize {
		s.plans.m = map[string]*guardPlan{}
	}
	s.plans.m[raw] = p
	s.plans.mu.Unlock()
	return p, nil
}

func newGuardPlan(g *keybrake.Guards) *guardPlan {
	p := &guardPlan{g: g}
	if g.IsZero() {
		return p
	}
	probed, counted := map[string]bool{}, map[string]bool{}
	for _, v := range g.Velocity {
		if v.CountsRequests() {
			continue // counted per request, not per reservation (guard_requests.go)
		}
		l := planLimit{v: v, scope: v.Scope(""), perCustomer: v.Per == keybrake.PerCustomer}
		if k := l.scope + "\x00" + strconv.Itoa(v.Limit); !probed[k] {
			probed[k] = true
			p.limits = append(p.limits, l)
		}
		if !counted[l.scope] {
			counted[l.scope] = true
			p.counters = append(p.counters, l)
		}
	}
	return p
}

// countersFor is keybrake.CountersFor on the plan: the counters a
// reservation of operation for customer at now counts in.
func (p *guardPlan) countersFor(operation, customer string, now time.Time) []keybrake.GuardCounter {
	var cs []keybrake.GuardCounter
	for i := range p.counters {
		l := &p.counters[i]
		if !l.applies(operation, customer) {
			continue
		}
		w := l.v.BucketSeconds()
		b := floorTo(now.Unix(), w)
		cs = append(cs, keybrake.GuardCounter{Scope: l.scopeFor(customer), Bucket: b, Expires: b + w + l.v.WindowSeconds})
	}
	if b := p.g.Breaker; b != nil && b.SpendMultiple > 0 {
		cs = append(cs, keybrake.SpendCounters(b, now)...)
	}
	return cs
}

// floorTo rounds s down to a multiple of w (w > 0), also for s < 0.
func floorTo(s, w int64) int64 {
	q := s / w
	if s%w != 0 && s < 0 {
		q--
	}
	return q * w
}

// encodeCounters is keybrake.EncodeCounters without reflection.
func encodeCounters(cs []keybrake.GuardCounter) string {
	if len(cs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('[')
	for i, c := range cs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('[')
		if plainJSON(c.Scope) {
			b.WriteByte('"')
			b.WriteString(c.Scope)
			b.WriteByte('"')
		} else {
			q, _ := json.Marshal(c.Scope) // a string: cannot fail
			b.Write(q)
		}
		b.WriteByte(',')
		b.WriteString(strconv.FormatInt(c.Bucket, 10))
		b.WriteByte(',')
		b.WriteString(strconv.FormatInt(c.Expires, 10))
		b.WriteByte(']')
	}
	b.WriteByte(']')
	return b.String()
}

// plainJSON reports whether s needs no escaping in a JSON string (nor
// the HTML escaping json.Marshal adds, which SQLite's JSON reads either way).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// addCounters adds a new reservation of micros to the counters cs in one
// statement, in slot ” (see migrations/0012_guards2.sql): what the insert
// trigger did from the reservation's JSON before 0019_guard_counts.sql.
func (s *Store) addCounters(ctx context.Context, tx *sql.Tx, keyID string, micros int64, cs []keybrake.GuardCounter) error {
	if len(cs) == 0 {
		return nil
	}
	args := make([]any, 0, 2+2*len(cs))
	args = append(args, keyID, micros)
	for _, c := range cs {
		args = append(args, c.Scope, c.Bucket, c.Expires)
	}
	_, err := s.cachedExec(ctx, tx, addCountersQuery(len(cs)), args...)
	return wrap(err, "guard counters of key %s", keyID)
}

// addCountersQueries are the texts of addCounters by number of counters.
var addCountersQueries sync.Map

func addCountersQuery(n int) string {
	if q, ok := addCountersQueries.Load(n); ok {
		return q.(string)
	}
	var b strings.Builder
	b.WriteString(`INSERT INTO guard_counters (key_id, scope, bucket, slot, expires, n, micros) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "(?1, ?%d, ?%d, '', ?%d, 1, ?2)", 3+3*i, 4+3*i, 5+3*i)
	}
	b.WriteString(` ON CONFLICT (key_id, scope, bucket, slot) DO UPDATE SET n = n + 1, micros = micros + excluded.micros`)
	q, _ := addCountersQueries.LoadOrStore(n, b.String())
	return q.(string)
}

// cachedExec runs q in tx through a statement prepared once per text, as
// runProbe does for queries.
func (s *Store) cachedExec(ctx context.Context, tx *sql.Tx, q string, args ...any) (sql.Result, error) {
	if st, ok := s.probes.Load(q); ok && st != nil {
		return tx.StmtContext(ctx, st.(*sql.Stmt)).ExecContext(ctx, args...)
	}
	s.probes.LoadOrStore(q, nil)
	s.probeMisses.Store(true)
	return tx.ExecContext(ctx, q, args...)
}

// readReserve runs qReserveRead for st into dest. When the key's guards
// are guessed (the guards text the key's last reservation read), the
// guards' probe joins the same statement, saving one per reservation:
// st.probe holds it, and guessedGuards drops it if the guess was wrong.
func (s *Store) readReserve(ctx context.Context, tx *sql.Tx, st *reserveState, in *keybrake.Reservation, now time.Time, dest []any) error {
	args := []any{in.KeyID, in.IdempotencyKey, st.day, st.month}
	st.probe = nil
	guess, ok := s.guardGuess.Load(in.KeyID)
	if !ok {
		return s.txQueryRow(ctx, tx, qReserveRead, args...).Scan(dest...)
	}
	plan, err := s.planOf(guess.(string))
	if err != nil || plan == nil {
		return s.txQueryRow(ctx, tx, qReserveRead, args...).Scan(dest...)
	}
	p := newGuardProbe(plan, in, now)
	if len(p.dest) == 0 {
		return s.txQueryRow(ctx, tx, qReserveRead, args...).Scan(dest...)
	}
	// The probe's ?1 is the key, as the read's; its other parameters are
	// unnumbered, so they follow the read's ?4.
	if err := s.runQuery(ctx, tx, reserveReadText(p.text), append(args, p.args[1:]...), append(dest, p.dest...)); err != nil {
		return err
	}
	st.probe, st.probeGuess = p, guess.(string)
	return nil
}

// guessedGuards keeps the key's guards text as the next reservation's
// guess, and drops a probe read under a wrong guess.
func (s *Store) guessedGuards(st *reserveState, keyID, guards string) {
	if st.probe != nil && st.probeGuess != guards {
		st.probe = nil
	}
	if guards == "" {
		s.guardGuess.Delete(keyID)
		return
	}
	if old, ok := s.guardGuess.Load(keyID); !ok || old.(string) != guards {
		s.guardGuess.Store(keyID, guards)
	}
}

// reserveReadTexts caches qReserveRead with a probe, by the probe's shape.
var reserveReadTexts sync.Map

func reserveReadText(sh probeShape) string {
	if q, ok := reserveReadTexts.Load(sh); ok {
		return q.(string)
	}
	q, _ := reserveReadTexts.LoadOrStore(sh, qReserveReadList+",\n\t"+strings.Join(probeParts(sh), ",\n\t")+qReserveReadFrom)
	return q.(string)
}
