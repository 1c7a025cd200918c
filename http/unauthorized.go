package http

import (
	"net/http"
	"strings"

	"github.com/keybrake/keybrake"
)

// unauthorized answers a request whose credentials failed with err's 401.
// A key that exists but is revoked or expired gets a deny event, so its
// owner sees who still uses it; an unknown key has no key to audit on and
// is only counted.
func (p *proxy) unauthorized(w http.ResponseWriter, r *http.Request, c *call, key *keybrake.Key, err error) {
	if key == nil {
		if keybrake.ErrorCode(err) == keybrake.EUNAUTHORIZED {
			p.s.authFailed(r, "vault key missing, malformed or unknown") // never the presented secret
		}
		p.s.metrics.decision("unknown", "unauthorized")
		p.logAccess(r, c, keybrake.DecisionDeny, keybrake.ErrorCode(err), 0)
		c.v.WriteError(w, r, err)
		return
	}
	c.key = key
	reason := key.Status(p.s.Now())
	switch {
	case strings.Contains(keybrake.ErrorMessage(err), "was rotated"):
		reason = "rotated" // a previous secret past its grace period
	case keybrake.ErrorCode(err) == keybrake.EFORBIDDEN:
		reason = keybrake.ErrorMessage(err) // a key of another vendor
	case reason == "suspended":
		reason = "suspended: " + key.SuspendedReason
	}
	p.s.metrics.decision(opName(c), keybrake.ErrorCode(err))
	p.audit(r, c, keybrake.DecisionDeny, reason, 0, "")
	c.v.WriteError(w, r, err)
}
