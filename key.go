package keybrake

import (
	"context"
	"time"
)

// Spend windows. A key may cap any of them; an absent cap means unlimited.
const (
	WindowPerRequest = "per_request" // a single request's amount
	WindowDaily      = "daily"       // a calendar day in the key's timezone
	WindowMonthly    = "monthly"     // a calendar month in the key's timezone
	WindowTotal      = "total"       // the key's whole lifetime
)

// VendorStripe is the Stripe API, /stripe/v1/… and /v1/… (vendor.go
// lists the others).
const VendorStripe = "stripe"

// VaultKeyPrefix starts every vault key handed to clients.
const VaultKeyPrefix = "vault_key_"

// AllEndpoints, as the only entry of AllowedEndpoints, allows every
// operation; the caps, and the refusal of unpriced operations unless
// AllowUnpriced, still apply. An empty AllowedEndpoints allows none.
const AllEndpoints = "*"

// DefaultEndpoints returns the operations a key created without
// allowed_endpoints may call: taking payments from customers and refunding
// them, and reading what those create. It leaves out everything that sends
// money out of the account (payouts, transfers, top-ups), changes the
// account (Connect, webhooks, products and prices), or reads what is
// secret (issuing, treasury, apps secrets).
func DefaultEndpoints() []string {
	return []string{
		"balance.retrieve",
		"charges.retrieve", "charges.list", "charges.search",
		"charges.create", "charges.capture",
		"payment_intents.retrieve", "payment_intents.list", "payment_intents.search",
		"payment_intents.create", "payment_intents.update", "payment_intents.confirm",
		"payment_intents.capture", "payment_intents.cancel",
		"refunds.retrieve", "refunds.list", "refunds.create",
		"customers.retrieve", "customers.list", "customers.search",
		"customers.create", "customers.update",
	}
}

// Caps are a key's spend limits in USD micros. A nil cap is no limit.
type Caps struct {
	PerRequest *Micros `json:"per_request_usd_cap"`
	Daily      *Micros `json:"daily_usd_cap"`
	Monthly    *Micros `json:"monthly_usd_cap"`
	Total      *Micros `json:"total_usd_cap"`
}

// Any reports whether at least one cap is set.
func (c Caps) Any() bool {
	return c.PerRequest != nil || c.Daily != nil || c.Monthly != nil || c.Total != nil
}

// Key is a vault key's record: its policy and identity. The vault key itself
// is never stored; only SecretHash (hex SHA-256 of it) is.
type Key struct {
	ID           string `json:"id"`
	Vendor       string `json:"vendor"`
	Label        string `json:"label"`
	SecretHash   string `json:"-"`
	SecretPrefix string `json:"key_prefix"` // first characters, for recognising a key in logs

	Caps
	CountCaps                           // daily and monthly message, call and email caps (vendor.go)
	TwilioScope       *TwilioScope      `json:"twilio_scope"` // nil: no Twilio allowlists (scope.go)
	ResendScope       *ResendScope      `json:"resend_scope"` // nil: no Resend allowlists (scope.go)
	AllowedEndpoints  []string          `json:"allowed_endpoints"`
	AllowedCustomers  []string          `json:"allowed_customers"`
	AllowedAccounts   []string          `json:"allowed_accounts"`
	AllowedCurrencies []string          `json:"allowed_currencies"`
	Timezone          string            `json:"timezone"`
	AllowUnpriced     bool              `json:"allow_unpriced"`
	AllowSecretReads  bool              `json:"allow_secret_reads"`
	Metadata          map[string]string `json:"metadata"`
	Guards            *Guards           `json:"guards"`    // nil: no guards (guard.go)
	Mint              bool              `json:"mint"`      // may mint child keys from its own budget (delegate.go)
	ParentID          string            `json:"parent_id"` // the key this one was minted from, "" for a key an admin created
	Approval          *ApprovalPolicy   `json:"approval"`  // nil: no request waits for a person (approval.go)

	ExpiresAt       *time.Time `json:"expires_at"`
	RevokedAt       *time.Time `json:"revoked_at"`
	SuspendedAt     *time.Time `json:"suspended_at"`     // refused while set (by a breaker rule or an operator); resuming clears it
	SuspendedReason string     `json:"suspended_reason"` // why, for the error and the console

	// PreviousSecretHash is the hash of the vault key a rotation replaced;
	// it authenticates until PreviousSecretExpiresAt, then never again.
	PreviousSecretHash      string     `json:"-"`
	PreviousSecretExpiresAt *time.Time `json:"previous_secret_expires_at"`
	CreatedAt               time.Time  `json:"created_at"`
	UpdatedAt               time.Time  `json:"updated_at"`
	// Version identifies the stored row this Key was read from: opaque,
	// store-defined (PostgreSQL: the row's xmin; SQLite: its version
	// column), equal means unchanged, different after every update of
	// the key, "" when the store keeps none. A reservation made with ReserveArgs.KeyVersion is
	// refused (ReserveResult.Stale) when the key is no longer this version.
	Version string `json:"-"`
}

// Location returns the key's calendar zone, UTC when Timezone is empty.
// Returns EINVALID for an unknown zone name.
func (k *Key) Location() (*time.Location, error) {
	if k.Timezone == "" || k.Timezone == "UTC" {
		return time.UTC, nil
	}
	loc, err := time.LoadLocation(k.Timezone)
	if err != nil {
		return nil, ErrorParam("timezone", "unknown timezone %q", k.Timezone)
	}
	return loc, nil
}

// Usable returns nil if the key may authenticate at now, or EUNAUTHORIZED
// saying why not (revoked, expired).
//
// A revoked key is refused whatever now is: revoked_at is the revoking
// replica's time, and a replica whose clock is behind it (by up to twice
// MaxClockSkew) would otherwise keep reserving after the revocation
// committed, and a child's reservation could commit after its escrow was
// returned to the parent (ReturnEscrows), outside every cap of the parent.
// The stores read revoked_at under the key's lock in the transaction that
// reserves, so a revocation committed first is always seen.
func (k *Key) Usable(now time.Time) error {
	if k.RevokedAt != nil {
		if k.ClosedAtExpiry() {
			return Errorf(EUNAUTHORIZED, "This vault key (%s…) expired at %s.", k.SecretPrefix, k.ExpiresAt.UTC().Format(time.RFC3339))
		}
		return Errorf(EUNAUTHORIZED, "This vault key (%s…) was revoked at %s.", k.SecretPrefix, k.RevokedAt.UTC().Format(time.RFC3339))
	}
	if k.ExpiresAt != nil && !now.Before(*k.ExpiresAt) {
		return Errorf(EUNAUTHORIZED, "This vault key (%s…) expired at %s.", k.SecretPrefix, k.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if k.SuspendedAt != nil {
		return k.suspendedError()
	}
	return nil
}

// ClosedAtExpiry reports whether the key was closed at its expiry rather
// than revoked by someone: ReturnEscrows sets an expired child's revoked_at
// to its expires_at before returning its escrow, so that no reservation
// decided on a clock still before the expiry commits after the return.
func (k *Key) ClosedAtExpiry() bool {
	return k.RevokedAt != nil && k.ExpiresAt != nil && k.RevokedAt.Equal(*k.ExpiresAt)
}

// Buckets names the calendar windows that contain t in loc: the day as
// "2006-01-02" and the month as "2006-01".
func Buckets(t time.Time, loc *time.Location) (day, month string) {
	lt := t.In(loc)
	return lt.Format("2006-01-02"), lt.Format("2006-01")
}

// DayReset returns the start of the calendar day after t's, in loc.
func DayReset(t time.Time, loc *time.Location) time.Time {
	lt := t.In(loc)
	return time.Date(lt.Year(), lt.Month(), lt.Day()+1, 0, 0, 0, 0, loc)
}

// MonthReset returns the start of the calendar month after t's, in loc.
func MonthReset(t time.Time, loc *time.Location) time.Time {
	lt := t.In(loc)
	return time.Date(lt.Year(), lt.Month()+1, 1, 0, 0, 0, 0, loc)
}

// KeyFilter selects a page of keys, ordered by creation, oldest first.
type KeyFilter struct {
	Limit         int    // at most this many; 0 means the default of 10
	StartingAfter string // the ID of the last key of the previous page
}

// KeyUpdate changes a key's policy. Nil fields are left as they are. For caps,
// Set* says whether the cap is being changed, so a cap can also be removed.
type KeyUpdate struct {
	Label             *string
	SetPerRequest     bool
	PerRequest        *Micros
	SetDaily          bool
	Daily             *Micros
	SetMonthly        bool
	Monthly           *Micros
	SetTotal          bool
	Total             *Micros
	AllowedEndpoints  *[]string
	AllowedCustomers  *[]string
	AllowedAccounts   *[]string
	AllowedCurrencies *[]string
	AllowUnpriced     *bool
	AllowSecretReads  *bool
	Metadata          *map[string]string
	Guards            *Guards // a zero Guards removes every guard
	Mint              *bool
	Approval          *ApprovalPolicy // a zero ApprovalPolicy removes the requirement
	SetExpiresAt      bool
	ExpiresAt         *time.Time
	CountCaps         *CountCaps   // replaces the count caps CountCapFields names, all six when it names none
	CountCapFields    []string     // JSON names (daily_message_cap…) of the count caps CountCaps sets
	TwilioScope       *TwilioScope // replaces the Twilio scope; a zero TwilioScope removes it
	ResendScope       *ResendScope // replaces the Resend scope; a zero ResendScope removes it
}

// Apply changes k as upd says. Caps and the expiry are copied, so k shares
// no pointer with upd.
func (k *Key) Apply(upd KeyUpdate) {
	if upd.Label != nil {
		k.Label = *upd.Label
	}
	if upd.CountCaps != nil {
		k.CountCaps = k.CountCaps.merge(*upd.CountCaps, upd.CountCapFields)
	}
	k.applyScope(upd) // scope.go
	for _, c := range []struct {
		set bool
		dst **Micros
		src *Micros
	}{
		{upd.SetPerRequest, &k.PerRequest, upd.PerRequest},
		{upd.SetDaily, &k.Daily, upd.Daily},
		{upd.SetMonthly, &k.Monthly, upd.Monthly},
		{upd.SetTotal, &k.Total, upd.Total},
	} {
		if c.set {
			*c.dst = nil
			if c.src != nil {
				v := *c.src
				*c.dst = &v
			}
		}
	}
	for _, l := range []struct {
		dst *[]string
		src *[]string
	}{
		{&k.AllowedEndpoints, upd.AllowedEndpoints},
		{&k.AllowedCustomers, upd.AllowedCustomers},
		{&k.AllowedAccounts, upd.AllowedAccounts},
		{&k.AllowedCurrencies, upd.AllowedCurrencies},
	} {
		if l.src != nil {
			*l.dst = *l.src
		}
	}
	if upd.AllowUnpriced != nil {
		k.AllowUnpriced = *upd.AllowUnpriced
	}
	if upd.AllowSecretReads != nil {
		k.AllowSecretReads = *upd.AllowSecretReads
	}
	if upd.Metadata != nil {
		k.Metadata = *upd.Metadata
	}
	if upd.Guards != nil {
		k.Guards = nil
		if !upd.Guards.IsZero() {
			g := *upd.Guards
			k.Guards = &g
		}
	}
	if upd.Mint != nil {
		k.Mint = *upd.Mint
	}
	if upd.Approval != nil {
		k.Approval = nil
		if !upd.Approval.IsZero() {
			a := upd.Approval.Clone()
			k.Approval = &a
		}
	}
	if upd.SetExpiresAt {
		k.ExpiresAt = nil
		if upd.ExpiresAt != nil {
			t := *upd.ExpiresAt
			k.ExpiresAt = &t
		}
	}
}

// KeyService stores vault keys.
type KeyService interface {
	// CreateKey stores a new key. Returns ECONFLICT if the ID or the secret
	// hash is already taken.
	CreateKey(ctx context.Context, k *Key) error

	// FindKeyByID returns the key. Returns ENOTFOUND if it does not exist.
	FindKeyByID(ctx context.Context, id string) (*Key, error)

	// FindKeyBySecretHash returns the key whose vault key hashes to hash.
	// Returns ENOTFOUND if there is none.
	FindKeyBySecretHash(ctx context.Context, hash string) (*Key, error)

	// FindKeys returns a page of keys and whether more follow. Returns
	// EINVALID if StartingAfter names no key.
	FindKeys(ctx context.Context, f KeyFilter) (keys []*Key, hasMore bool, err error)

	// UpdateKey applies upd and returns the updated key. Returns ENOTFOUND
	// if the key does not exist.
	UpdateKey(ctx context.Context, id string, upd KeyUpdate, now time.Time) (*Key, error)

	// RevokeKey marks the key revoked at now; revoking twice keeps the first
	// time. Returns ENOTFOUND if the key does not exist.
	RevokeKey(ctx context.Context, id string, now time.Time) (*Key, error)
}

// KeyWatcher is implemented by stores that report changes to keys, so a
// cache of keys in front of the store stays correct.
type KeyWatcher interface {
	// WatchKeys calls fn with the ID of every key updated or revoked after
	// the call, by any process sharing the store, until ctx ends. fn("")
	// means changes may have been missed (a lost connection): drop every
	// cached key. It returns once watching has started.
	WatchKeys(ctx context.Context, fn func(keyID string)) error
}

// SyncKeyWatcher is a KeyWatcher whose reports may be known never to be
// late: every process that may change a key is the watching one, and fn
// runs before the change's call returns (SQLite, while no other process
// has the file open). A key cached from it is then as the store has it,
// but for a change committing at that moment; one from a store shared by
// replicas (PostgreSQL), or a SQLite file another process opened, may lag
// behind a change made elsewhere.
type SyncKeyWatcher interface {
	KeyWatcher
	// KeyReportsSynchronous reports whether WatchKeys' reports are
	// synchronous as above now. It is asked for every money-moving
	// request decided on a cached key, so must be cheap; false makes the
	// request read its key again.
	KeyReportsSynchronous() bool
}
