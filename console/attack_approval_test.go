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

// TestAttackConsole_ApprovalHidesDestination: the console's approval page
// showed a transfer's operation, amount and key but not its destination,
// so an approver approved "$500 transfers.create" to whatever account the
// agent named. The page now lists the parameters the approval covers,
// escaped, with a client_secret masked (sent as metadata: a top-level
// client_secret is no parameter of transfers.create, and is refused).
func TestAttackConsole_ApprovalHidesDestination(t *testing.T) {
	s := MustConsole(t, nil)
	base := s.URL()
	_, secret := kbtest.VaultKey(t, base, `{"label":"agent","allowed_endpoints":["*"],"total_usd_cap":1000,"approval":{"above_usd":100}}`)
	form := url.Values{"amount": {"50000"}, "currency": {"usd"}, "destination": {"acct_1Attacker"},
		"description": {"<script>alert(1)</script>"}, "metadata[client_secret]": {"pi_1_secret_leak"}}
	req, _ := http.NewRequest("POST", base+"/v1/transfers", strings.NewReader(form.Encode()))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Idempotency-Key", "transfer-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusPaymentRequired {
		t.Fatalf("transfer: %d, want 402", resp.StatusCode)
	}
	c := newClient(t, base)
	c.signIn()
	for _, path := range []string{strings.TrimPrefix(resp.Header.Get("Keybrake-Approval-Url"), base), "/console/approvals"} {
		_, page := c.do("GET", path, nil, nil)
		row := regexp.MustCompile(`(?s)<th scope="row">Parameters</th><td class="params">(.*?)</td></tr>`).FindStringSubmatch(page)
		if row == nil {
			t.Fatalf("%s: no parameters row in %s", path, page)
		}
		if !strings.Contains(row[1], "<code>destination</code></dt><dd><code>acct_1Attacker</code>") {
			t.Errorf("%s: the destination is not shown: %s", path, row[1])
		}
		if strings.Contains(page, "<script>alert(1)") || !strings.Contains(row[1], "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("%s: the description is not escaped: %s", path, row[1])
		}
		if strings.Contains(page, "pi_1_secret_leak") || !strings.Contains(row[1], "<code>metadata[client_secret]</code></dt><dd><em>(not shown)</em>") {
			t.Errorf("%s: the client_secret is not masked: %s", path, row[1])
		}
	}
}
