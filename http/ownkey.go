package http

import (
	"net/http"

	"github.com/keybrake/keybrake"
)

// serveOwnKey answers GET /stripe/v1/keybrake/key: the calling vault key's
// own policy and remaining budget, so an agent can check before it spends.
// Only the MCP tool's reads are audited.
func (p *proxy) serveOwnKey(w http.ResponseWriter, r *http.Request, c *call) {
	b, err := p.s.budget(r.Context(), c.key, p.s.Now())
	if err != nil {
		c.v.WriteError(w, r, c.storeError(err))
		return
	}
	if b.Total.Remaining != nil {
		w.Header().Set("Keybrake-Remaining-Usd", b.Total.Remaining.String())
	}
	if b.Daily.Remaining != nil {
		w.Header().Set("Keybrake-Daily-Remaining-Usd", b.Daily.Remaining.String())
	}
	if b.Monthly.Remaining != nil {
		w.Header().Set("Keybrake-Monthly-Remaining-Usd", b.Monthly.Remaining.String())
	}
	writeJSON(w, http.StatusOK, keyView{Key: present(c.key), Object: "vault_key", Budget: b})
	if _, ok := originOf(r.Context()); ok {
		// The MCP tool keybrake_budget is audited like every tool call, so
		// a session's log is complete; REST clients poll this endpoint, and
		// their reads are not recorded.
		p.audit(r, c, keybrake.DecisionAllow, "", 0, "")
	}
}
