package keybrake

import (
	"context"
	"time"
)

// Alert kinds: what an AlertRule watches and what an Alert reports.
const (
	AlertThreshold      = "threshold"         // a window's spend reached a percentage of its cap
	AlertExpiring       = "expiring"          // the key expires within some hours
	AlertRefusalBurst   = "refusal_burst"     // many refusals on the key in a short time
	AlertUncertain      = "uncertain"         // a reservation stayed uncertain too long
	AlertAmountMismatch = "amount_mismatch"   // upstream moved more than keybrake reserved
	AlertApproval       = "approval_required" // a request waits for a person's approval
	AlertDrift          = "drift"             // the drift watch found money moved differently upstream (drift/)
	AlertTest           = "test"              // sent on request, to try an endpoint
)

// AlertKinds lists the kinds a rule may have, in the order the docs give them.
func AlertKinds() []string {
	return []string{AlertThreshold, AlertExpiring, AlertRefusalBurst, AlertUncertain, AlertAmountMismatch, AlertApproval, AlertDrift}
}

// AlertRule says when an alert fires. A rule with an empty KeyID is a
// default: it applies to every key that has no rule of its own of the same
// kind. A key's own rules of a kind replace the defaults of that kind, so a
// key opts out of a kind with one disabled rule of it.
//
// The parameters used depend on Kind:
//
//	threshold:       Percent (1–100) of the cap of Window ("" for daily, monthly and total)
//	expiring:        Hours before ExpiresAt
//	refusal_burst:   Count refusals within Seconds
//	uncertain:       Minutes a reservation stays uncertain
//	amount_mismatch: none (an upstream amount above the reservation)
//	approval_required: none (a request of the key waits for a person)
//	drift:           none (the drift watch audited a finding of the key; the
//	                 default rule also covers findings that name no key)
type AlertRule struct {
	ID        string    `json:"id"`
	KeyID     string    `json:"key_id"`
	Kind      string    `json:"kind"`
	Window    string    `json:"window"`
	Percent   int       `json:"percent"`
	Hours     int       `json:"hours"`
	Count     int       `json:"count"`
	Seconds   int       `json:"seconds"`
	Minutes   int       `json:"minutes"`
	Enabled   bool      `json:"enabled"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Validate returns EINVALID, naming the field, when r's kind or parameters
// are out of range.
func (r *AlertRule) Validate() error {
	switch r.Kind {
	case AlertThreshold:
		switch r.Window {
		case "", WindowDaily, WindowMonthly, WindowTotal:
		default:
			return ErrorParam("window", "window must be daily, monthly, total or empty (every window), not %q.", r.Window)
		}
		if r.Percent < 1 || r.Percent > 100 {
			return ErrorParam("percent", "percent must be from 1 to 100.")
		}
	case AlertExpiring:
		if r.Hours < 1 || r.Hours > 24*366 {
			return ErrorParam("hours", "hours must be from 1 to 8784.")
		}
	case AlertRefusalBurst:
		if r.Count < 1 || r.Count > 100000 {
			return ErrorParam("count", "count must be from 1 to 100000.")
		}
		if r.Seconds < 1 || r.Seconds > 86400 {
			return ErrorParam("seconds", "seconds must be from 1 to 86400.")
		}
	case AlertUncertain:
		if r.Minutes < 1 || r.Minutes > 7*24*60 {
			return ErrorParam("minutes", "minutes must be from 1 to 10080.")
		}
	case AlertAmountMismatch, AlertApproval, AlertDrift:
	default:
		return ErrorParam("kind", "kind must be one of threshold, expiring, refusal_burst, uncertain, amount_mismatch, approval_required, drift, not %q.", r.Kind)
	}
	return nil
}

// Alert is one alert in the outbox: written in the same transaction as the
// change that caused it, at most once per AlertKey, and delivered to every
// matching endpoint by the sender. ID is the event id receivers deduplicate
// on.
//
// AlertKey says what the alert is about, so it fires once:
//
//	threshold:vk_1:daily:2026-11-30:80      key, window, bucket ("" for total), percent
//	expiring:vk_1:1796000000000000:24       key, expiry (unix µs), hours
//	refusal_burst:vk_1:60:29943000          key, seconds, burst period number
//	uncertain:res_…:15                      reservation, minutes
//	amount_mismatch:res_…                   reservation
//	approval_required:apr_…                 approval
//	drift:amount:ch_…                       finding, upstream object (or reservation for missing)
//	test:alt_…                              the alert itself
type Alert struct {
	ID            string `json:"id"`
	AlertKey      string `json:"alert_key"`
	Kind          string `json:"kind"`
	KeyID         string `json:"key_id"`
	Window        string `json:"window,omitempty"`
	Bucket        string `json:"bucket,omitempty"`
	Percent       int    `json:"percent,omitempty"`
	Cap           Micros `json:"cap_usd"`
	Threshold     Micros `json:"threshold_usd"`
	Spent         Micros `json:"spent_usd"` // the window's spend, or for amount_mismatch the upstream amount
	ReservationID string `json:"reservation_id,omitempty"`
	Reserved      Micros `json:"reserved_usd"` // amount_mismatch: what keybrake had reserved
	Count         int    `json:"count,omitempty"`
	// ApprovalID is the approval an approval_required alert is about; its
	// Spent is the request's amount in USD and Detail its operation.
	ApprovalID string `json:"approval_id,omitempty"`
	// Finding, UpstreamObject, ObjectID, Amount, Currency, ReservedAmount
	// and ReservedCurrency describe a drift alert's finding (unseen,
	// amount, missing): the upstream object (charges, refunds, payouts,
	// transfers) and its id, its amount upstream and what keybrake
	// reserved, in the currency's minor units. Detail says it in a sentence.
	Finding          string `json:"finding,omitempty"`
	UpstreamObject   string `json:"upstream_object,omitempty"`
	ObjectID         string `json:"object_id,omitempty"`
	Amount           int64  `json:"amount,omitempty"`
	Currency         string `json:"currency,omitempty"`
	ReservedAmount   int64  `json:"reserved_amount,omitempty"`
	ReservedCurrency string `json:"reserved_currency,omitempty"`
	// EndpointID, when set, sends the alert to that endpoint only (test alerts).
	EndpointID string `json:"endpoint_id,omitempty"`
	Detail     string `json:"detail,omitempty"`
	// CreatedAt is the database's clock for alerts its triggers write, the
	// caller's for the others.
	CreatedAt time.Time `json:"created_at"`
}

// Webhook payload formats.
const (
	FormatKeybrake = "keybrake" // the alert as a signed JSON event
	FormatSlack    = "slack"    // {"text": …}, for Slack incoming webhooks and compatible chat tools
)

// AlertEndpoint is a webhook alerts are delivered to. Secret signs every
// delivery (Keybrake-Signature); it must be kept in clear to sign, and the
// admin API shows it only once, at creation. An empty KeyID receives the
// alerts of every key.
type AlertEndpoint struct {
	ID        string    `json:"id"`
	URL       string    `json:"url"`
	Format    string    `json:"format"`
	KeyID     string    `json:"key_id"`
	Secret    string    `json:"-"`
	Enabled   bool      `json:"enabled"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Delivery states. A delivery is created pending for each matching endpoint
// when its alert is written, and moves as the sender attempts it:
//
//	pending   --attempt answered 2xx-->                         delivered
//	pending   --attempt failed, within the retry period-->      pending (next_attempt_at later)
//	pending   --attempt failed, retry period over-->            failed
//	pending   --endpoint deleted-->                             failed
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"
)

// AlertDelivery is one alert on its way to one endpoint.
type AlertDelivery struct {
	ID             string          `json:"id"`
	AlertID        string          `json:"alert_id"`
	EndpointID     string          `json:"endpoint_id"`
	State          string          `json:"state"`
	Attempts       int             `json:"attempts"`
	NextAttemptAt  time.Time       `json:"next_attempt_at"`
	FirstAttemptAt *time.Time      `json:"first_attempt_at"`
	LastStatus     int             `json:"last_status"`
	LastError      string          `json:"last_error"`
	LeaseOwner     string          `json:"-"`
	LeaseUntil     time.Time       `json:"-"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
	Alert          *Alert          `json:"alert,omitempty"`       // filled by LeaseAlertDeliveries and FindAlertDeliveries
	Endpoint       *AlertEndpoint  `json:"-"`                     // filled by LeaseAlertDeliveries
	AttemptLog     []*AlertAttempt `json:"attempt_log,omitempty"` // filled by the admin API for one delivery
}

// AlertAttempt is one HTTP attempt of a delivery.
type AlertAttempt struct {
	DeliveryID string        `json:"delivery_id"`
	N          int           `json:"n"`
	At         time.Time     `json:"at"`
	Status     int           `json:"status"` // 0 when no answer came
	LatencyMS  int64         `json:"latency_ms"`
	Error      string        `json:"error"`
	Latency    time.Duration `json:"-"`
}

// AttemptArgs records an attempt and decides the delivery's next state.
type AttemptArgs struct {
	DeliveryID string
	Owner      string // the lease owner; the attempt is refused if the lease was lost
	At         time.Time
	Status     int
	Latency    time.Duration
	Error      string
	State      string    // DeliveryDelivered, DeliveryFailed, or DeliveryPending to retry
	NextAt     time.Time // for DeliveryPending: when to try again
}

// DeliveryFilter selects deliveries, newest first.
type DeliveryFilter struct {
	ID         string
	AlertID    string
	EndpointID string
	KeyID      string
	State      string
	Limit      int // 0 means 100
}

// AlertFilter selects alerts, newest first.
type AlertFilter struct {
	KeyID string
	Kind  string
	Limit int // 0 means 100
}

// AlertRuleUpdate changes a rule; nil fields stay as they are.
type AlertRuleUpdate struct {
	Window  *string
	Percent *int
	Hours   *int
	Count   *int
	Seconds *int
	Minutes *int
	Enabled *bool
}

// Apply changes r as upd says.
func (r *AlertRule) Apply(upd AlertRuleUpdate) {
	for _, f := range []struct {
		dst *int
		src *int
	}{{&r.Percent, upd.Percent}, {&r.Hours, upd.Hours}, {&r.Count, upd.Count}, {&r.Seconds, upd.Seconds}, {&r.Minutes, upd.Minutes}} {
		if f.src != nil {
			*f.dst = *f.src
		}
	}
	if upd.Window != nil {
		r.Window = *upd.Window
	}
	if upd.Enabled != nil {
		r.Enabled = *upd.Enabled
	}
}

// AlertEndpointUpdate changes an endpoint; nil fields stay as they are.
type AlertEndpointUpdate struct {
	URL     *string
	Format  *string
	Enabled *bool
}

// AlertService keeps alert rules, endpoints and the alert outbox. Threshold,
// refusal-burst, amount-mismatch, approval and drift alerts are written by the store itself,
// in the transaction of the reservation, settlement or audit event that
// caused them; the others by ScanAlerts and EnqueueAlert.
type AlertService interface {
	// CreateAlertRule stores a rule. Returns EINVALID for a bad rule,
	// ENOTFOUND if KeyID names no key, ECONFLICT if the ID is taken.
	CreateAlertRule(ctx context.Context, r *AlertRule) error
	// FindAlertRules returns the rules of keyID, or with all set every rule
	// (defaults first), ordered by kind and creation.
	FindAlertRules(ctx context.Context, keyID string, all bool) ([]*AlertRule, error)
	// UpdateAlertRule applies upd. Returns ENOTFOUND, or EINVALID if the
	// result is not a valid rule.
	UpdateAlertRule(ctx context.Context, id string, upd AlertRuleUpdate, now time.Time) (*AlertRule, error)
	// DeleteAlertRule removes a rule. Returns ENOTFOUND.
	DeleteAlertRule(ctx context.Context, id string) error

	// CreateAlertEndpoint stores an endpoint. Returns ENOTFOUND if KeyID
	// names no key, ECONFLICT if the ID is taken.
	CreateAlertEndpoint(ctx context.Context, e *AlertEndpoint) error
	// FindAlertEndpoints returns every endpoint, oldest first.
	FindAlertEndpoints(ctx context.Context) ([]*AlertEndpoint, error)
	// FindAlertEndpointByID returns an endpoint. Returns ENOTFOUND.
	FindAlertEndpointByID(ctx context.Context, id string) (*AlertEndpoint, error)
	// UpdateAlertEndpoint applies upd. Returns ENOTFOUND.
	UpdateAlertEndpoint(ctx context.Context, id string, upd AlertEndpointUpdate, now time.Time) (*AlertEndpoint, error)
	// DeleteAlertEndpoint removes an endpoint; its pending deliveries
	// fail with the reason. Returns ENOTFOUND.
	DeleteAlertEndpoint(ctx context.Context, id string, now time.Time) error

	// EnqueueAlert writes a to the outbox with a delivery per matching
	// endpoint, unless an alert with the same AlertKey exists: then it
	// returns false and writes nothing. It sets a.ID if empty.
	EnqueueAlert(ctx context.Context, a *Alert) (bool, error)
	// ScanAlerts writes the alerts of the time-driven rules due at now
	// (expiring keys, reservations uncertain too long), each once, and
	// returns how many it wrote.
	ScanAlerts(ctx context.Context, now time.Time) (int, error)
	// ClaimAlerts returns up to limit alerts no caller has claimed yet,
	// oldest first, and marks them claimed: each alert is returned once,
	// across every process sharing the store (for logs and counters).
	ClaimAlerts(ctx context.Context, limit int) ([]*Alert, error)
	// FindAlerts returns alerts matching f, newest first.
	FindAlerts(ctx context.Context, f AlertFilter) ([]*Alert, error)

	// LeaseAlertDeliveries leases to owner, until `until`, up to limit
	// pending deliveries due at now whose lease is free or expired, oldest
	// due first, with their Alert and Endpoint filled in.
	LeaseAlertDeliveries(ctx context.Context, owner string, now, until time.Time, limit int) ([]*AlertDelivery, error)
	// RecordAlertAttempt records an attempt, moves the delivery to
	// args.State and frees its lease. Returns ENOTFOUND for an unknown
	// delivery, ECONFLICT if owner no longer holds its lease or it is
	// not pending, EINVALID for a bad state.
	RecordAlertAttempt(ctx context.Context, args AttemptArgs) (*AlertDelivery, error)
	// FindAlertDeliveries returns deliveries matching f, newest first,
	// with their Alert filled in.
	FindAlertDeliveries(ctx context.Context, f DeliveryFilter) ([]*AlertDelivery, error)
	// FindAlertAttempts returns a delivery's attempts, first first.
	FindAlertAttempts(ctx context.Context, deliveryID string) ([]*AlertAttempt, error)
}
