package console_test

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/keybrake/keybrake/internal/kbtest"
)

// TestApprovalsPage follows the link of a keybrake_approval_required error
// to the console, approves there with the session's CSRF token, and sees
// the client's retry go through.
func TestApprovalsPage(t *testing.T) {
	s := MustConsole(t, nil)
	_, secret := kbtest.VaultKey(t, s.URL(), `{"total_usd_cap":1000,"approval":{"above_usd":100}}`)
	charge := func() (*http.Response, string) {
		req, _ := http.NewRequest("POST", s.URL()+"/v1/charges", strings.NewReader("amount=25000&currency=usd&source=tok_visa"))
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Idempotency-Key", "refund-run-7")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		return resp, b.String()
	}
	resp, body := charge()
	link := resp.Header.Get("Keybrake-Approval-Url")
	if resp.StatusCode != http.StatusPaymentRequired || !strings.Contains(body, "keybrake_approval_required") || link == "" {
		t.Fatalf("first request: %d %s", resp.StatusCode, body)
	}
	path := link[strings.Index(link, "/console/"):]
	id := resp.Header.Get("Keybrake-Approval-Id")

	c := newClient(t, s.URL())
	csrf := c.signIn()
	_, page := c.do("GET", "/console/approvals", nil, nil)
	if !strings.Contains(page, id) || !strings.Contains(page, "Approve") {
		t.Fatalf("pending list lacks %s", id)
	}
	if r, _ := c.do("POST", path+"/approve", url.Values{}, nil); r.StatusCode != http.StatusForbidden {
		t.Fatalf("approve without CSRF: %d", r.StatusCode)
	}
	if r, _ := c.do("POST", path+"/approve", url.Values{"csrf": {csrf}}, nil); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("approve: %d", r.StatusCode)
	}
	_, page = c.do("GET", path, nil, nil)
	if !regexp.MustCompile(`approved`).MatchString(page) || strings.Contains(page, ">Approve<") {
		t.Fatalf("approval page after approving: %s", page)
	}
	if resp, body := charge(); resp.StatusCode != http.StatusOK {
		t.Fatalf("approved retry: %d %s", resp.StatusCode, body)
	}
}
