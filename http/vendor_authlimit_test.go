package http_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	resendgo "github.com/resend/resend-go/v3"

	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/twilio"
	"github.com/keybrake/keybrake/twiliosim"
)

// After three bad vault keys a client is locked out on every route; on
// /twilio and /resend the 429 is the vendor's own, with Retry-After, and
// even a good key is refused until it ends.
func TestVendorAuthLockoutInVendorShape(t *testing.T) {
	e := MustOpenVendors(t, func(s *khttp.Server) { s.AuthFailures = khttp.AuthLimit{Burst: 3, Every: time.Hour} })
	_, twSecret := e.CreateKey(t, `{"vendor":"twilio"}`)
	_, rsSecret := e.CreateKey(t, `{"vendor":"resend"}`)
	for i := 0; i < 3; i++ {
		_, err := e.TwilioClient(t, "vault_key_nope"+strings.Repeat("x", i)).Api.CreateMessage(sms("+14155550123"))
		twilioErr(t, err, 401, twilio.CodeAuthenticate)
	}
	t.Run("Twilio", func(t *testing.T) {
		_, err := e.TwilioClient(t, twSecret).Api.CreateMessage(sms("+14155550123"))
		twilioErr(t, err, 429, twilio.CodeTooManyRequests)
		resp, body := e.Do(t, "GET", "/twilio/2010-04-01/Accounts/"+twiliosim.DefaultAccountSid+"/Messages.json", "",
			map[string]string{"Authorization": twilio.BasicAuth(twiliosim.DefaultAccountSid, twSecret)})
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), `"more_info":"https://www.twilio.com/docs/errors/20429"`) {
			t.Fatalf("%d Retry-After=%q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	})
	t.Run("Resend", func(t *testing.T) {
		_, err := e.ResendClient(t, rsSecret).Emails.Send(&resendgo.SendEmailRequest{From: "a@example.com", To: []string{"b@x.com"}, Subject: "s", Text: "t"})
		var rl *resendgo.RateLimitError
		if !errors.As(err, &rl) {
			t.Fatalf("err = %v (%T), want a RateLimitError", err, err)
		}
		resp, body := e.Do(t, "GET", "/resend/emails", "", map[string]string{"Authorization": "Bearer " + rsSecret})
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), `"name":"rate_limit_exceeded"`) || !strings.Contains(string(body), `"statusCode":429`) {
			t.Fatalf("%d Retry-After=%q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	})
	if n := len(e.Twilio.GroundTruth().Messages) + len(e.Resend.GroundTruth().Emails); n != 0 {
		t.Fatalf("a locked-out client sent %d", n)
	}
}
