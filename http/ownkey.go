package http

import (
	"net/http"
)

// serveOwnKey answers GET /stripe/v1/keybrake/key: the calling vault key's
// own policy and remaining budget, so an agent can check before it spends.
func (p *proxy) serveOwnKey(w http.ResponseWriter, r *http.Request, c *call) {
	b, err := p.s.budget(r.Context(), c.key, p.s.Now())
	if err != nil {
		p.s.writeStripeError(w, r, storeError(err), nil)
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
}
