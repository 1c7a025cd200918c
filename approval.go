package keybrake

import (
	"context"
	"encoding/json"
	"slices"
	"time"
)

// Approval states.
const (
	ApprovalPending  = "pending"  // waiting for a person
	ApprovalApproved = "approved" // a person approved; the retry under the same Idempotency-Key goes through
	ApprovalDenied   = "denied"   // a person denied; the request is refused
	ApprovalUsed     = "used"     // the approved request was reserved; further retries are replays
	ApprovalExpired  = "expired"  // pending or approved past ExpiresAt (derived, never stored)
)

// DecisionApproval marks an audit event of a person's decision on an
// approval: nothing was forwarded; the client's retry is audited itself.
const DecisionApproval = "approval"

// DefaultApprovalTTL is how long an approval lives when the key's policy
// names no TTL; MaxApprovalTTL keeps it inside Stripe's 24-hour
// idempotency window with keybrake's hour of margin.
const (
	DefaultApprovalTTL = time.Hour
	MaxApprovalTTL     = 23 * time.Hour
)

// ApprovalPolicy makes some requests of a key wait for a person: those whose
// amount is above AboveUSD, and those naming one of Operations.
type ApprovalPolicy struct {
	AboveUSD   *Micros  `json:"above_usd"`   // nil: no amount needs approval
	Operations []string `json:"operations"`  // operation names, e.g. refunds.create
	TTLSeconds int64    `json:"ttl_seconds"` // how long an approval lives; 0 means DefaultApprovalTTL
}

// IsZero reports whether p requires nothing.
func (p *ApprovalPolicy) IsZero() bool {
	return p == nil || (p.AboveUSD == nil && len(p.Operations) == 0)
}

// Clone returns a copy sharing nothing with p.
func (p *ApprovalPolicy) Clone() ApprovalPolicy {
	c := *p
	if p.AboveUSD != nil {
		v := *p.AboveUSD
		c.AboveUSD = &v
	}
	c.Operations = slices.Clone(p.Operations)
	return c
}

// TTL is how long an approval of this policy lives.
func (p *ApprovalPolicy) TTL() time.Duration {
	if p == nil || p.TTLSeconds <= 0 {
		return DefaultApprovalTTL
	}
	return time.Duration(p.TTLSeconds) * time.Second
}

// Requires returns why a request of operation op moving m USD needs approval
// under p, or "" when it does not.
func (p *ApprovalPolicy) Requires(op string, m Micros) string {
	if p.IsZero() {
		return ""
	}
	if slices.Contains(p.Operations, op) {
		return op + " needs approval on this key"
	}
	if p.AboveUSD != nil && m > *p.AboveUSD {
		return "$" + m.String() + " is above this key's approval threshold of $" + p.AboveUSD.String()
	}
	return ""
}

// AtLeast reports whether p requires approval for everything q does: a
// threshold at or below q's, q's operations among p's, a TTL no longer.
func (p *ApprovalPolicy) AtLeast(q *ApprovalPolicy) bool {
	if q.IsZero() {
		return true
	}
	if p.IsZero() {
		return false
	}
	if q.AboveUSD != nil && (p.AboveUSD == nil || *p.AboveUSD > *q.AboveUSD) {
		return false
	}
	for _, op := range q.Operations {
		if !slices.Contains(p.Operations, op) {
			return false
		}
	}
	return p.TTL() <= q.TTL()
}

// Approval is one request waiting for, or given, a person's decision. It is
// keyed by (KeyID, IdempotencyKey): the client's retry with the same key
// and the same request (Fingerprint) is the approved request.
//
// The lifecycle of an approval, one line per transition:
//
//	(none)    --request needs approval (RequestApproval)-->  pending   (answered 402 keybrake_approval_required)
//	pending   --a person approves (DecideApproval)-->        approved
//	pending   --a person denies (DecideApproval)-->          denied    (final)
//	approved  --the retry is reserved (UseApproval)-->       used      (final; later retries are replays)
//	pending, approved --ExpiresAt passes-->                  expired   (derived; final)
type Approval struct {
	ID             string `json:"id"`
	KeyID          string `json:"key_id"`
	IdempotencyKey string `json:"idempotency_key"`
	Fingerprint    string `json:"-"`
	Operation      string `json:"operation"`
	Method         string `json:"method"`
	Path           string `json:"path"`
	Account        string `json:"stripe_account,omitempty"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	Micros         Micros `json:"usd"`
	Reason         string `json:"reason"` // why it needs approval
	// Params is what the approver sees of the request's parameters: those
	// its Fingerprint covers, as the proxy parsed them, with secrets and
	// card data masked and the list bounded. nil for an approval recorded
	// before keybrake kept them ("parameters not recorded").
	Params        *ApprovalParams `json:"params"`
	State         string          `json:"state"`
	DecidedBy     string          `json:"decided_by,omitempty"` // the admin token's name, or "link:<name>" for a signed link
	DecidedAt     *time.Time      `json:"decided_at,omitempty"`
	ReservationID string          `json:"reservation_id,omitempty"`
	ExpiresAt     time.Time       `json:"expires_at"`
	CreatedAt     time.Time       `json:"created_at"`
	UpdatedAt     time.Time       `json:"updated_at"`
}

// ApprovalParam is one parameter of an approval's request as shown to the
// approver: its name as sent ("destination", "transfer_data[destination]",
// "To") and its value, decoded, with characters that are not printable
// written as \uXXXX escapes so a value cannot fake a line of an alert.
type ApprovalParam struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// Masked is true when Value is not the value sent: a secret, a
	// password, a token or card data is never stored or shown.
	Masked bool `json:"masked,omitempty"`
}

// ApprovalParams is the bounded list of an approval's parameters.
type ApprovalParams struct {
	List []ApprovalParam `json:"list"`
	More int             `json:"more"` // parameters left off past the bound ("…and K more")
}

// Status returns the approval's state at now, ApprovalExpired for a pending
// or approved one past ExpiresAt.
func (a *Approval) Status(now time.Time) string {
	if (a.State == ApprovalPending || a.State == ApprovalApproved) && !now.Before(a.ExpiresAt) {
		return ApprovalExpired
	}
	return a.State
}

// ApprovalFilter selects approvals, newest first.
type ApprovalFilter struct {
	KeyID string
	State string // a stored state; "" for any
	Limit int    // 0 means 50
}

// DecideArgs is a person's decision on an approval.
type DecideArgs struct {
	ID      string
	Approve bool
	By      string
	Now     time.Time
	// Event, if not nil, gives the admin audit event of the decision from
	// the approval as decided; the store appends it in the decision's
	// transaction, so no approval is decided without the entry saying who
	// did it.
	Event func(*Approval) *AdminEvent
}

// ApprovalService keeps approvals. See Approval for the state machine.
type ApprovalService interface {
	// RequestApproval records a (pending) unless the key already has an
	// approval for a.IdempotencyKey, and returns the approval now stored
	// under it with created saying which. The caller compares Fingerprint.
	// Returns EINVALID for a missing ID, key or Idempotency-Key.
	RequestApproval(ctx context.Context, a *Approval) (stored *Approval, created bool, err error)

	// FindApprovalByID returns an approval. Returns ENOTFOUND.
	FindApprovalByID(ctx context.Context, id string) (*Approval, error)

	// FindApprovalByKey returns the key's approval for an Idempotency-Key.
	// Returns ENOTFOUND when there is none.
	FindApprovalByKey(ctx context.Context, keyID, idempotencyKey string) (*Approval, error)

	// FindApprovals returns approvals matching f, newest first.
	FindApprovals(ctx context.Context, f ApprovalFilter) ([]*Approval, error)

	// DecideApproval approves or denies a pending approval at args.Now,
	// recording who. Returns ENOTFOUND for an unknown ID, ECONFLICT for one
	// already decided or expired at Now.
	DecideApproval(ctx context.Context, args DecideArgs) (*Approval, error)

	// UseApproval marks an approved approval used by reservationID. A used
	// one is left as it is. Returns ENOTFOUND for an unknown ID, ECONFLICT
	// for one not approved.
	UseApproval(ctx context.Context, id, reservationID string, now time.Time) error

	// LinkSecret returns the server-side secret named name (LinkSecretApprovals
	// keys the approve/deny links), the same on every replica sharing the
	// store. It is never shown or logged. Returns ENOTFOUND for an unknown
	// name.
	LinkSecret(ctx context.Context, name string) ([]byte, error)
}

// LinkSecretApprovals names the secret that signs approve/deny links.
const LinkSecretApprovals = "approval_links"

// EncodeApprovalParams is how a store keeps p: JSON, or nil (NULL) for an
// approval whose parameters were not recorded.
func EncodeApprovalParams(p *ApprovalParams) (*string, error) {
	if p == nil {
		return nil, nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, Errorf(EINTERNAL, "encode approval parameters: %v", err)
	}
	s := string(b)
	return &s, nil
}

// DecodeApprovalParams reads what EncodeApprovalParams stored; valid is
// false for NULL, which decodes to nil.
func DecodeApprovalParams(s string, valid bool) (*ApprovalParams, error) {
	if !valid {
		return nil, nil
	}
	p := &ApprovalParams{}
	if err := json.Unmarshal([]byte(s), p); err != nil {
		return nil, Errorf(EINTERNAL, "decode approval parameters: %v", err)
	}
	if p.List == nil {
		p.List = []ApprovalParam{}
	}
	return p, nil
}
