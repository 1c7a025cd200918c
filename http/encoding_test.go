package http_test

import (
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/keybrake/keybrake/twilio"
	"github.com/keybrake/keybrake/twiliosim"
)

// TestContentEncodingRefusedForEveryVendor: a body sent with a
// Content-Encoding other than identity is refused before it is parsed,
// whichever vendor it is for, with a message naming the body that vendor
// takes; the bodies are valid as sent, so only the header refuses them.
// identity passes.
func TestContentEncodingRefusedForEveryVendor(t *testing.T) {
	e := MustOpenVendors(t)
	stripeID, stripeSecret := e.CreateKey(t, `{"daily_usd_cap":100}`)
	twilioID, twilioSecret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"5"}`)
	resendID, resendSecret := e.CreateKey(t, `{"vendor":"resend","daily_usd_cap":"5"}`)
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte(twiliosim.DefaultAccountSid+":"+twilio.AlnumVaultKey(twilioSecret)))
	vendors := []struct {
		name, keyID, path, body string
		headers                 map[string]string
		kind                    string
	}{
		{"Stripe", stripeID, "/stripe/v1/charges", charge,
			map[string]string{"Authorization": "Bearer " + stripeSecret}, "form body"},
		{"Twilio", twilioID, "/twilio/2010-04-01/Accounts/" + twiliosim.DefaultAccountSid + "/Messages.json", "To=%2B14155550123&From=%2B14155550100&Body=hi",
			map[string]string{"Authorization": basic}, "form body"},
		{"Resend", resendID, "/resend/emails", `{"from":"a@example.com","to":"b@x.com","subject":"s","text":"t"}`,
			map[string]string{"Authorization": "Bearer " + resendSecret, "Content-Type": "application/json"}, "JSON body"},
	}
	for _, v := range vendors {
		t.Run(v.name, func(t *testing.T) {
			for _, tc := range []struct {
				name  string
				lines []string // Content-Encoding lines
				want  string   // in the message
			}{
				{"ErrGzip", []string{"gzip"}, "keybrake does not read gzip-encoded bodies; send the " + v.kind + " uncompressed"},
				{"ErrBrUpperCase", []string{"BR"}, "send the " + v.kind + " uncompressed"},
				{"ErrIdentityThenGzip", []string{"identity, gzip"}, "send the " + v.kind + " uncompressed"},
				{"ErrRepeated", []string{"identity", "identity"}, "sent 2 times"},
				{"ErrEmpty", []string{" "}, "header is empty"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					req, _ := http.NewRequest("POST", e.Server.URL()+v.path, strings.NewReader(v.body))
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
					for k, h := range v.headers {
						req.Header.Set(k, h)
					}
					for _, l := range tc.lines {
						req.Header.Add("Content-Encoding", l)
					}
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode/100 != 4 || !strings.Contains(string(body), tc.want) || !strings.Contains(string(body), "Content-Encoding") {
						t.Fatalf("%s with Content-Encoding %q: %d %s; want a 4xx saying %q", v.name, tc.lines, resp.StatusCode, body, tc.want)
					}
				})
			}
			if sp := e.Spend(t, v.keyID); sp.Day != 0 {
				t.Fatalf("refused requests spent %+v", sp)
			}
			// identity is no encoding: the same request goes through.
			h := map[string]string{"Content-Encoding": "identity"}
			for k, x := range v.headers {
				h[k] = x
			}
			if resp, body := e.Do(t, "POST", v.path, v.body, h); resp.StatusCode/100 != 2 {
				t.Fatalf("Content-Encoding: identity: %d %s", resp.StatusCode, body)
			}
		})
	}
	if n, m := len(e.Twilio.GroundTruth().Messages), len(e.Resend.GroundTruth().Emails); n != 1 || m != 1 {
		t.Fatalf("%d messages and %d emails sent, want only the identity ones", n, m)
	}
}
