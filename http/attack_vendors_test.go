package http_test

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twilio/twilio-go/client"
	api "github.com/twilio/twilio-go/rest/api/v2010"

	"github.com/keybrake/keybrake/twilio"
	"github.com/keybrake/keybrake/twiliosim"
)

// TestAttackTwilio_MMSConvertedToSMS: an MMS to a number whose carrier
// takes no MMS is sent by Twilio's MMS Converter (on by default) as an SMS
// of the body and a link, billed by the segment. A key holder who picks
// such a number and a long Unicode body had it reserved as one MMS ($0.04)
// while Twilio billed 16 segments: a $0.10 cap let $0.35 through.
func TestAttackTwilio_MMSConvertedToSMS(t *testing.T) {
	e := mustOpenVendorsSim(t, twiliosim.Options{NoMMS: []string{"+1415555"}})
	_, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"0.10"}`)
	tw := e.TwilioClient(t, secret)
	long := (&api.CreateMessageParams{}).SetTo("+14155550123").SetFrom("+14155550100").
		SetBody(strings.Repeat("ж", 1000)).SetMediaUrl([]string{"https://example.com/a.png"})
	for i := 0; i < 3; i++ {
		_, err := tw.Api.CreateMessage(long)
		var te *client.TwilioRestError
		if err != nil && !(errors.As(err, &te) && te.Status == 429) {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	e.Clock.Advance(10 * time.Second)
	if b := e.Twilio.Billed(); b.Micros+b.Pending > 100_000 {
		t.Fatalf("Twilio billed $%s for %d messages (%d segments) past a $0.10 cap", (b.Micros + b.Pending), b.Messages, b.Segments)
	}
}

// TestAttackTwilio_SendAsMmsSpelling: SendAsMms=True was priced as an SMS
// segment, though Twilio may read it as true and bill an MMS.
func TestAttackTwilio_SendAsMmsSpelling(t *testing.T) {
	e := MustOpenVendors(t)
	_, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1"}`)
	for _, v := range []string{"True", "1", "TRUE", ""} {
		resp, body := e.Do(t, "POST", "/twilio/2010-04-01/Accounts/"+twiliosim.DefaultAccountSid+"/Messages.json",
			"To=%2B14155550123&From=%2B14155550100&Body=hi&SendAsMms="+v,
			map[string]string{"Authorization": basicAuth(twiliosim.DefaultAccountSid, secret), "Content-Type": "application/x-www-form-urlencoded"})
		if resp.StatusCode != 400 || !strings.Contains(string(body), "SendAsMms") {
			t.Fatalf("SendAsMms=%q: %d %s", v, resp.StatusCode, body)
		}
	}
	if n := len(e.Twilio.GroundTruth().Messages); n != 0 {
		t.Fatalf("twiliosim sent %d messages", n)
	}
}

// basicAuth is the Authorization header of a Twilio client sending a vault
// key.
func basicAuth(user, secret string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+twilio.AlnumVaultKey(secret)))
}
