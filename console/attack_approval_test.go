package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/keybrake/keybrake/internal/kbtest"
)

// TestAttackConsole_UnpricedApprovalShownAsZero: an approval of an
// operation keybrake does not price (on a key with allow_unpriced whose
// approval policy names it) was shown to the approver as "0 minor units ·
// $0", an amount keybrake never knew: the approver read "nothing moves"
// and approved a request that may move any amount. It now says the
// request is not priced.
func TestAttackConsole_UnpricedApprovalShownAsZero(t *testing.T) {
	s := MustConsole(t, nil)
	base := s.URL()
	_, secret := kbtest.VaultKey(t, base, `{"label":"agent","allowed_endpoints":["*"],"allow_unpriced":true,"approval":{"operations":["topups.create"]}}`)
	form := url.Values{"amount": {"5000000"}, "currency": {"usd"}, "description": {"weekly top-up"}}
	req, _ := http.NewRequest("POST", base+"/v1/topups", strings.NewReader(form.Encode()))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Idempotency-Key", "topup-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusPaymentRequired {
		t.Fatalf("top-up: %d, want 402", resp.StatusCode)
	}
	link := resp.Header.Get("Keybrake-Approval-Url")
	c := newClient(t, base)
	c.signIn()
	_, page := c.do("GET", strings.TrimPrefix(link, base), nil, nil)
	amount := regexp.MustCompile(`(?s)<th scope="row">Amount</th><td>(.*?)</td>`).FindStringSubmatch(page)
	if amount == nil {
		t.Fatalf("no amount row in %s", page)
	}
	if strings.Contains(amount[1], "$0") || !strings.Contains(amount[1], "not priced") {
		t.Fatalf("the unpriced approval's amount reads %q", amount[1])
	}
}
