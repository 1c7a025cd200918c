package http

import (
	"net/http"
	"time"

	"github.com/keybrake/keybrake"
)

// approveUnpriced is the approval step of an unpriced request (on a key
// with allow_unpriced) whose operation the key's approval policy names.
// Such a request is never reserved, so the reserve step's approval never
// sees it; here it waits for a person the same way, matched by its
// Idempotency-Key, and its approval is marked used with no reservation.
// An approval used more than 23 hours after it was asked for, or past its
// expiry, no longer covers a retry: past Stripe's 24-hour window the same
// Idempotency-Key would make a new object, and a retry of a request Stripe
// refused before acting acts anew at any time; nothing else counts it. It writes the
// refusal and returns false when the request must not be forwarded.
func (p *proxy) approveUnpriced(w http.ResponseWriter, r *http.Request, c *call) bool {
	if c.req.Class != ClassUnpriced || approvalRequires(c.key.Approval, c.req.Label, 0) == "" {
		return true
	}
	a, ok := p.approve(w, r, c)
	if !ok {
		return false
	}
	now := p.s.Now()
	if a.State == keybrake.ApprovalUsed && now.Sub(a.CreatedAt) > idempotencyWindow-time.Hour {
		p.deny(w, r, c, keybrake.ErrorParam("Idempotency-Key", "Approval %s was used more than 23 hours ago; Stripe forgets the Idempotency-Key after 24 hours and would act anew. Send the request under a new key to ask again.", a.ID), nil)
		return false
	}
	if p.refuseExpiredRetry(w, r, c, a, "") { // uncounted, whatever Stripe saved (TestAttackApproval_UnpricedUsedApprovalOutlivesItsTTL)
		return false
	}
	p.useApproval(r, a, &keybrake.Reservation{})
	return true
}
