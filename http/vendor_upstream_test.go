package http_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/keybrake/keybrake/twilio"
	"github.com/keybrake/keybrake/twiliosim"
)

// No header, path or host a client sends moves a vendor route to another
// upstream: the real credential goes only to the configured one.
func TestVendorUpstreamNotRedirectable(t *testing.T) {
	var hits atomic.Int64
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer evil.Close()
	eu, _ := url.Parse(evil.URL)
	e := MustOpenVendors(t)
	_, tw := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1"}`)
	_, rs := e.CreateKey(t, `{"vendor":"resend","daily_usd_cap":"1"}`)
	acct := "/twilio/2010-04-01/Accounts/" + twiliosim.DefaultAccountSid
	redirect := map[string]string{
		"Keybrake-Upstream": evil.URL, "X-Forwarded-Host": eu.Host, "Forwarded": "host=" + eu.Host,
		"X-Original-URL": evil.URL, "X-Rewrite-URL": evil.URL,
	}
	for _, tt := range []struct{ method, path, body, auth, ctype string }{
		{"POST", acct + "/Messages.json", "To=%2B14155550123&From=%2B14155550100&Body=hi", twilio.BasicAuth(twiliosim.DefaultAccountSid, tw), "application/x-www-form-urlencoded"},
		{"GET", acct + "/Messages.json", "", twilio.BasicAuth(twiliosim.DefaultAccountSid, tw), ""},
		{"GET", "/twilio//" + eu.Host + "/2010-04-01/Accounts/" + twiliosim.DefaultAccountSid + "/Messages.json", "", twilio.BasicAuth(twiliosim.DefaultAccountSid, tw), ""},
		{"GET", acct + "/Messages.json/..%2f..%2f..%2f" + eu.Host, "", twilio.BasicAuth(twiliosim.DefaultAccountSid, tw), ""},
		{"POST", "/resend/emails", `{"from":"a@example.com","to":"b@x.com","subject":"s","text":"t"}`, "Bearer " + rs, "application/json"},
		{"GET", "/resend/emails", "", "Bearer " + rs, ""},
	} {
		h := map[string]string{"Authorization": tt.auth}
		for k, v := range redirect {
			h[k] = v
		}
		if tt.ctype != "" {
			h["Content-Type"] = tt.ctype
		}
		e.Do(t, tt.method, tt.path, tt.body, h)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("a client moved a vendor request to its own host %d times", n)
	}
	if n := len(e.Twilio.GroundTruth().Messages); n != 1 {
		t.Fatalf("twiliosim got %d messages, want the one sent", n)
	}
}
