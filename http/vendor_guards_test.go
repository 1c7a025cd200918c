package http_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/keybrake/keybrake/twilio"
)

// One request path: the guards a Stripe key has apply to Twilio keys too,
// refused in Twilio's shape and before anything is sent.
func TestVendorGuards(t *testing.T) {
	e := MustOpenVendors(t)
	t.Run("ErrTwilioVelocity", func(t *testing.T) {
		_, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"10","guards":{"velocity":[{"name":"three_an_hour","per":"key","limit":3,"window_seconds":3600}]}}`)
		tw := e.TwilioClient(t, secret)
		for i := range 3 {
			if _, err := tw.Api.CreateMessage(sms(fmt.Sprintf("+1415555%04d", i))); err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		}
		_, err := tw.Api.CreateMessage(sms("+14155550999"))
		twilioErr(t, err, 429, twilio.CodeTooManyRequests)
		if n := len(e.Twilio.GroundTruth().Messages); n != 3 {
			t.Fatalf("twiliosim created %d messages, want 3", n)
		}
	})
	t.Run("ErrTwilioBreakerSuspends", func(t *testing.T) {
		id, secret := e.CreateKey(t, `{"vendor":"twilio","per_request_usd_cap":"0.01","guards":{"breaker":{"refusal_burst":3,"refusal_window_seconds":60}}}`)
		tw := e.TwilioClient(t, secret)
		for i := range 3 {
			_, err := tw.Api.CreateMessage(sms(fmt.Sprintf("+1415556%04d", i))) // $0.02 > $0.01
			twilioErr(t, err, 429, twilio.CodeTooManyRequests)
		}
		_, err := e.TwilioClient(t, secret).Api.CreateMessage(sms("+14155550111"))
		twilioErr(t, err, 403, twilio.CodeForbidden)
		if k, err := e.Store.FindKeyByID(t.Context(), id); err != nil || k.SuspendedAt == nil {
			t.Fatalf("key %s not suspended after a refusal burst", id)
		}
		if n := len(e.Twilio.GroundTruth().Messages); n != 3 {
			t.Fatalf("twiliosim created %d messages, want the velocity subtest's 3", n)
		}
	})
	t.Run("ErrTwilioApprovalHasNoKeyToMatch", func(t *testing.T) {
		_, secret := e.CreateKey(t, `{"vendor":"twilio","total_usd_cap":"10","approval":{"above_usd":"0.01"}}`)
		_, err := e.TwilioClient(t, secret).Api.CreateMessage(sms("+14155550222"))
		twilioErr(t, err, 403, twilio.CodeForbidden)
	})
	t.Run("ResendApprovalRequired", func(t *testing.T) {
		_, secret := e.CreateKey(t, `{"vendor":"resend","total_usd_cap":"10","approval":{"above_usd":"0.001"}}`)
		before := len(e.Resend.GroundTruth().Emails)
		resp, body := e.Do(t, "POST", "/resend/emails", `{"from":"a@example.com","to":"b@x.com","subject":"s","text":"t"}`,
			map[string]string{"Authorization": "Bearer " + secret, "Content-Type": "application/json", "Idempotency-Key": "approve-me-1"})
		if resp.StatusCode != 402 || resp.Header.Get("Keybrake-Approval-Id") == "" || !strings.Contains(string(body), `"name":"approval_required"`) {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		if n := len(e.Resend.GroundTruth().Emails); n != before {
			t.Fatalf("an email waiting for approval was sent")
		}
	})
}
