package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
)

// The alert tables' columns, in the order the scan helpers read them.
const (
	ruleColumns     = `id, key_id, kind, window_name, percent, hours, count, seconds, minutes, enabled, created_at, updated_at`
	endpointColumns = `id, url, format, key_id, secret, enabled, created_at, updated_at`
	alertColumns    = `a.id, a.alert_key, a.kind, a.key_id, a.window_name, a.bucket, a.percent, a.cap_micros, a.threshold_micros,
		a.spent_micros, a.reserved_micros, a.reservation_id, a.count, a.endpoint_id, a.detail, a.created_at, a.approval_id,
		a.finding, a.upstream_object, a.object_id, a.amount, a.currency, a.reserved_amount, a.reserved_currency`
	deliveryColumns = `d.id, d.alert_id, d.endpoint_id, d.state, d.attempts, d.next_attempt_at, d.first_attempt_at,
		d.last_status, d.last_error, d.lease_owner, d.lease_until, d.created_at, d.updated_at`
)

// ownOrDefault selects, in a WHERE clause over alert_rules r, the rules of
// kind that apply to key ?1: the key's own if it has any, else the defaults.
const ownOrDefault = `r.key_id = (CASE WHEN EXISTS (SELECT 1 FROM alert_rules x WHERE x.kind = r.kind AND x.key_id = %s) THEN %s ELSE '' END)`

// CreateAlertRule stores a rule. Returns EINVALID for a bad rule, ENOTFOUND
// if KeyID names no key, ECONFLICT if the ID is taken.
func (s *Store) CreateAlertRule(ctx context.Context, r *keybrake.AlertRule) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if r.ID == "" {
		r.ID = newAlertID("alr_")
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = s.now()
	}
	r.CreatedAt = dbTime(r.CreatedAt)
	r.UpdatedAt = r.CreatedAt
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := keyExists(ctx, tx, r.KeyID); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO alert_rules (`+ruleColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		ruleArgs(r)...); err != nil {
		if isUnique(err) {
			return keybrake.Errorf(keybrake.ECONFLICT, "Alert rule %s already exists.", r.ID)
		}
		return wrap(err, "create alert rule")
	}
	return wrap(tx.Commit(), "create alert rule")
}

// keyExists returns ENOTFOUND unless id is "" or names a key.
func keyExists(ctx context.Context, tx *sql.Tx, id string) error {
	if id == "" {
		return nil
	}
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM keys WHERE id = ?`, id).Scan(&one)
	return wrapKeyErr(err, "find key %s", id)
}

// FindAlertRules returns the rules of keyID, or every rule with all set,
// defaults first, by kind and creation.
func (s *Store) FindAlertRules(ctx context.Context, keyID string, all bool) ([]*keybrake.AlertRule, error) {
	q, args := `SELECT `+ruleColumns+` FROM alert_rules`, []any{}
	if !all {
		q, args = q+` WHERE key_id = ?`, append(args, keyID)
	}
	rows, err := s.reader.QueryContext(ctx, q+` ORDER BY key_id, kind, created_at, id`, args...)
	if err != nil {
		return nil, wrap(err, "find alert rules")
	}
	defer rows.Close()
	var out []*keybrake.AlertRule
	for rows.Next() {
		r, err := scanRule(rows)
		if err != nil {
			return nil, wrap(err, "find alert rules")
		}
		out = append(out, r)
	}
	return out, wrap(rows.Err(), "find alert rules")
}

// UpdateAlertRule applies upd. Returns ENOTFOUND, or EINVALID if the result
// is not a valid rule.
func (s *Store) UpdateAlertRule(ctx context.Context, id string, upd keybrake.AlertRuleUpdate, now time.Time) (*keybrake.AlertRule, error) {
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	r, err := scanRule(tx.QueryRowContext(ctx, `SELECT `+ruleColumns+` FROM alert_rules WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, keybrake.Errorf(keybrake.ENOTFOUND, "No such alert rule.")
	} else if err != nil {
		return nil, wrap(err, "update alert rule %s", id)
	}
	r.Apply(upd)
	if err := r.Validate(); err != nil {
		return nil, err
	}
	r.UpdatedAt = dbTime(now)
	if _, err := tx.ExecContext(ctx, `UPDATE alert_rules SET window_name = ?, percent = ?, hours = ?, count = ?, seconds = ?,
		minutes = ?, enabled = ?, updated_at = ? WHERE id = ?`,
		r.Window, r.Percent, r.Hours, r.Count, r.Seconds, r.Minutes, r.Enabled, r.UpdatedAt.UnixMicro(), id); err != nil {
		return nil, wrap(err, "update alert rule %s", id)
	}
	return r, wrap(tx.Commit(), "update alert rule %s", id)
}

// DeleteAlertRule removes a rule. Returns ENOTFOUND.
func (s *Store) DeleteAlertRule(ctx context.Context, id string) error {
	return s.deleteOne(ctx, `DELETE FROM alert_rules WHERE id = ?`, id, "alert rule")
}

// deleteOne runs a DELETE of one row by id; ENOTFOUND if none matched.
func (s *Store) deleteOne(ctx context.Context, q, id, what string) error {
	res, err := s.writer.ExecContext(ctx, q, id)
	if err != nil {
		return wrap(err, "delete %s %s", what, id)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return keybrake.Errorf(keybrake.ENOTFOUND, "No such %s.", what)
	}
	return nil
}

// CreateAlertEndpoint stores an endpoint. Returns ENOTFOUND if KeyID names
// no key, ECONFLICT if the ID is taken.
func (s *Store) CreateAlertEndpoint(ctx context.Context, e *keybrake.AlertEndpoint) error {
	if e.ID == "" {
		e.ID = newAlertID("we_")
	}
	if e.CreatedAt.IsZero() {
		e.CreatedAt = s.now()
	}
	e.CreatedAt = dbTime(e.CreatedAt)
	e.UpdatedAt = e.CreatedAt
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := keyExists(ctx, tx, e.KeyID); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO alert_endpoints (`+endpointColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		e.ID, e.URL, e.Format, e.KeyID, e.Secret, e.Enabled, e.CreatedAt.UnixMicro(), e.UpdatedAt.UnixMicro()); err != nil {
		if isUnique(err) {
			return keybrake.Errorf(keybrake.ECONFLICT, "Alert endpoint %s already exists.", e.ID)
		}
		return wrap(err, "create alert endpoint")
	}
	return wrap(tx.Commit(), "create alert endpoint")
}

// FindAlertEndpoints returns every endpoint, oldest first.
func (s *Store) FindAlertEndpoints(ctx context.Context) ([]*keybrake.AlertEndpoint, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+endpointColumns+` FROM alert_endpoints ORDER BY created_at, id`)
	if err != nil {
		return nil, wrap(err, "find alert endpoints")
	}
	defer rows.Close()
	var out []*keybrake.AlertEndpoint
	for rows.Next() {
		e, err := scanEndpoint(rows)
		if err != nil {
			return nil, wrap(err, "find alert endpoints")
		}
		out = append(out, e)
	}
	return out, wrap(rows.Err(), "find alert endpoints")
}

// FindAlertEndpointByID returns an endpoint. Returns ENOTFOUND.
func (s *Store) FindAlertEndpointByID(ctx context.Context, id string) (*keybrake.AlertEndpoint, error) {
	e, err := scanEndpoint(s.reader.QueryRowContext(ctx, `SELECT `+endpointColumns+` FROM alert_endpoints WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, keybrake.Errorf(keybrake.ENOTFOUND, "No such alert endpoint.")
	}
	return e, wrap(err, "find alert endpoint %s", id)
}

// UpdateAlertEndpoint applies upd. Returns ENOTFOUND.
func (s *Store) UpdateAlertEndpoint(ctx context.Context, id string, upd keybrake.AlertEndpointUpdate, now time.Time) (*keybrake.AlertEndpoint, error) {
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	e, err := scanEndpoint(tx.QueryRowContext(ctx, `SELECT `+endpointColumns+` FROM alert_endpoints WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, keybrake.Errorf(keybrake.ENOTFOUND, "No such alert endpoint.")
	} else if err != nil {
		return nil, wrap(err, "update alert endpoint %s", id)
	}
	applyEndpoint(e, upd)
	e.UpdatedAt = dbTime(now)
	if _, err := tx.ExecContext(ctx, `UPDATE alert_endpoints SET url = ?, format = ?, enabled = ?, updated_at = ? WHERE id = ?`,
		e.URL, e.Format, e.Enabled, e.UpdatedAt.UnixMicro(), id); err != nil {
		return nil, wrap(err, "update alert endpoint %s", id)
	}
	return e, wrap(tx.Commit(), "update alert endpoint %s", id)
}

func applyEndpoint(e *keybrake.AlertEndpoint, upd keybrake.AlertEndpointUpdate) {
	if upd.URL != nil {
		e.URL = *upd.URL
	}
	if upd.Format != nil {
		e.Format = *upd.Format
	}
	if upd.Enabled != nil {
		e.Enabled = *upd.Enabled
	}
}

// DeleteAlertEndpoint removes an endpoint and fails its pending deliveries.
// Returns ENOTFOUND.
func (s *Store) DeleteAlertEndpoint(ctx context.Context, id string, now time.Time) error {
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `DELETE FROM alert_endpoints WHERE id = ?`, id)
	if err != nil {
		return wrap(err, "delete alert endpoint %s", id)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return keybrake.Errorf(keybrake.ENOTFOUND, "No such alert endpoint.")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE alert_deliveries SET state = 'failed', last_error = 'endpoint deleted',
		lease_owner = '', lease_until = NULL, updated_at = ? WHERE endpoint_id = ? AND state = 'pending'`,
		dbTime(now).UnixMicro(), id); err != nil {
		return wrap(err, "delete alert endpoint %s", id)
	}
	return wrap(tx.Commit(), "delete alert endpoint %s", id)
}

// EnqueueAlert writes a and its deliveries unless its AlertKey exists.
func (s *Store) EnqueueAlert(ctx context.Context, a *keybrake.Alert) (bool, error) {
	if a.ID == "" {
		a.ID = newAlertID("alt_")
	}
	if a.AlertKey == "" || a.Kind == "" {
		return false, keybrake.Errorf(keybrake.EINVALID, "An alert needs a kind and an alert key.")
	}
	if a.CreatedAt.IsZero() {
		a.CreatedAt = s.now()
	}
	a.CreatedAt = dbTime(a.CreatedAt)
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `INSERT INTO alerts (id, alert_key, kind, key_id, window_name, bucket, percent, cap_micros,
		threshold_micros, spent_micros, reserved_micros, reservation_id, count, endpoint_id, detail, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (alert_key) DO NOTHING`,
		a.ID, a.AlertKey, a.Kind, a.KeyID, a.Window, a.Bucket, a.Percent, int64(a.Cap), int64(a.Threshold),
		int64(a.Spent), int64(a.Reserved), a.ReservationID, a.Count, a.EndpointID, a.Detail, a.CreatedAt.UnixMicro())
	if err != nil {
		return false, wrap(err, "enqueue alert %s", a.AlertKey)
	}
	n, _ := res.RowsAffected()
	return n == 1, wrap(tx.Commit(), "enqueue alert %s", a.AlertKey)
}

// scanAlertsSQL writes the alerts of the time-driven rules due at ?1 (unix
// µs): keys expiring within a rule's hours, reservations uncertain longer
// than a rule's minutes.
var scanAlertsSQL = []string{
	`INSERT INTO alerts (id, alert_key, kind, key_id, window_name, bucket, percent, cap_micros, threshold_micros,
		spent_micros, reserved_micros, reservation_id, count, endpoint_id, detail, created_at)
	SELECT 'alt_' || lower(hex(randomblob(12))), 'expiring:' || k.id || ':' || k.expires_at || ':' || r.hours,
		'expiring', k.id, '', '', 0, 0, 0, 0, 0, '', r.hours, '', k.label, ?1
	FROM keys k JOIN alert_rules r ON r.kind = 'expiring' AND r.enabled = 1 AND ` + strings.ReplaceAll(ownOrDefault, "%s", "k.id") + `
	WHERE k.expires_at IS NOT NULL AND k.revoked_at IS NULL AND k.expires_at > ?1 AND k.expires_at <= ?1 + r.hours * 3600000000
	ON CONFLICT (alert_key) DO NOTHING`,
	`INSERT INTO alerts (id, alert_key, kind, key_id, window_name, bucket, percent, cap_micros, threshold_micros,
		spent_micros, reserved_micros, reservation_id, count, endpoint_id, detail, created_at)
	SELECT 'alt_' || lower(hex(randomblob(12))), 'uncertain:' || v.id || ':' || r.minutes,
		'uncertain', v.key_id, '', '', 0, 0, 0, 0, v.micros, v.id, r.minutes, '', v.operation, ?1
	FROM reservations v JOIN alert_rules r ON r.kind = 'uncertain' AND r.enabled = 1 AND ` + strings.ReplaceAll(ownOrDefault, "%s", "v.key_id") + `
	WHERE v.state IN ('reserved', 'uncertain') AND v.state = 'uncertain' AND v.updated_at <= ?1 - r.minutes * 60000000
	ON CONFLICT (alert_key) DO NOTHING`,
}

// ScanAlerts writes the time-driven alerts due at now, each once.
func (s *Store) ScanAlerts(ctx context.Context, now time.Time) (int, error) {
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	total := 0
	for _, q := range scanAlertsSQL {
		res, err := tx.ExecContext(ctx, q, dbTime(now).UnixMicro())
		if err != nil {
			return 0, wrap(err, "scan alerts")
		}
		n, _ := res.RowsAffected()
		total += int(n)
	}
	return total, wrap(tx.Commit(), "scan alerts")
}

// ClaimAlerts returns up to limit unclaimed alerts, oldest first, and marks
// them claimed.
func (s *Store) ClaimAlerts(ctx context.Context, limit int) ([]*keybrake.Alert, error) {
	if limit <= 0 {
		limit = 100
	}
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT `+alertColumns+` FROM alerts a WHERE a.claimed = 0 ORDER BY a.created_at, a.id LIMIT ?`, limit)
	if err != nil {
		return nil, wrap(err, "claim alerts")
	}
	as, err := collectAlerts(rows)
	if err != nil {
		return nil, wrap(err, "claim alerts")
	}
	for _, a := range as {
		if _, err := tx.ExecContext(ctx, `UPDATE alerts SET claimed = 1 WHERE id = ?`, a.ID); err != nil {
			return nil, wrap(err, "claim alerts")
		}
	}
	return as, wrap(tx.Commit(), "claim alerts")
}

// FindAlerts returns alerts matching f, newest first.
func (s *Store) FindAlerts(ctx context.Context, f keybrake.AlertFilter) ([]*keybrake.Alert, error) {
	var (
		where []string
		args  []any
	)
	if f.KeyID != "" {
		where, args = append(where, "a.key_id = ?"), append(args, f.KeyID)
	}
	if f.Kind != "" {
		where, args = append(where, "a.kind = ?"), append(args, f.Kind)
	}
	q := `SELECT ` + alertColumns + ` FROM alerts a`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	rows, err := s.reader.QueryContext(ctx, q+` ORDER BY a.created_at DESC, a.id DESC LIMIT ?`, append(args, limitOr100(f.Limit))...)
	if err != nil {
		return nil, wrap(err, "find alerts")
	}
	as, err := collectAlerts(rows)
	return as, wrap(err, "find alerts")
}

func limitOr100(n int) int {
	if n <= 0 {
		return 100
	}
	return n
}

// LeaseAlertDeliveries leases due pending deliveries to owner.
func (s *Store) LeaseAlertDeliveries(ctx context.Context, owner string, now, until time.Time, limit int) ([]*keybrake.AlertDelivery, error) {
	if limit <= 0 {
		limit = 100
	}
	nowUS, untilUS := dbTime(now).UnixMicro(), dbTime(until).UnixMicro()
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT `+deliveryColumns+`, `+alertColumns+`,
		e.id, e.url, e.format, e.key_id, e.secret, e.enabled, e.created_at, e.updated_at
		FROM alert_deliveries d JOIN alerts a ON a.id = d.alert_id JOIN alert_endpoints e ON e.id = d.endpoint_id
		WHERE d.state = 'pending' AND d.next_attempt_at <= ? AND (d.lease_until IS NULL OR d.lease_until <= ?)
		ORDER BY d.next_attempt_at, d.seq LIMIT ?`, nowUS, nowUS, limit)
	if err != nil {
		return nil, wrap(err, "lease alert deliveries")
	}
	var ds []*keybrake.AlertDelivery
	for rows.Next() {
		d, err := scanDeliveryFull(rows)
		if err != nil {
			rows.Close()
			return nil, wrap(err, "lease alert deliveries")
		}
		ds = append(ds, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, wrap(err, "lease alert deliveries")
	}
	for _, d := range ds {
		d.LeaseOwner, d.LeaseUntil = owner, dbTime(until)
		if _, err := tx.ExecContext(ctx, `UPDATE alert_deliveries SET lease_owner = ?, lease_until = ? WHERE id = ?`, owner, untilUS, d.ID); err != nil {
			return nil, wrap(err, "lease alert delivery %s", d.ID)
		}
	}
	return ds, wrap(tx.Commit(), "lease alert deliveries")
}

// RecordAlertAttempt records an attempt and moves the delivery on.
func (s *Store) RecordAlertAttempt(ctx context.Context, args keybrake.AttemptArgs) (*keybrake.AlertDelivery, error) {
	if err := validAttempt(args); err != nil {
		return nil, err
	}
	at := dbTime(args.At)
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	d, err := scanDelivery(tx.QueryRowContext(ctx, `SELECT `+deliveryColumns+` FROM alert_deliveries d WHERE d.id = ?`, args.DeliveryID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, keybrake.Errorf(keybrake.ENOTFOUND, "No such alert delivery.")
	} else if err != nil {
		return nil, wrap(err, "record attempt of %s", args.DeliveryID)
	}
	if err := leaseHeld(d, args.Owner); err != nil {
		return nil, err
	}
	nextAttempt(d, args, at)
	if _, err := tx.ExecContext(ctx, `INSERT INTO alert_attempts (delivery_id, n, at, status, latency_us, error) VALUES (?, ?, ?, ?, ?, ?)`,
		d.ID, d.Attempts, at.UnixMicro(), args.Status, args.Latency.Microseconds(), args.Error); err != nil {
		return nil, wrap(err, "record attempt of %s", d.ID)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE alert_deliveries SET state = ?, attempts = ?, next_attempt_at = ?, first_attempt_at = ?,
		last_status = ?, last_error = ?, lease_owner = '', lease_until = NULL, updated_at = ? WHERE id = ?`,
		d.State, d.Attempts, d.NextAttemptAt.UnixMicro(), d.FirstAttemptAt.UnixMicro(), d.LastStatus, d.LastError, at.UnixMicro(), d.ID); err != nil {
		return nil, wrap(err, "record attempt of %s", d.ID)
	}
	return d, wrap(tx.Commit(), "record attempt of %s", d.ID)
}

// validAttempt checks the target state.
func validAttempt(args keybrake.AttemptArgs) error {
	switch args.State {
	case keybrake.DeliveryDelivered, keybrake.DeliveryFailed, keybrake.DeliveryPending:
		return nil
	}
	return keybrake.ErrorParam("state", "Cannot move a delivery to %q.", args.State)
}

// leaseHeld returns ECONFLICT unless d is pending and leased to owner.
func leaseHeld(d *keybrake.AlertDelivery, owner string) error {
	if d.State != keybrake.DeliveryPending {
		return keybrake.Errorf(keybrake.ECONFLICT, "Delivery %s is already %s.", d.ID, d.State)
	}
	if d.LeaseOwner != owner || owner == "" {
		return keybrake.Errorf(keybrake.ECONFLICT, "Delivery %s is not leased to %s.", d.ID, owner)
	}
	return nil
}

// nextAttempt applies an attempt at `at` to d.
func nextAttempt(d *keybrake.AlertDelivery, args keybrake.AttemptArgs, at time.Time) {
	d.Attempts++
	if d.FirstAttemptAt == nil {
		d.FirstAttemptAt = &at
	}
	d.State, d.LastStatus, d.LastError = args.State, args.Status, args.Error
	d.LeaseOwner, d.LeaseUntil, d.UpdatedAt = "", time.Time{}, at
	if args.State == keybrake.DeliveryPending {
		d.NextAttemptAt = dbTime(args.NextAt)
	}
}

// FindAlertDeliveries returns deliveries matching f, newest first.
func (s *Store) FindAlertDeliveries(ctx context.Context, f keybrake.DeliveryFilter) ([]*keybrake.AlertDelivery, error) {
	var (
		where []string
		args  []any
	)
	for _, c := range []struct{ col, v string }{{"d.id", f.ID}, {"d.alert_id", f.AlertID}, {"d.endpoint_id", f.EndpointID}, {"a.key_id", f.KeyID}, {"d.state", f.State}} {
		if c.v != "" {
			where, args = append(where, c.col+" = ?"), append(args, c.v)
		}
	}
	q := `SELECT ` + deliveryColumns + `, ` + alertColumns + ` FROM alert_deliveries d JOIN alerts a ON a.id = d.alert_id`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	rows, err := s.reader.QueryContext(ctx, q+` ORDER BY d.seq DESC LIMIT ?`, append(args, limitOr100(f.Limit))...)
	if err != nil {
		return nil, wrap(err, "find alert deliveries")
	}
	defer rows.Close()
	var ds []*keybrake.AlertDelivery
	for rows.Next() {
		var (
			x deliveryRow
			a alertRow
		)
		if err := rows.Scan(append(x.dest(), a.dest()...)...); err != nil {
			return nil, wrap(err, "find alert deliveries")
		}
		d := x.finish()
		d.Alert = a.finish()
		ds = append(ds, d)
	}
	return ds, wrap(rows.Err(), "find alert deliveries")
}

// FindAlertAttempts returns a delivery's attempts, first first.
func (s *Store) FindAlertAttempts(ctx context.Context, deliveryID string) ([]*keybrake.AlertAttempt, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT delivery_id, n, at, status, latency_us, error FROM alert_attempts
		WHERE delivery_id = ? ORDER BY n`, deliveryID)
	if err != nil {
		return nil, wrap(err, "find alert attempts")
	}
	defer rows.Close()
	var out []*keybrake.AlertAttempt
	for rows.Next() {
		var (
			a      keybrake.AlertAttempt
			at, us int64
		)
		if err := rows.Scan(&a.DeliveryID, &a.N, &at, &a.Status, &us, &a.Error); err != nil {
			return nil, wrap(err, "find alert attempts")
		}
		a.At, a.Latency, a.LatencyMS = fromMicros(at), time.Duration(us)*time.Microsecond, us/1000
		out = append(out, &a)
	}
	return out, wrap(rows.Err(), "find alert attempts")
}

// The scan helpers. Scanning goes through dest slices so a joined row reads
// several objects in one Scan; finish* converts what Scan cannot.

func scanRule(row scanner) (*keybrake.AlertRule, error) {
	var (
		r                keybrake.AlertRule
		created, updated int64
	)
	if err := row.Scan(&r.ID, &r.KeyID, &r.Kind, &r.Window, &r.Percent, &r.Hours, &r.Count, &r.Seconds, &r.Minutes,
		&r.Enabled, &created, &updated); err != nil {
		return nil, err
	}
	r.CreatedAt, r.UpdatedAt = fromMicros(created), fromMicros(updated)
	return &r, nil
}

func ruleArgs(r *keybrake.AlertRule) []any {
	return []any{r.ID, r.KeyID, r.Kind, r.Window, r.Percent, r.Hours, r.Count, r.Seconds, r.Minutes, r.Enabled,
		r.CreatedAt.UnixMicro(), r.UpdatedAt.UnixMicro()}
}

// endpointRow holds what an endpoint scan reads before conversion.
type endpointRow struct {
	e                keybrake.AlertEndpoint
	created, updated int64
}

func (x *endpointRow) dest() []any {
	e := &x.e
	return []any{&e.ID, &e.URL, &e.Format, &e.KeyID, &e.Secret, &e.Enabled, &x.created, &x.updated}
}

func (x *endpointRow) finish() *keybrake.AlertEndpoint {
	x.e.CreatedAt, x.e.UpdatedAt = fromMicros(x.created), fromMicros(x.updated)
	return &x.e
}

func scanEndpoint(row scanner) (*keybrake.AlertEndpoint, error) {
	var x endpointRow
	if err := row.Scan(x.dest()...); err != nil {
		return nil, err
	}
	return x.finish(), nil
}

// alertRow holds what an alert scan reads before conversion.
type alertRow struct {
	a                                    keybrake.Alert
	capM, threshold, spent, reserved, at int64
}

func (x *alertRow) dest() []any {
	a := &x.a
	return []any{&a.ID, &a.AlertKey, &a.Kind, &a.KeyID, &a.Window, &a.Bucket, &a.Percent, &x.capM, &x.threshold,
		&x.spent, &x.reserved, &a.ReservationID, &a.Count, &a.EndpointID, &a.Detail, &x.at, &a.ApprovalID,
		&a.Finding, &a.UpstreamObject, &a.ObjectID, &a.Amount, &a.Currency, &a.ReservedAmount, &a.ReservedCurrency}
}

func (x *alertRow) finish() *keybrake.Alert {
	a := &x.a
	a.Cap, a.Threshold, a.Spent, a.Reserved = keybrake.Micros(x.capM), keybrake.Micros(x.threshold), keybrake.Micros(x.spent), keybrake.Micros(x.reserved)
	a.CreatedAt = fromMicros(x.at)
	return a
}

func collectAlerts(rows *sql.Rows) ([]*keybrake.Alert, error) {
	defer rows.Close()
	var out []*keybrake.Alert
	for rows.Next() {
		var x alertRow
		if err := rows.Scan(x.dest()...); err != nil {
			return nil, err
		}
		out = append(out, x.finish())
	}
	return out, rows.Err()
}

// deliveryRow holds what a delivery scan reads before conversion.
type deliveryRow struct {
	d                      keybrake.AlertDelivery
	next, created, updated int64
	first, leaseUntil      sql.NullInt64
}

func (x *deliveryRow) dest() []any {
	d := &x.d
	return []any{&d.ID, &d.AlertID, &d.EndpointID, &d.State, &d.Attempts, &x.next, &x.first,
		&d.LastStatus, &d.LastError, &d.LeaseOwner, &x.leaseUntil, &x.created, &x.updated}
}

func (x *deliveryRow) finish() *keybrake.AlertDelivery {
	d := &x.d
	d.NextAttemptAt, d.CreatedAt, d.UpdatedAt = fromMicros(x.next), fromMicros(x.created), fromMicros(x.updated)
	d.FirstAttemptAt = timePtr(x.first)
	if x.leaseUntil.Valid {
		d.LeaseUntil = fromMicros(x.leaseUntil.Int64)
	}
	return d
}

func scanDelivery(row scanner) (*keybrake.AlertDelivery, error) {
	var x deliveryRow
	if err := row.Scan(x.dest()...); err != nil {
		return nil, err
	}
	return x.finish(), nil
}

// scanDeliveryFull reads a delivery joined with its alert and endpoint.
func scanDeliveryFull(row scanner) (*keybrake.AlertDelivery, error) {
	var (
		x deliveryRow
		a alertRow
		e endpointRow
	)
	dest := append(append(x.dest(), a.dest()...), e.dest()...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	d := x.finish()
	d.Alert, d.Endpoint = a.finish(), e.finish()
	return d, nil
}

// newAlertID returns prefix and 24 random hex digits.
func newAlertID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
