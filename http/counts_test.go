package http_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	resendgo "github.com/resend/resend-go/v3"
	"github.com/twilio/twilio-go/client"

	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/twilio"
)

// TestCountCapsSDK: the daily message and email caps are exact under 50
// concurrent sends through twilio-go and resend-go, a batch counts all its
// emails or none, nothing over a cap reaches the vendor, and a new day in
// the key's zone starts at zero. On SQLite and PostgreSQL.
func TestCountCapsSDK(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) { testCountCapsSDK(t, MustOpenVendors(t)) })
	t.Run("Postgres", func(t *testing.T) {
		testCountCapsSDK(t, MustOpenVendors(t, func(s *khttp.Server) { s.Store = kbtest.Postgres(t) }))
	})
}

func testCountCapsSDK(t *testing.T, e *VendorEnv) {
	t.Run("TwilioMessages", func(t *testing.T) {
		id, secret := e.CreateKey(t, `{"vendor":"twilio","daily_message_cap":20,"daily_usd_cap":100}`)
		tw := e.TwilioClient(t, secret)
		var ok, refused atomic.Int64
		var wg sync.WaitGroup
		for i := range 50 {
			wg.Go(func() {
				_, err := tw.Api.CreateMessage(sms(fmt.Sprintf("+1415555%04d", i)))
				var te *client.TwilioRestError
				switch {
				case err == nil:
					ok.Add(1)
				case errors.As(err, &te) && te.Status == 429 && te.Code == twilio.CodeTooManyRequests && strings.Contains(te.Message, "daily cap of 20 messages"):
					refused.Add(1)
				default:
					t.Errorf("send %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		if ok.Load() != 20 || refused.Load() != 30 {
			t.Fatalf("sent %d, refused %d; want 20 and 30", ok.Load(), refused.Load())
		}
		if n := len(e.Twilio.GroundTruth().Messages); n != 20 {
			t.Fatalf("twiliosim created %d messages, want 20", n)
		}
		c := keyCounts(t, e.Env, id)["messages"]
		if c.Cap == nil || *c.Cap != 20 || c.Used != 20 || c.Remaining == nil || *c.Remaining != 0 {
			t.Fatalf("budget counts.messages = %+v", c)
		}
	})

	t.Run("ResendBatches", func(t *testing.T) {
		id, secret := e.CreateKey(t, `{"vendor":"resend","daily_email_cap":31}`)
		rs := e.ResendClient(t, secret)
		mail := func(to string) *resendgo.SendEmailRequest {
			return &resendgo.SendEmailRequest{From: "Acme <billing@example.com>", To: []string{to}, Subject: "Invoice", Text: "hi"}
		}
		before := e.Resend.Billed().Emails
		var ok, refused atomic.Int64
		var wg sync.WaitGroup
		for i := range 50 {
			wg.Go(func() {
				_, err := rs.Batch.Send([]*resendgo.SendEmailRequest{mail(fmt.Sprintf("a%d@x.com", i)), mail(fmt.Sprintf("b%d@x.com", i)), mail(fmt.Sprintf("c%d@x.com", i))})
				var rl *resendgo.RateLimitError
				switch {
				case err == nil:
					ok.Add(1)
				case errors.As(err, &rl):
					refused.Add(1)
				default:
					t.Errorf("batch %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		if ok.Load() != 10 || refused.Load() != 40 {
			t.Fatalf("batches sent %d, refused %d; want 10 and 40", ok.Load(), refused.Load())
		}
		if n := e.Resend.Billed().Emails - before; n != 30 {
			t.Fatalf("resendsim sent %d emails, want 30", n)
		}
		// One more fits exactly; then the cap is full.
		if _, err := rs.Emails.Send(mail("last@x.com")); err != nil {
			t.Fatalf("the 31st email: %v", err)
		}
		resp, body := e.Do(t, "POST", "/resend/emails", `{"from":"billing@example.com","to":"z@x.com","subject":"s","text":"t"}`,
			map[string]string{"Authorization": "Bearer " + secret, "Content-Type": "application/json"})
		if resp.StatusCode != 429 || !strings.Contains(string(body), "daily cap of 31 emails") || !strings.Contains(string(body), `"statusCode":429`) {
			t.Fatalf("over the email cap: %d %s", resp.StatusCode, body)
		}
		if c := keyCounts(t, e.Env, id)["emails"]; c.Used != 31 {
			t.Fatalf("budget counts.emails = %+v, want 31 used", c)
		}
		// The key's day ends; the count starts again.
		e.Clock.Advance(24 * time.Hour)
		if _, err := rs.Emails.Send(mail("tomorrow@x.com")); err != nil {
			t.Fatalf("first email of a new day: %v", err)
		}
		if c := keyCounts(t, e.Env, id)["emails"]; c.Used != 1 || *c.Remaining != 30 {
			t.Fatalf("new day counts.emails = %+v", c)
		}
	})
}

type countView struct {
	Cap       *int64     `json:"cap"`
	Used      int64      `json:"used"`
	Remaining *int64     `json:"remaining"`
	ResetsAt  time.Time  `json:"resets_at"`
	Monthly   *countView `json:"monthly"`
}

func keyCounts(tb testing.TB, e *Env, id string) map[string]countView {
	tb.Helper()
	resp, body := e.Admin(tb, "GET", "/vault/keys/"+id, "")
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET key: %d %s", resp.StatusCode, body)
	}
	var v struct {
		Budget struct {
			Counts map[string]countView `json:"counts"`
		} `json:"budget"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		tb.Fatal(err)
	}
	return v.Budget.Counts
}

// TestCountCapsAdmin: the count caps are whole numbers or null, only on
// keys whose vendor counts that kind; an update changes only the caps it
// names; the key view shows them.
func TestCountCapsAdmin(t *testing.T) {
	e := MustOpenVendors(t)
	for name, body := range map[string]string{
		"Negative":      `{"vendor":"twilio","daily_message_cap":-1}`,
		"Fraction":      `{"vendor":"twilio","daily_message_cap":1.5}`,
		"TrailingZero":  `{"vendor":"twilio","daily_message_cap":2.0}`,
		"Exponent":      `{"vendor":"twilio","daily_message_cap":1e3}`,
		"String":        `{"vendor":"twilio","daily_message_cap":"5"}`,
		"Bool":          `{"vendor":"twilio","daily_call_cap":true}`,
		"Huge":          `{"vendor":"twilio","daily_call_cap":99999999999999999999}`,
		"StripeKey":     `{"daily_message_cap":5}`,
		"ResendMessage": `{"vendor":"resend","daily_message_cap":5}`,
		"TwilioEmail":   `{"vendor":"twilio","daily_email_cap":5}`,
	} {
		if resp, out := e.Admin(t, "POST", "/vault/keys", body); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(out), "_cap") {
			t.Errorf("%s: %d %s", name, resp.StatusCode, out)
		}
	}
	id, _ := e.CreateKey(t, `{"vendor":"twilio","daily_message_cap":0,"daily_call_cap":3}`)
	resp, out := e.Admin(t, "PATCH", "/vault/keys/"+id, `{"daily_call_cap":null}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("update: %d %s", resp.StatusCode, out)
	}
	var k struct {
		Messages *int64 `json:"daily_message_cap"`
		Calls    *int64 `json:"daily_call_cap"`
		Emails   *int64 `json:"daily_email_cap"`
	}
	if err := json.Unmarshal(out, &k); err != nil || k.Messages == nil || *k.Messages != 0 || k.Calls != nil || k.Emails != nil {
		t.Fatalf("after removing the call cap: %s", out)
	}
	if resp, out := e.Admin(t, "PATCH", "/vault/keys/"+id, `{"daily_email_cap":1}`); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("email cap on a Twilio key by update: %d %s", resp.StatusCode, out)
	}
	// A message cap of 0 refuses every message, before Twilio hears of it.
	_, secret := e.CreateKey(t, `{"vendor":"twilio","daily_message_cap":0}`)
	_, err := e.TwilioClient(t, secret).Api.CreateMessage(sms("+14155550199"))
	twilioErr(t, err, 429, twilio.CodeTooManyRequests)
	if n := len(e.Twilio.GroundTruth().Messages); n != 0 {
		t.Fatalf("twiliosim created %d messages", n)
	}
}

// TestCountCapsNoChildren: a child's sends would not count against its
// parent's count caps, so a count-capped key mints no children.
func TestCountCapsNoChildren(t *testing.T) {
	e := MustOpenVendors(t)
	id, _ := e.CreateKey(t, `{"vendor":"twilio","daily_message_cap":5,"total_usd_cap":10,"mint":true}`)
	resp, out := e.Admin(t, "POST", "/vault/keys/"+id+"/children", `{"label":"child"}`)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(out), "count caps") {
		t.Fatalf("mint from a count-capped key: %d %s", resp.StatusCode, out)
	}
}
