package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
)

// The alert tables' columns, in the order the scan helpers read them.
const (
	ruleColumns     = `id, key_id, kind, window_name, percent, hours, count, seconds, minutes, enabled, created_at, updated_at`
	endpointColumns = `e.id, e.url, e.format, e.key_id, e.secret, e.enabled, e.created_at, e.updated_at`
	alertColumns    = `a.id, a.alert_key, a.kind, a.key_id, a.window_name, a.bucket, a.percent, a.cap_micros, a.threshold_micros,
		a.spent_micros, a.reserved_micros, a.reservation_id, a.count, a.endpoint_id, a.detail, a.created_at, a.approval_id,
		a.finding, a.upstream_object, a.object_id, a.amount, a.currency, a.reserved_amount, a.reserved_currency`
	deliveryColumns = `d.id, d.alert_id, d.endpoint_id, d.state, d.attempts, d.next_attempt_at, d.first_attempt_at,
		d.last_status, d.last_error, d.lease_owner, d.lease_until, d.created_at, d.updated_at`
)

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
		r.CreatedAt = s.Now()
	}
	r.CreatedAt = ts(r.CreatedAt)
	r.UpdatedAt = r.CreatedAt
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if err := keyExists(ctx, tx, r.KeyID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO alert_rules (`+ruleColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
			r.ID, r.KeyID, r.Kind, r.Window, r.Percent, r.Hours, r.Count, r.Seconds, r.Minutes, r.Enabled, r.CreatedAt, r.UpdatedAt)
		return err
	})
	return s.wrap("create alert rule", err)
}

// keyExists returns ENOTFOUND unless id is "" or names a key.
func keyExists(ctx context.Context, tx pgx.Tx, id string) error {
	if id == "" {
		return nil
	}
	var one int
	if err := tx.QueryRow(ctx, `SELECT 1 FROM keys WHERE id = $1`, id).Scan(&one); errors.Is(err, pgx.ErrNoRows) {
		return keybrake.Errorf(keybrake.ENOTFOUND, "No such key.")
	} else if err != nil {
		return err
	}
	return nil
}

// FindAlertRules returns the rules of keyID, or every rule with all set,
// defaults first, by kind and creation.
func (s *Store) FindAlertRules(ctx context.Context, keyID string, all bool) ([]*keybrake.AlertRule, error) {
	var out []*keybrake.AlertRule
	err := s.query(ctx, func(rows pgx.Rows) error {
		for rows.Next() {
			r, err := scanRule(rows)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	}, `SELECT `+ruleColumns+` FROM alert_rules WHERE $2 OR key_id = $1 ORDER BY key_id, kind, created_at, id`, keyID, all)
	return out, s.wrap("find alert rules", err)
}

// UpdateAlertRule applies upd. Returns ENOTFOUND, or EINVALID if the result
// is not a valid rule.
func (s *Store) UpdateAlertRule(ctx context.Context, id string, upd keybrake.AlertRuleUpdate, now time.Time) (*keybrake.AlertRule, error) {
	var r *keybrake.AlertRule
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		r, err = scanRule(tx.QueryRow(ctx, `SELECT `+ruleColumns+` FROM alert_rules WHERE id = $1 FOR UPDATE`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return keybrake.Errorf(keybrake.ENOTFOUND, "No such alert rule.")
		} else if err != nil {
			return err
		}
		r.Apply(upd)
		if err := r.Validate(); err != nil {
			return err
		}
		r.UpdatedAt = ts(now)
		_, err = tx.Exec(ctx, `UPDATE alert_rules SET window_name = $2, percent = $3, hours = $4, count = $5, seconds = $6,
			minutes = $7, enabled = $8, updated_at = $9 WHERE id = $1`,
			id, r.Window, r.Percent, r.Hours, r.Count, r.Seconds, r.Minutes, r.Enabled, r.UpdatedAt)
		return err
	})
	if err != nil {
		return nil, s.wrap("update alert rule "+id, err)
	}
	return r, nil
}

// DeleteAlertRule removes a rule. Returns ENOTFOUND.
func (s *Store) DeleteAlertRule(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM alert_rules WHERE id = $1`, id)
	if err != nil {
		return s.wrap("delete alert rule "+id, err)
	}
	if tag.RowsAffected() == 0 {
		return keybrake.Errorf(keybrake.ENOTFOUND, "No such alert rule.")
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
		e.CreatedAt = s.Now()
	}
	e.CreatedAt = ts(e.CreatedAt)
	e.UpdatedAt = e.CreatedAt
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if err := keyExists(ctx, tx, e.KeyID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO alert_endpoints (id, url, format, key_id, secret, enabled, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, e.ID, e.URL, e.Format, e.KeyID, e.Secret, e.Enabled, e.CreatedAt, e.UpdatedAt)
		return err
	})
	return s.wrap("create alert endpoint", err)
}

// FindAlertEndpoints returns every endpoint, oldest first.
func (s *Store) FindAlertEndpoints(ctx context.Context) ([]*keybrake.AlertEndpoint, error) {
	var out []*keybrake.AlertEndpoint
	err := s.query(ctx, func(rows pgx.Rows) error {
		for rows.Next() {
			e, err := scanEndpoint(rows)
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		return rows.Err()
	}, `SELECT `+endpointColumns+` FROM alert_endpoints e ORDER BY e.created_at, e.id`)
	return out, s.wrap("find alert endpoints", err)
}

// FindAlertEndpointByID returns an endpoint. Returns ENOTFOUND.
func (s *Store) FindAlertEndpointByID(ctx context.Context, id string) (*keybrake.AlertEndpoint, error) {
	e, err := scanEndpoint(s.queryRow(ctx, `SELECT `+endpointColumns+` FROM alert_endpoints e WHERE e.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, keybrake.Errorf(keybrake.ENOTFOUND, "No such alert endpoint.")
	} else if err != nil {
		return nil, s.wrap("find alert endpoint "+id, err)
	}
	return e, nil
}

// UpdateAlertEndpoint applies upd. Returns ENOTFOUND.
func (s *Store) UpdateAlertEndpoint(ctx context.Context, id string, upd keybrake.AlertEndpointUpdate, now time.Time) (*keybrake.AlertEndpoint, error) {
	var e *keybrake.AlertEndpoint
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		e, err = scanEndpoint(tx.QueryRow(ctx, `SELECT `+endpointColumns+` FROM alert_endpoints e WHERE e.id = $1 FOR UPDATE`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return keybrake.Errorf(keybrake.ENOTFOUND, "No such alert endpoint.")
		} else if err != nil {
			return err
		}
		if upd.URL != nil {
			e.URL = *upd.URL
		}
		if upd.Format != nil {
			e.Format = *upd.Format
		}
		if upd.Enabled != nil {
			e.Enabled = *upd.Enabled
		}
		e.UpdatedAt = ts(now)
		_, err = tx.Exec(ctx, `UPDATE alert_endpoints SET url = $2, format = $3, enabled = $4, updated_at = $5 WHERE id = $1`,
			id, e.URL, e.Format, e.Enabled, e.UpdatedAt)
		return err
	})
	if err != nil {
		return nil, s.wrap("update alert endpoint "+id, err)
	}
	return e, nil
}

// DeleteAlertEndpoint removes an endpoint and fails its pending deliveries.
// Returns ENOTFOUND.
func (s *Store) DeleteAlertEndpoint(ctx context.Context, id string, now time.Time) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM alert_endpoints WHERE id = $1`, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return keybrake.Errorf(keybrake.ENOTFOUND, "No such alert endpoint.")
		}
		_, err = tx.Exec(ctx, `UPDATE alert_deliveries SET state = 'failed', last_error = 'endpoint deleted',
			lease_owner = '', lease_until = NULL, updated_at = $2 WHERE endpoint_id = $1 AND state = 'pending'`, id, ts(now))
		return err
	})
	return s.wrap("delete alert endpoint "+id, err)
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
		a.CreatedAt = s.Now()
	}
	a.CreatedAt = ts(a.CreatedAt)
	tag, err := s.pool.Exec(ctx, `INSERT INTO alerts (id, alert_key, kind, key_id, window_name, bucket, percent, cap_micros,
		threshold_micros, spent_micros, reserved_micros, reservation_id, count, endpoint_id, detail, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) ON CONFLICT (alert_key) DO NOTHING`,
		a.ID, a.AlertKey, a.Kind, a.KeyID, a.Window, a.Bucket, a.Percent, int64(a.Cap), int64(a.Threshold),
		int64(a.Spent), int64(a.Reserved), a.ReservationID, a.Count, a.EndpointID, a.Detail, a.CreatedAt)
	if err != nil {
		return false, s.wrap("enqueue alert "+a.AlertKey, err)
	}
	return tag.RowsAffected() == 1, nil
}

// scanAlertsSQL writes the alerts of the time-driven rules due at $1: keys
// expiring within a rule's hours, reservations uncertain longer than a
// rule's minutes.
const scanAlertsSQL = `WITH expiring AS (
	INSERT INTO alerts (id, alert_key, kind, key_id, window_name, bucket, percent, cap_micros, threshold_micros,
		spent_micros, reserved_micros, reservation_id, count, endpoint_id, detail, created_at)
	SELECT keybrake_alert_id('alt_'), 'expiring:' || k.id || ':' || (extract(epoch FROM k.expires_at) * 1000000)::bigint || ':' || r.hours,
		'expiring', k.id, '', '', 0, 0, 0, 0, 0, '', r.hours, '', k.label, $1
	FROM keys k JOIN alert_rules r ON r.kind = 'expiring' AND r.enabled AND r.key_id = keybrake_rule_owner('expiring', k.id)
	WHERE k.expires_at IS NOT NULL AND k.revoked_at IS NULL AND k.expires_at > $1 AND k.expires_at <= $1 + make_interval(hours => r.hours)
	ON CONFLICT (alert_key) DO NOTHING RETURNING 1
), uncertain AS (
	INSERT INTO alerts (id, alert_key, kind, key_id, window_name, bucket, percent, cap_micros, threshold_micros,
		spent_micros, reserved_micros, reservation_id, count, endpoint_id, detail, created_at)
	SELECT keybrake_alert_id('alt_'), 'uncertain:' || v.id || ':' || r.minutes,
		'uncertain', v.key_id, '', '', 0, 0, 0, 0, v.micros, v.id, r.minutes, '', v.operation, $1
	FROM reservations v JOIN alert_rules r ON r.kind = 'uncertain' AND r.enabled AND r.key_id = keybrake_rule_owner('uncertain', v.key_id)
	WHERE v.state IN ('reserved', 'uncertain') AND v.state = 'uncertain' AND v.updated_at <= $1 - make_interval(mins => r.minutes)
	ON CONFLICT (alert_key) DO NOTHING RETURNING 1
)
SELECT (SELECT count(*) FROM expiring) + (SELECT count(*) FROM uncertain)`

// ScanAlerts writes the time-driven alerts due at now, each once.
func (s *Store) ScanAlerts(ctx context.Context, now time.Time) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, scanAlertsSQL, ts(now)).Scan(&n); err != nil {
		return 0, s.wrap("scan alerts", err)
	}
	return n, nil
}

// ClaimAlerts returns up to limit unclaimed alerts, oldest first, and marks
// them claimed; concurrent callers skip each other's rows.
func (s *Store) ClaimAlerts(ctx context.Context, limit int) ([]*keybrake.Alert, error) {
	if limit <= 0 {
		limit = 100
	}
	var out []*keybrake.Alert
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `UPDATE alerts a SET claimed = true WHERE a.id IN (
			SELECT id FROM alerts WHERE NOT claimed ORDER BY created_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)
			RETURNING `+alertColumns, limit)
		if err != nil {
			return err
		}
		out, err = collectAlerts(rows)
		return err
	})
	if err != nil {
		return nil, s.wrap("claim alerts", err)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// FindAlerts returns alerts matching f, newest first.
func (s *Store) FindAlerts(ctx context.Context, f keybrake.AlertFilter) ([]*keybrake.Alert, error) {
	var out []*keybrake.Alert
	err := s.query(ctx, func(rows pgx.Rows) error {
		var err error
		out, err = collectAlerts(rows)
		return err
	}, `SELECT `+alertColumns+` FROM alerts a WHERE ($1 = '' OR a.key_id = $1) AND ($2 = '' OR a.kind = $2)
		ORDER BY a.created_at DESC, a.id DESC LIMIT $3`, f.KeyID, f.Kind, limitOr100(f.Limit))
	return out, s.wrap("find alerts", err)
}

func limitOr100(n int) int {
	if n <= 0 {
		return 100
	}
	return n
}

// LeaseAlertDeliveries leases due pending deliveries to owner; concurrent
// senders skip each other's rows.
func (s *Store) LeaseAlertDeliveries(ctx context.Context, owner string, now, until time.Time, limit int) ([]*keybrake.AlertDelivery, error) {
	if limit <= 0 {
		limit = 100
	}
	var out []*keybrake.AlertDelivery
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `WITH picked AS (
				SELECT id FROM alert_deliveries
				WHERE state = 'pending' AND next_attempt_at <= $1 AND (lease_until IS NULL OR lease_until <= $1)
				ORDER BY next_attempt_at, seq LIMIT $3 FOR UPDATE SKIP LOCKED
			), leased AS (
				UPDATE alert_deliveries d SET lease_owner = $2, lease_until = $4 FROM picked WHERE d.id = picked.id
				RETURNING d.*
			)
			SELECT `+deliveryColumns+`, `+alertColumns+`, `+endpointColumns+`
			FROM leased d JOIN alerts a ON a.id = d.alert_id JOIN alert_endpoints e ON e.id = d.endpoint_id
			ORDER BY d.next_attempt_at, d.seq`, ts(now), owner, limit, ts(until))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				x deliveryRow
				a alertRow
				e endpointRow
			)
			if err := rows.Scan(append(append(x.dest(), a.dest()...), e.dest()...)...); err != nil {
				return err
			}
			d := x.finish()
			d.Alert, d.Endpoint = a.finish(), e.finish()
			out = append(out, d)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, s.wrap("lease alert deliveries", err)
	}
	return out, nil
}

// RecordAlertAttempt records an attempt and moves the delivery on.
func (s *Store) RecordAlertAttempt(ctx context.Context, args keybrake.AttemptArgs) (*keybrake.AlertDelivery, error) {
	switch args.State {
	case keybrake.DeliveryDelivered, keybrake.DeliveryFailed, keybrake.DeliveryPending:
	default:
		return nil, keybrake.ErrorParam("state", "Cannot move a delivery to %q.", args.State)
	}
	at := ts(args.At)
	var d *keybrake.AlertDelivery
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var x deliveryRow
		err := tx.QueryRow(ctx, `SELECT `+deliveryColumns+` FROM alert_deliveries d WHERE d.id = $1 FOR UPDATE`, args.DeliveryID).Scan(x.dest()...)
		if errors.Is(err, pgx.ErrNoRows) {
			return keybrake.Errorf(keybrake.ENOTFOUND, "No such alert delivery.")
		} else if err != nil {
			return err
		}
		d = x.finish()
		if d.State != keybrake.DeliveryPending {
			return keybrake.Errorf(keybrake.ECONFLICT, "Delivery %s is already %s.", d.ID, d.State)
		}
		if d.LeaseOwner != args.Owner || args.Owner == "" {
			return keybrake.Errorf(keybrake.ECONFLICT, "Delivery %s is not leased to %s.", d.ID, args.Owner)
		}
		d.Attempts++
		if d.FirstAttemptAt == nil {
			d.FirstAttemptAt = &at
		}
		d.State, d.LastStatus, d.LastError = args.State, args.Status, args.Error
		d.LeaseOwner, d.LeaseUntil, d.UpdatedAt = "", time.Time{}, at
		if args.State == keybrake.DeliveryPending {
			d.NextAttemptAt = ts(args.NextAt)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO alert_attempts (delivery_id, n, at, status, latency_us, error) VALUES ($1, $2, $3, $4, $5, $6)`,
			d.ID, d.Attempts, at, args.Status, args.Latency.Microseconds(), args.Error); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE alert_deliveries SET state = $2, attempts = $3, next_attempt_at = $4, first_attempt_at = $5,
			last_status = $6, last_error = $7, lease_owner = '', lease_until = NULL, updated_at = $8 WHERE id = $1`,
			d.ID, d.State, d.Attempts, d.NextAttemptAt, *d.FirstAttemptAt, d.LastStatus, d.LastError, at)
		return err
	})
	if err != nil {
		return nil, s.wrap("record attempt of "+args.DeliveryID, err)
	}
	return d, nil
}

// FindAlertDeliveries returns deliveries matching f, newest first.
func (s *Store) FindAlertDeliveries(ctx context.Context, f keybrake.DeliveryFilter) ([]*keybrake.AlertDelivery, error) {
	var out []*keybrake.AlertDelivery
	err := s.query(ctx, func(rows pgx.Rows) error {
		for rows.Next() {
			var (
				x deliveryRow
				a alertRow
			)
			if err := rows.Scan(append(x.dest(), a.dest()...)...); err != nil {
				return err
			}
			d := x.finish()
			d.Alert = a.finish()
			out = append(out, d)
		}
		return rows.Err()
	}, `SELECT `+deliveryColumns+`, `+alertColumns+` FROM alert_deliveries d JOIN alerts a ON a.id = d.alert_id
		WHERE ($1 = '' OR d.alert_id = $1) AND ($2 = '' OR d.endpoint_id = $2) AND ($3 = '' OR a.key_id = $3) AND ($4 = '' OR d.state = $4)
		AND ($6 = '' OR d.id = $6)
		ORDER BY d.seq DESC LIMIT $5`, f.AlertID, f.EndpointID, f.KeyID, f.State, limitOr100(f.Limit), f.ID)
	return out, s.wrap("find alert deliveries", err)
}

// FindAlertAttempts returns a delivery's attempts, first first.
func (s *Store) FindAlertAttempts(ctx context.Context, deliveryID string) ([]*keybrake.AlertAttempt, error) {
	var out []*keybrake.AlertAttempt
	err := s.query(ctx, func(rows pgx.Rows) error {
		for rows.Next() {
			var (
				a  keybrake.AlertAttempt
				us int64
			)
			if err := rows.Scan(&a.DeliveryID, &a.N, &a.At, &a.Status, &us, &a.Error); err != nil {
				return err
			}
			a.At, a.Latency, a.LatencyMS = ts(a.At), time.Duration(us)*time.Microsecond, us/1000
			out = append(out, &a)
		}
		return rows.Err()
	}, `SELECT delivery_id, n, at, status, latency_us, error FROM alert_attempts WHERE delivery_id = $1 ORDER BY n`, deliveryID)
	return out, s.wrap("find alert attempts", err)
}

func scanRule(row pgx.Row) (*keybrake.AlertRule, error) {
	var r keybrake.AlertRule
	if err := row.Scan(&r.ID, &r.KeyID, &r.Kind, &r.Window, &r.Percent, &r.Hours, &r.Count, &r.Seconds, &r.Minutes,
		&r.Enabled, &r.CreatedAt, &r.UpdatedAt); err != nil {
		return nil, err
	}
	r.CreatedAt, r.UpdatedAt = ts(r.CreatedAt), ts(r.UpdatedAt)
	return &r, nil
}

type endpointRow struct{ e keybrake.AlertEndpoint }

func (x *endpointRow) dest() []any {
	e := &x.e
	return []any{&e.ID, &e.URL, &e.Format, &e.KeyID, &e.Secret, &e.Enabled, &e.CreatedAt, &e.UpdatedAt}
}

func (x *endpointRow) finish() *keybrake.AlertEndpoint {
	x.e.CreatedAt, x.e.UpdatedAt = ts(x.e.CreatedAt), ts(x.e.UpdatedAt)
	return &x.e
}

func scanEndpoint(row pgx.Row) (*keybrake.AlertEndpoint, error) {
	var x endpointRow
	if err := row.Scan(x.dest()...); err != nil {
		return nil, err
	}
	return x.finish(), nil
}

type alertRow struct {
	a                                keybrake.Alert
	capM, threshold, spent, reserved int64
}

func (x *alertRow) dest() []any {
	a := &x.a
	return []any{&a.ID, &a.AlertKey, &a.Kind, &a.KeyID, &a.Window, &a.Bucket, &a.Percent, &x.capM, &x.threshold,
		&x.spent, &x.reserved, &a.ReservationID, &a.Count, &a.EndpointID, &a.Detail, &a.CreatedAt, &a.ApprovalID,
		&a.Finding, &a.UpstreamObject, &a.ObjectID, &a.Amount, &a.Currency, &a.ReservedAmount, &a.ReservedCurrency}
}

func (x *alertRow) finish() *keybrake.Alert {
	a := &x.a
	a.Cap, a.Threshold, a.Spent, a.Reserved = keybrake.Micros(x.capM), keybrake.Micros(x.threshold), keybrake.Micros(x.spent), keybrake.Micros(x.reserved)
	a.CreatedAt = ts(a.CreatedAt)
	return a
}

func collectAlerts(rows pgx.Rows) ([]*keybrake.Alert, error) {
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

type deliveryRow struct {
	d                 keybrake.AlertDelivery
	first, leaseUntil *time.Time
}

func (x *deliveryRow) dest() []any {
	d := &x.d
	return []any{&d.ID, &d.AlertID, &d.EndpointID, &d.State, &d.Attempts, &d.NextAttemptAt, &x.first,
		&d.LastStatus, &d.LastError, &d.LeaseOwner, &x.leaseUntil, &d.CreatedAt, &d.UpdatedAt}
}

func (x *deliveryRow) finish() *keybrake.AlertDelivery {
	d := &x.d
	d.NextAttemptAt, d.CreatedAt, d.UpdatedAt = ts(d.NextAttemptAt), ts(d.CreatedAt), ts(d.UpdatedAt)
	d.FirstAttemptAt = tsPtr(x.first)
	if x.leaseUntil != nil {
		d.LeaseUntil = ts(*x.leaseUntil)
	}
	return d
}

// newAlertID returns prefix and 24 random hex digits.
func newAlertID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
