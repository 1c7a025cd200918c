package http

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

// approvalDetail is the keybrake part of a keybrake_approval_required error.
type approvalDetail struct {
	ApprovalID string    `json:"approval_id"`
	URL        string    `json:"approval_url"`
	State      string    `json:"state"`
	Reason     string    `json:"reason"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// approve is the approval step of reserve: a request the key's policy makes
// wait for a person (ApprovalPolicy.Requires) goes on only when the key's
// approval for its Idempotency-Key was approved for this very request
// (same fingerprint) at no more than the amount approved (a request priced
// by looking its object up can move more with the same parameters) and has
// not expired, or was already used (the retry is then a replay of its
// reservation). Otherwise it is answered at once,
// nothing forwarded and nothing reserved: 402 keybrake_approval_required
// while pending (recording the approval on first sight), 403 when denied,
// 400 when expired or for another request. A request that raises an
// existing object (call.raises) also waits when the policy names the
// operation that creates it (stripe.MadeBy). It returns the approval to
// mark used once reserved, and false when it wrote the refusal.
func (p *proxy) approve(w http.ResponseWriter, r *http.Request, c *call) (*keybrake.Approval, bool) {
	pr := c.cost
	why := approvalRequires(c.key.Approval, c.req.Label, pr.Micros) // aliases.go
	if madeBy := stripe.MadeBy(c.req.Operation); why == "" && c.raises && madeBy != "" {
		// An approval of the creation saw its amount; a raise needs its own.
		if why = approvalRequires(c.key.Approval, madeBy, pr.Micros); why != "" {
			why = c.req.Label + " raises what " + madeBy + " made movable, and " + why
		}
	}
	if why == "" {
		return nil, true
	}
	idem := c.clientIdem
	if idem == "" && !c.req.Idempotent {
		p.deny(w, r, c, keybrake.Errorf(keybrake.EFORBIDDEN, "keybrake refused %s: %s, and an approved request is matched by its idempotency key, which %s does not have for it. Nothing was sent to %s.", c.req.Label, why, c.vendorTitle(), c.vendorTitle()), nil)
		return nil, false
	}
	if idem == "" {
		p.deny(w, r, c, keybrake.ErrorParam("Idempotency-Key", "keybrake refused %s: %s, and an approved request is matched by its Idempotency-Key. Send one, and retry with the same key once approved.", c.req.Label, why), nil)
		return nil, false
	}
	ctx, now, fp := r.Context(), p.s.Now().UTC().Truncate(time.Microsecond), c.fingerprint()
	a, err := p.s.Store.FindApprovalByKey(ctx, c.key.ID, idem)
	if keybrake.ErrorCode(err) == keybrake.ENOTFOUND {
		a, _, err = p.s.Store.RequestApproval(ctx, &keybrake.Approval{
			ID: randomID("apr_", 24), KeyID: c.key.ID, IdempotencyKey: idem, Fingerprint: fp,
			Operation: c.req.Label, Method: r.Method, Path: c.req.Record, Account: c.req.Account,
			Amount: pr.Amount, Currency: pr.Currency, Micros: pr.Micros, Reason: why,
			Params:    approvalParams(c.req), // approval_params.go: what the approver sees
			CreatedAt: now, ExpiresAt: now.Add(c.key.Approval.TTL()),
		})
	}
	if err != nil {
		p.deny(w, r, c, c.storeError(err), nil)
		return nil, false
	}
	if a.Fingerprint != fp {
		p.deny(w, r, c, keybrake.ErrorParam("Idempotency-Key", "Approval %s under this Idempotency-Key covers another request (other parameters, account or API version); keybrake refused this one without forwarding it.", a.ID), nil)
		return nil, false
	}
	switch st := a.Status(now); st {
	case keybrake.ApprovalApproved, keybrake.ApprovalUsed:
		if pr.Micros > a.Micros {
			// Same parameters, more money: a confirm or refund priced by
			// looking its object up moves what the object says now, and
			// the person approved what it said then.
			p.deny(w, r, c, keybrake.ErrorParam("Idempotency-Key", "Approval %s covers %s at $%s; it now moves $%s (its object changed since), so keybrake refused it without forwarding it. Send it again under a new Idempotency-Key to ask again.", a.ID, c.req.Label, a.Micros, pr.Micros), nil)
			return nil, false
		}
		c.note = joinReason(c.note, fmt.Sprintf("approved by %s (%s)", a.DecidedBy, a.ID))
		return a, true
	case keybrake.ApprovalDenied:
		p.deny(w, r, c, keybrake.Errorf(keybrake.EFORBIDDEN, "keybrake refused %s: approval %s was denied by %s. Nothing was sent to %s.", c.req.Label, a.ID, a.DecidedBy, c.vendorTitle()), nil)
	case keybrake.ApprovalExpired:
		p.deny(w, r, c, keybrake.ErrorParam("Idempotency-Key", "Approval %s expired at %s; keybrake refused this request without forwarding it. Send it again under a new Idempotency-Key to ask again.", a.ID, a.ExpiresAt.Format(time.RFC3339)), nil)
	default:
		link := p.s.approvalURL(a.ID)
		w.Header().Set("Keybrake-Approval-Id", a.ID)
		w.Header().Set("Keybrake-Approval-Url", link)
		p.deny(w, r, c, &keybrake.Error{Code: keybrake.EAPPROVAL, Message: fmt.Sprintf(
			"keybrake is holding %s for a person's approval: %s. Nothing was sent to %s and nothing was reserved. Once approved at %s, retry the same request with the same Idempotency-Key before %s.",
			c.req.Label, why, c.vendorTitle(), link, a.ExpiresAt.Format(time.RFC3339))},
			approvalDetail{ApprovalID: a.ID, URL: link, State: st, Reason: why, ExpiresAt: a.ExpiresAt})
	}
	return nil, false
}

// useApproval marks a's approval used by the reservation just made. A
// failure is logged: the reservation stands, and a retry within the
// approval's lifetime is a replay of it anyway.
// refuseExpiredRetry refuses, and returns true for, a retry covered by a
// used approval a that has expired when nothing shows Stripe acted on the
// request it approved (an answer it refused before acting, such as a 429,
// is not saved, so the retry acts anew): the person approved it only for
// its lifetime (TestAttackApproval_UsedApprovalOutlivesItsTTL and the
// unpriced and capture cases). why, if not empty, says what showed it.
func (p *proxy) refuseExpiredRetry(w http.ResponseWriter, r *http.Request, c *call, a *keybrake.Approval, why string) bool {
	if a == nil || a.State != keybrake.ApprovalUsed || p.s.Now().Before(a.ExpiresAt) {
		return false
	}
	if why != "" {
		why = " (" + why + ")"
	}
	p.deny(w, r, c, keybrake.ErrorParam("Idempotency-Key", "Approval %s expired at %s and nothing shows Stripe acted on the request it approved%s, so this retry may act anew; keybrake refused it without forwarding it. Send it again under a new Idempotency-Key to ask again.", a.ID, a.ExpiresAt.Format(time.RFC3339), why), nil)
	return true
}

func (p *proxy) useApproval(r *http.Request, a *keybrake.Approval, rsv *keybrake.Reservation) {
	if a == nil || a.State == keybrake.ApprovalUsed {
		return
	}
	if err := p.s.Store.UseApproval(r.Context(), a.ID, rsv.ID, p.s.Now()); err != nil {
		p.s.logger().Warn("marking an approval used failed", "approval", a.ID, "reservation", rsv.ID, "err", err)
	}
}

// approvalURL is the console page of an approval, under publicURL:
// --public-url when set, else the admin listener's own address, as the
// links in alerts. Never the client's Host header: a key holder chooses
// it, and an approver follows the link and signs in there with the admin
// token.
func (s *Server) approvalURL(id string) string {
	return s.publicURL() + "/console/approvals/" + id
}

// serveApprovals routes the admin API's approvals:
//
//	GET  /vault/approvals[?state=pending&key=vk_…]
//	GET  /vault/approvals/{id}
//	POST /vault/approvals/{id}/approve
//	POST /vault/approvals/{id}/deny
func (s *Server) serveApprovals(w http.ResponseWriter, r *http.Request, parts []string) {
	switch {
	case len(parts) == 1 && r.Method == http.MethodGet:
		q := r.URL.Query()
		limit, err := parseLimit(r)
		if err != nil {
			s.writeAdminError(w, r, err)
			return
		}
		list, err := s.Store.FindApprovals(r.Context(), keybrake.ApprovalFilter{KeyID: q.Get("key"), State: q.Get("state"), Limit: limit})
		if err != nil {
			s.writeAdminError(w, r, err)
			return
		}
		data := make([]approvalView, 0, len(list))
		for _, a := range list {
			data = append(data, s.viewApproval(a))
		}
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
	case len(parts) == 2 && validApprovalID(parts[1]) && r.Method == http.MethodGet:
		a, err := s.Store.FindApprovalByID(r.Context(), parts[1])
		if err != nil {
			s.writeAdminError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, s.viewApproval(a))
	case len(parts) == 3 && validApprovalID(parts[1]) && (parts[2] == "approve" || parts[2] == "deny") && r.Method == http.MethodPost:
		by := ""
		if id := adminIdentity(r.Context()); id != nil {
			by = id.Name
		}
		a, err := s.DecideApproval(r, parts[1], parts[2] == "approve", by)
		if err != nil {
			s.writeAdminError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, s.viewApproval(a))
	default:
		s.writeAdminError(w, r, keybrake.Errorf(keybrake.ENOTFOUND, "No admin route for %s /vault/%s.", r.Method, strings.Join(parts, "/")))
	}
}

// DecideApproval approves or denies approval id on behalf of by (an admin
// token's name), and audits it twice: in the admin log (who) and in the
// key's own audit chain (what was decided for which request). The console
// decides through it too.
func (s *Server) DecideApproval(r *http.Request, id string, approve bool, by string) (*keybrake.Approval, error) {
	if by == "" {
		return nil, errors.New("approval decided without an approver")
	}
	now := s.Now().UTC().Truncate(time.Microsecond)
	action := "approval.deny"
	if approve {
		action = "approval.approve"
	}
	args := keybrake.DecideArgs{ID: id, Approve: approve, By: by, Now: now}
	if _, ok := s.Store.(keybrake.AdminStore); ok {
		args.Event = func(a *keybrake.Approval) *keybrake.AdminEvent {
			return s.newAdminEvent(r, adminName(r), action, a.ID, fmt.Sprintf("key=%s operation=%s usd=%s idempotency_key=%s", a.KeyID, a.Operation, a.Micros, a.IdempotencyKey), "")
		}
	}
	a, err := s.Store.DecideApproval(r.Context(), args)
	if err != nil {
		return nil, err
	}
	s.logAdminAction(r, action, a.ID)
	s.audit.add(&keybrake.Event{KeyID: a.KeyID, Time: now, Operation: a.Operation, Method: a.Method, Path: a.Path,
		Amount: a.Amount, Currency: a.Currency, Micros: a.Micros, Decision: keybrake.DecisionApproval,
		Reason: fmt.Sprintf("%s %s by %s; nothing forwarded until the client retries", strings.TrimPrefix(action, "approval."), a.ID, by), IdempotencyKey: a.IdempotencyKey})
	return a, nil
}

// approvalView is an approval as the admin API shows it.
type approvalView struct {
	*keybrake.Approval
	Object string `json:"object"`
	Status string `json:"status"` // State, or expired
}

func (s *Server) viewApproval(a *keybrake.Approval) approvalView {
	return approvalView{Approval: a, Object: "approval", Status: a.Status(s.Now())}
}

func validApprovalID(id string) bool {
	return strings.HasPrefix(id, "apr_") && len(id) <= 64 && idPattern.MatchString("vk_"+id[4:])
}
