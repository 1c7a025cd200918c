package console

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/keybrake/keybrake"
)

// approvalRow is an approval as the admin API answers it.
type approvalRow struct {
	keybrake.Approval
	Status string `json:"status"`
}

// serveApprovals lists the pending approvals (GET /console/approvals) or
// one approval of any state (GET /console/approvals/{id}, the link in the
// client's keybrake_approval_required error), with approve and deny
// buttons while pending.
func (c *Console) serveApprovals(w http.ResponseWriter, r *http.Request, id string) {
	var rows []approvalRow
	if id == "" {
		var list struct {
			Data []approvalRow `json:"data"`
		}
		if err := c.admin(r.Context(), http.MethodGet, "/vault/approvals?state=pending", nil, &list); err != nil {
			c.fail(w, r, err)
			return
		}
		rows = list.Data
	} else {
		var a approvalRow
		if err := c.admin(r.Context(), http.MethodGet, "/vault/approvals/"+url.PathEscape(id), nil, &a); err != nil {
			c.fail(w, r, err)
			return
		}
		rows = []approvalRow{a}
	}
	flash := ""
	switch r.URL.Query().Get("decided") {
	case "approve":
		flash = "Approved: the client's retry with the same Idempotency-Key now goes through."
	case "deny":
		flash = "Denied: the client's retry is refused."
	}
	c.render(w, r, http.StatusOK, "approvals.html", page{Title: "Approvals", Nav: "approvals",
		Data: map[string]any{"Approvals": rows, "Flash": flash}})
}

// serveDecideApproval approves or denies through the admin API, so the
// decision is validated and audited exactly as POST
// /vault/approvals/{id}/approve|deny is.
func (c *Console) serveDecideApproval(w http.ResponseWriter, r *http.Request, id, action string) {
	if err := c.admin(r.Context(), http.MethodPost, "/vault/approvals/"+url.PathEscape(id)+"/"+action, nil, nil); err != nil {
		c.fail(w, r, err)
		return
	}
	http.Redirect(w, r, "/console/approvals/"+id+"?decided="+action, http.StatusSeeOther)
}

// validApprovalID matches the approval IDs the proxy issues.
func validApprovalID(s string) bool {
	rest, ok := strings.CutPrefix(s, "apr_")
	return ok && validID("vk_"+rest)
}
