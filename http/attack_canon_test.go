package http_test

import (
	"testing"
)

// keybrake names and scopes a request by its decoded segments (cus%5F1 is
// the customer cus_1), but forwarded the still-escaped path as if it were
// decoded, so Go escaped it again and Stripe was sent cus%255F1: another
// object than the one keybrake checked against the key's scope. The path
// forwarded must be the path named.
func TestAttackCanon_ForwardedPathIsNamedPath(t *testing.T) {
	e, u := MustOpenRecorded(t)
	_, secret := e.CreateKey(t, `{"daily_usd_cap":100,"allowed_endpoints":["*"]}`)
	auth := Header{"Authorization", "Bearer " + secret}
	for _, p := range []string{"/v1/customers/cus%5F1", "/v1/customers/cus_1%3Bx", "/v1/customers/a%22b", "/v1/customers/cus_1;x"} {
		before := u.Count()
		e.DoRaw(t, "GET", "/stripe"+p, "", auth)
		if u.Count() == before {
			t.Fatalf("%s: nothing went upstream", p)
		}
		if got := u.Last(t).URL.EscapedPath(); got != p {
			t.Errorf("named %s, forwarded %s", p, got)
		}
	}
}
