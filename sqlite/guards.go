package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/keybrake/keybrake"
)

var _ keybrake.GuardService = (*Store)(nil)

// checkGuards decides, inside the reservation's transaction tx, the guards
// of the key read in st on reservation in: the breaker's repeat and
// spend-rate rules (which suspend the key, in tx), the duplicate guard,
// then the velocity limits. Everything they read is read by one statement
// (guardProbe). It returns the first refusal, or nil to reserve and the
// counters the reservation counts in, which insertReservation records and
// adds it to.
func (s *Store) checkGuards(ctx context.Context, tx *sql.Tx, st *reserveState, in *keybrake.Reservation, now time.Time) (*keybrake.GuardRefusal, []keybrake.GuardCounter, error) {
	k, plan := &st.key, st.plan
	if plan == nil || plan.g.IsZero() {
		return nil, nil, nil
	}
	g := plan.g
	p := st.probe
	if p == nil {
		p = newGuardProbe(plan, in, now)
		if len(p.dest) > 0 {
			if err := s.runProbe(ctx, tx, p); err != nil {
				return nil, nil, wrap(err, "guards of key %s", k.ID)
			}
		}
	}
	if b := g.Breaker; b != nil {
		if rule, reason := breakerTrips(b, in, p); rule != "" {
			return &keybrake.GuardRefusal{Guard: keybrake.GuardBreaker, Rule: rule, Suspended: true}, nil, s.suspendIn(ctx, tx, k.ID, reason, now)
		}
	}
	if p.dupID.Valid {
		var (
			obj string
			at  int64
		)
		if err := tx.QueryRowContext(ctx, `SELECT object_id, created_at FROM reservations WHERE id = ?`, p.dupID.String).Scan(&obj, &at); err != nil {
			return nil, nil, wrap(err, "duplicate guard on key %s", k.ID)
		}
		return &keybrake.GuardRefusal{Guard: keybrake.GuardDuplicate, EarlierID: p.dupID.String, EarlierObjectID: obj, EarlierAt: fromMicros(at)}, nil, nil
	}
	for i, l := range p.limits {
		v := l.v
		if p.counts[i] < int64(v.Limit) {
			continue
		}
		buckets, err := s.counters(ctx, tx, k.ID, l.scopeFor(in.Customer), v.Since(now))
		if err != nil {
			return nil, nil, wrap(err, "velocity %s on key %s", v.Name, k.ID)
		}
		return &keybrake.GuardRefusal{Guard: keybrake.GuardVelocity, Rule: v.Name, Limit: v.Limit, Count: int(p.counts[i]),
			RetryAt: v.RetryAt(buckets)}, nil, nil
	}
	return nil, plan.countersFor(in.Operation, in.Customer, now), nil
}

// guardProbe is the one statement that reads what a key's guards decide a
// reservation on, built for the guards that apply to it, and its results.
// Its text depends only on which parts are present and how many limits
// apply (probeText), so the prepared statements stay few.
type guardProbe struct {
	args []any
	dest []any
	text probeShape

	repeats      int64
	recent, base int64
	dupID        sql.NullString
	limits       []*planLimit
	counts       []int64
}

// probeShape is what a probe's text depends on.
type probeShape struct {
	repeats, spend, dup bool
	limits              int
}

// The probe's parts; ?1 is the key.
const (
	// probeRepeats counts, up to a bound, the key's reservations and
	// recorded refusals of a fingerprint since a time: primary-key ranges.
	// repeat_fingerprints holds every reservation of a key whose guards
	// have the repeat rule, and only of those (0026).
	probeRepeats = `(SELECT COUNT(*) FROM (SELECT 1 FROM repeat_fingerprints WHERE key_id = ?1 AND fingerprint = ? AND created_at > ? LIMIT ?)) +
		(SELECT COUNT(*) FROM (SELECT 1 FROM guard_refusals WHERE key_id = ?1 AND fingerprint = ? AND at > ? LIMIT ?))`
	// probeSum sums a scope's counters from a bucket on.
	probeSum = `(SELECT COALESCE(SUM(%s), 0) FROM guard_counters WHERE key_id = ?1 AND scope = ? AND bucket >= ?)`
	// probeDuplicate finds the newest reservation the duplicate guard
	// matches: a probe of the partial index reservations_dup, reading a
	// row only for a match. The planner uses a partial index only when
	// the query implies its condition: dup_key = ? alone does not.
	probeDuplicate = `(SELECT id FROM reservations WHERE key_id = ?1 AND dup_key = ? AND dup_key <> '' AND created_at > ? AND state <> 'released'
		ORDER BY created_at DESC LIMIT 1)`
)

// probeTexts caches the probe's text by shape.
var probeTexts sync.Map

// probeText returns the text of a probe of shape sh.
func probeText(sh probeShape) string {
	if q, ok := probeTexts.Load(sh); ok {
		return q.(string)
	}
	q, _ := probeTexts.LoadOrStore(sh, "SELECT "+strings.Join(probeParts(sh), ",\n\t"))
	return q.(string)
}

// probeParts returns the select list of a probe of shape sh.
func probeParts(sh probeShape) []string {
	var parts []string
	if sh.repeats {
		parts = append(parts, probeRepeats)
	}
	if sh.spend {
		parts = append(parts, fmt.Sprintf(probeSum, "micros"), fmt.Sprintf(probeSum, "micros"))
	}
	if sh.dup {
		parts = append(parts, probeDuplicate)
	}
	for range sh.limits {
		parts = append(parts, fmt.Sprintf(probeSum, "n"))
	}
	return parts
}

func newGuardProbe(plan *guardPlan, in *keybrake.Reservation, now time.Time) *guardProbe {
	g := plan.g
	p := &guardProbe{args: make([]any, 1, 16), dest: make([]any, 0, 8)}
	p.args[0] = in.KeyID
	if b := g.Breaker; b != nil {
		if b.RepeatBody > 0 && in.Fingerprint != "" {
			since := now.Add(-keybrake.Window(b.RepeatWindowSeconds)).UnixMicro()
			p.text.repeats = true
			p.args = append(p.args, in.Fingerprint, since, b.RepeatBody, in.Fingerprint, since, b.RepeatBody)
			p.dest = append(p.dest, &p.repeats)
		}
		if b.SpendMultiple > 0 {
			sp := b.Probe(now)
			p.text.spend = true
			p.args = append(p.args, sp.Recent, sp.RecentSince, sp.Base, sp.BaseSince)
			p.dest = append(p.dest, &p.recent, &p.base)
		}
	}
	if d := g.Duplicate; d != nil && in.DupKey != "" && !(in.Override && d.AllowOverride) {
		p.text.dup = true
		p.args = append(p.args, in.DupKey, now.Add(-keybrake.Window(d.WindowSeconds)).UnixMicro())
		p.dest = append(p.dest, &p.dupID)
	}
	for i := range plan.limits {
		if l := &plan.limits[i]; l.applies(in.Operation, in.Customer) {
			p.limits = append(p.limits, l)
		}
	}
	p.counts = make([]int64, len(p.limits))
	p.text.limits = len(p.limits)
	for i, l := range p.limits {
		p.args = append(p.args, l.scopeFor(in.Customer), l.v.Since(now))
		p.dest = append(p.dest, &p.counts[i])
	}
	return p
}

// runProbe runs p in tx through a statement prepared once per text. A
// text seen for the first time runs unprepared and is prepared after the
// transaction (prepareProbes): preparing needs the writer's only
// connection, which tx holds.
func (s *Store) runProbe(ctx context.Context, tx *sql.Tx, p *guardProbe) error {
	q := probeText(p.text)
	if st, ok := s.probes.Load(q); ok && st != nil {
		return tx.StmtContext(ctx, st.(*sql.Stmt)).QueryRowContext(ctx, p.args...).Scan(p.dest...)
	}
	s.probes.LoadOrStore(q, nil)
	s.probeMisses.Store(true)
	return tx.QueryRowContext(ctx, q, p.args...).Scan(p.dest...)
}

// prepareProbes prepares the probe texts runProbe saw unprepared. It must
// run outside a write transaction.
func (s *Store) prepareProbes() {
	s.probes.Range(func(q, st any) bool {
		if st != nil {
			return true
		}
		prepared, err := s.writer.PrepareContext(context.Background(), q.(string))
		if err != nil {
			return true // stays unprepared; runProbe still runs it
		}
		if !s.probes.CompareAndSwap(q, nil, prepared) {
			prepared.Close()
		}
		return true
	})
}

// counters reads a scope's counters from bucket since on.
func (s *Store) counters(ctx context.Context, tx *sql.Tx, keyID, scope string, since int64) ([]keybrake.BucketCount, error) {
	rows, err := tx.QueryContext(ctx, `SELECT bucket, SUM(n), SUM(micros) FROM guard_counters
		WHERE key_id = ? AND scope = ? AND bucket >= ? GROUP BY bucket HAVING SUM(n) > 0`, keyID, scope, since)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var bs []keybrake.BucketCount
	for rows.Next() {
		var b keybrake.BucketCount
		if err := rows.Scan(&b.Bucket, &b.N, &b.Micros); err != nil {
			return nil, err
		}
		bs = append(bs, b)
	}
	return bs, rows.Err()
}

// breakerTrips returns the breaker rule that reservation in would trip,
// given what p read, and the suspension's reason, or "" when none does.
func breakerTrips(b *keybrake.Breaker, in *keybrake.Reservation, p *guardProbe) (rule, reason string) {
	if p.text.repeats && int(p.repeats)+1 >= b.RepeatBody {
		return keybrake.BreakerRepeat, fmt.Sprintf("breaker %s: the same %s request %d times within %ds under different Idempotency-Keys", keybrake.BreakerRepeat, in.Operation, p.repeats+1, b.RepeatWindowSeconds)
	}
	if p.text.spend {
		recent := p.recent + int64(in.Micros)
		if b.SpendRateTrips(recent, p.base-p.recent) {
			return keybrake.BreakerSpendRate, b.SpendRateReason(recent)
		}
	}
	return "", ""
}

// repeats counts the key's reservations and recorded refusals of
// fingerprint since since, each up to bound: the rule only asks whether
// there are enough.
func (s *Store) repeats(ctx context.Context, tx *sql.Tx, keyID, fingerprint string, since time.Time, bound int) (int, error) {
	var n int
	t := since.UnixMicro()
	err := tx.QueryRowContext(ctx, `SELECT `+probeRepeats, keyID, fingerprint, t, bound, fingerprint, t, bound).Scan(&n)
	return n, wrap(err, "breaker on key %s", keyID)
}

// suspendIn suspends the key inside tx, keeping an earlier suspension.
func (s *Store) suspendIn(ctx context.Context, tx *sql.Tx, keyID, reason string, now time.Time) error {
	_, err := tx.ExecContext(ctx, `UPDATE keys SET suspended_at = ?, suspended_reason = ?, updated_at = ?
		WHERE id = ? AND suspended_at IS NULL`, now.UnixMicro(), reason, now.UnixMicro(), keyID)
	return wrap(err, "suspend key %s", keyID)
}

// CountRefusal records a refusal on the key and suspends it if its breaker
// trips. See keybrake.GuardService.
func (s *Store) CountRefusal(ctx context.Context, args keybrake.RefusalArgs) (bool, error) {
	now := args.Now
	if now.IsZero() {
		now = s.now()
	}
	args.Reason = keybrake.CleanText(args.Reason) // quoted in the suspension's reason
	now = dbTime(now)
	var suspended bool
	err := s.batch.write(ctx, func(tx *sql.Tx) error {
		ctx := context.Background() // a batch runs without its callers' contexts
		var (
			guards string
			at     sql.NullInt64
		)
		err := tx.QueryRowContext(ctx, `SELECT guards, suspended_at FROM keys WHERE id = ?`, args.KeyID).Scan(&guards, &at)
		if err != nil {
			return wrapKeyErr(err, "count refusal on key %s", args.KeyID)
		}
		g, err := decodeGuards(guards)
		if err != nil || g == nil || g.Breaker == nil || at.Valid {
			return err
		}
		b := g.Breaker
		keep := max(b.RefusalWindowSeconds, b.RepeatWindowSeconds)
		if _, err := tx.ExecContext(ctx, `DELETE FROM guard_refusals WHERE key_id = ? AND at <= ?`, args.KeyID, now.Add(-keybrake.Window(keep)).UnixMicro()); err != nil {
			return wrap(err, "count refusal on key %s", args.KeyID)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO guard_refusals (key_id, at, fingerprint) VALUES (?, ?, ?)`, args.KeyID, now.UnixMicro(), args.Fingerprint); err != nil {
			return wrap(err, "count refusal on key %s", args.KeyID)
		}
		reason := ""
		if b.RefusalBurst > 0 {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM guard_refusals WHERE key_id = ? AND at > ?`,
				args.KeyID, now.Add(-keybrake.Window(b.RefusalWindowSeconds)).UnixMicro()).Scan(&n); err != nil {
				return wrap(err, "count refusal on key %s", args.KeyID)
			}
			if n >= b.RefusalBurst {
				reason = fmt.Sprintf("breaker %s: %d refusals within %ds, the last: %s", keybrake.BreakerRefusals, n, b.RefusalWindowSeconds, truncate(args.Reason, 200))
			}
		}
		if reason == "" && b.RepeatBody > 0 && args.Fingerprint != "" {
			n, err := s.repeats(ctx, tx, args.KeyID, args.Fingerprint, now.Add(-keybrake.Window(b.RepeatWindowSeconds)), b.RepeatBody)
			if err != nil {
				return err
			}
			if n >= b.RepeatBody {
				reason = fmt.Sprintf("breaker %s: the same request %d times within %ds under different Idempotency-Keys", keybrake.BreakerRepeat, n, b.RepeatWindowSeconds)
			}
		}
		if reason == "" {
			return nil
		}
		suspended = true
		return s.suspendIn(ctx, tx, args.KeyID, reason, now)
	})
	if err != nil {
		return false, err
	}
	if suspended {
		s.notifyKey(args.KeyID)
	}
	return suspended, nil
}

// SuspendKey suspends the key and its descendants (suspend_cascade.go);
// suspending twice keeps the first time and reason. Returns ENOTFOUND for
// an unknown key.
func (s *Store) SuspendKey(ctx context.Context, id, reason string, now time.Time) (*keybrake.Key, error) {
	return s.suspendKey(ctx, id, reason, now, nil)
}

// suspendKey is SuspendKey appending e, when not nil, in the same
// transaction.
func (s *Store) suspendKey(ctx context.Context, id, reason string, now time.Time, e *keybrake.AdminEvent) (*keybrake.Key, error) {
	var children []string
	k, err := s.setSuspension(ctx, id, e, func(tx *sql.Tx) (err error) {
		if err := takeOverSuspension(context.Background(), tx, id, reason, dbTime(now)); err != nil {
			return err
		}
		if err := s.suspendIn(context.Background(), tx, id, reason, dbTime(now)); err != nil {
			return err
		}
		children, err = suspendDescendants(context.Background(), tx, id, reason, dbTime(now))
		return err
	})
	s.notifyKeys(children)
	return k, err
}

// ResumeKey clears the key's suspension. Returns ENOTFOUND for an unknown
// key.
func (s *Store) ResumeKey(ctx context.Context, id string, now time.Time) (*keybrake.Key, error) {
	return s.resumeKey(ctx, id, now, nil)
}

// resumeKey is ResumeKey appending e, when not nil, in the same
// transaction.
func (s *Store) resumeKey(ctx context.Context, id string, now time.Time, e *keybrake.AdminEvent) (*keybrake.Key, error) {
	var children []string
	k, err := s.setSuspension(ctx, id, e, func(tx *sql.Tx) (err error) {
		if _, err := tx.ExecContext(context.Background(), `UPDATE keys SET suspended_at = NULL, suspended_reason = '', suspended_by = '', updated_at = ?
			WHERE id = ? AND suspended_at IS NOT NULL`, dbTime(now).UnixMicro(), id); err != nil {
			return wrap(err, "resume key %s", id)
		}
		children, err = resumeDescendants(context.Background(), tx, id, dbTime(now))
		return err
	})
	s.notifyKeys(children)
	return k, err
}

// setSuspension runs fn on the key, unless it is revoked, then appends e
// (when not nil), all in one write.
func (s *Store) setSuspension(ctx context.Context, id string, e *keybrake.AdminEvent, fn func(tx *sql.Tx) error) (*keybrake.Key, error) {
	var k *keybrake.Key
	err := s.batch.write(ctx, func(tx *sql.Tx) error {
		before, err := scanKey(tx.QueryRowContext(context.Background(), qKeyByID, id))
		if err != nil {
			return wrapKeyErr(err, "key %s", id)
		}
		if before.RevokedAt != nil {
			// Revocation is final: neither suspending nor resuming changes it.
			return keybrake.Errorf(keybrake.ECONFLICT, "Key %s was revoked at %s; revocation is final. Create a new key.", id, before.RevokedAt.UTC().Format(time.RFC3339))
		}
		if err := fn(tx); err != nil {
			return err
		}
		if e != nil {
			if err := addAdminEventIn(context.Background(), tx, e); err != nil {
				return err
			}
		}
		k, err = scanKey(tx.QueryRowContext(context.Background(), qKeyByID, id))
		return wrapKeyErr(err, "key %s", id)
	})
	if err != nil {
		return nil, err
	}
	s.notifyKey(id)
	return k, nil
}

// encodeGuards is the guards column: "" for none.
func encodeGuards(g *keybrake.Guards) string {
	if g.IsZero() {
		return ""
	}
	b, _ := json.Marshal(g) // plain structs: cannot fail
	return string(b)
}

func decodeGuards(s string) (*keybrake.Guards, error) {
	if s == "" {
		return nil, nil
	}
	var g keybrake.Guards
	if err := json.Unmarshal([]byte(s), &g); err != nil {
		return nil, err
	}
	return &g, nil
}

func truncate(s string, n int) string {
	return keybrake.TruncateText(s, n)
}

// qInsertCounted inserts a reservation of a guarded key with the counters
// it counts in.
var qInsertCounted = `INSERT INTO reservations (` + resColumns + `, counted)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// insertReservation inserts r in tx, counted in the guard counters cs
// (recorded on the row for a later release or re-arm, and added to in one
// statement), and now and then drops expired counters.
func (s *Store) insertReservation(ctx context.Context, tx *sql.Tx, r *keybrake.Reservation, cs []keybrake.GuardCounter) (sql.Result, error) {
	if len(cs) == 0 {
		return s.txExec(ctx, tx, qInsertReservation, reservationArgs(r)...)
	}
	if err := s.pruneCounters(ctx, tx, r.CreatedAt); err != nil {
		return nil, err
	}
	res, err := s.txExec(ctx, tx, qInsertCounted, append(reservationArgs(r), encodeCounters(cs))...)
	if err != nil {
		return nil, err
	}
	return res, s.addCounters(ctx, tx, r.KeyID, int64(r.Micros), cs)
}

// pruneCounters deletes, at most once a minute, the guard counters no
// window reads any more.
func (s *Store) pruneCounters(ctx context.Context, tx *sql.Tx, now time.Time) error {
	next := s.nextPrune.Load()
	if now.Unix() < next {
		return nil
	}
	s.nextPrune.Store(now.Unix() + 60)
	_, err := tx.ExecContext(ctx, `DELETE FROM guard_counters WHERE expires < ?`, now.Unix())
	return wrap(err, "prune guard counters")
}
