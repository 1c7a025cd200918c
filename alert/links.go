package alert

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"strconv"
	"time"

	"github.com/keybrake/keybrake"
)

// Actions a signed approval link can take.
const (
	LinkApprove = "approve"
	LinkDeny    = "deny"
)

// ApprovalInfo is what an approval_required alert says about its approval,
// with the console link and, when the sender knows its public URL, the
// signed approve and deny links (see ApprovalLink).
type ApprovalInfo struct {
	ID             string          `json:"id"`
	KeyID          string          `json:"key_id"`
	Operation      string          `json:"operation"`
	Method         string          `json:"method"`
	Path           string          `json:"path"`
	Amount         int64           `json:"amount"`   // in the currency's minor unit, as sent to Stripe
	Currency       string          `json:"currency"` // e.g. usd
	USD            keybrake.Micros `json:"usd"`
	IdempotencyKey string          `json:"idempotency_key"`
	Reason         string          `json:"reason"`
	// Params are the request's parameters as the approver sees them
	// (keybrake.Approval.Params): nil when they were not recorded.
	Params     *keybrake.ApprovalParams `json:"params"`
	ExpiresAt  time.Time                `json:"expires_at"`
	ConsoleURL string                   `json:"console_url,omitempty"`
	ApproveURL string                   `json:"approve_url,omitempty"`
	DenyURL    string                   `json:"deny_url,omitempty"`
}

// ApprovalLink returns the signed link under base (the admin listener's
// public URL) that takes action on approval id until exp, naming the
// endpoint the alert was sent to:
//
//	{base}/vault/approvals/{id}/decide?action=approve&endpoint=ep_…&exp=1796040000&sig=<hex>
//
// sig is LinkMAC. Fetching it shows a confirmation page; only a POST to it
// decides (docs/approvals.md).
func ApprovalLink(secret []byte, base, id, action, endpoint string, exp time.Time) string {
	e := exp.Unix()
	q := url.Values{"action": {action}, "endpoint": {endpoint}, "exp": {strconv.FormatInt(e, 10)},
		"sig": {LinkMAC(secret, id, action, endpoint, e)}}
	return base + "/vault/approvals/" + url.PathEscape(id) + "/decide?" + q.Encode()
}

// LinkMAC is the hex HMAC-SHA256, keyed with secret, over the approval id,
// the action, the endpoint and the expiry (unix seconds), each on its own
// line after a purpose label, so no field can be shifted into another.
func LinkMAC(secret []byte, id, action, endpoint string, exp int64) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("keybrake approval link v1\n" + id + "\n" + action + "\n" + endpoint + "\n" + strconv.FormatInt(exp, 10)))
	return hex.EncodeToString(m.Sum(nil))
}

// VerifyLink reports whether sig is LinkMAC of the other fields, compared in
// constant time. The caller checks the expiry.
func VerifyLink(secret []byte, id, action, endpoint string, exp int64, sig string) bool {
	want := LinkMAC(secret, id, action, endpoint, exp)
	return len(secret) > 0 && hmac.Equal([]byte(sig), []byte(want))
}
