package stripesim

import (
	"net/http"
	"strings"
)

// accountOf returns the connected account a request acts on: the
// Stripe-Account header, or Stripe-Context, which Stripe's newer SDKs send
// for the same purpose. Both may be sent if they agree; a Stripe-Context
// that is not a single acct_ id, or one that contradicts Stripe-Account, is
// a 400.
func accountOf(r *http.Request) (string, *apiError) {
	account := strings.TrimSpace(r.Header.Get("Stripe-Account"))
	sctx := strings.TrimSpace(r.Header.Get("Stripe-Context"))
	switch {
	case sctx == "":
		return account, nil
	case !strings.HasPrefix(sctx, "acct_") || strings.ContainsAny(sctx, "/ "):
		return "", invalid("", "", "Invalid Stripe-Context header: %q. The simulator accepts a single connected account id (acct_…).", sctx)
	case account != "" && account != sctx:
		return "", invalid("", "", "The Stripe-Account header (%s) and the Stripe-Context header (%s) name different accounts. Send one of them, or the same account in both.", account, sctx)
	}
	return sctx, nil
}
