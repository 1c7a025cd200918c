package http_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	resendgo "github.com/resend/resend-go/v3"
	"github.com/twilio/twilio-go/client"
	api "github.com/twilio/twilio-go/rest/api/v2010"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/twilio"
)

// TestCaps200SDK: 200 concurrent sends through twilio-go and resend-go
// against one USD cap or count cap (daily or monthly) pass exactly as many
// as fit. The simulators' ground truth (messages and calls twiliosim
// created, emails resendsim billed) equals what keybrake counted and never
// exceeds the cap. On SQLite and PostgreSQL.
func TestCaps200SDK(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) { testCaps200SDK(t, MustOpenVendors(t)) })
	t.Run("Postgres", func(t *testing.T) {
		testCaps200SDK(t, MustOpenVendors(t, func(s *khttp.Server) { s.Store = kbtest.Postgres(t) }))
	})
}

const concurrentSends = 200

// hammer runs send concurrentSends times at once and returns how many
// succeeded; every failure must be a cap's refusal.
func hammer(t *testing.T, send func(i int) error, refused func(error) bool) int64 {
	t.Helper()
	var ok atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range concurrentSends {
		wg.Go(func() {
			<-start
			err := send(i)
			switch {
			case err == nil:
				ok.Add(1)
			case !refused(err):
				t.Errorf("send %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	return ok.Load()
}

func testCaps200SDK(t *testing.T, e *VendorEnv) {
	twilioRefused := func(err error) bool { return isTwilio429(err) }
	resendRefused := func(err error) bool {
		var rl *resendgo.RateLimitError
		return errors.As(err, &rl)
	}
	for _, tt := range []struct {
		name, key string
		want      int64
		kind      string // the count kind, "" for a USD cap
		monthly   bool
	}{
		// One-segment US SMS at $0.02: $1 holds 50.
		{"TwilioDailyUSD", `{"vendor":"twilio","daily_usd_cap":1}`, 50, "", false},
		{"TwilioMonthlyUSD", `{"vendor":"twilio","monthly_usd_cap":"0.9"}`, 45, "", false},
		{"TwilioDailyMessages", `{"vendor":"twilio","daily_message_cap":60,"daily_usd_cap":100}`, 60, keybrake.CountMessages, false},
		{"TwilioMonthlyMessages", `{"vendor":"twilio","monthly_message_cap":70,"daily_message_cap":150}`, 70, keybrake.CountMessages, true},
		// Inline-TwiML calls of 60 s at $0.10 a minute.
		{"TwilioDailyCalls", `{"vendor":"twilio","allowed_endpoints":["calls.create"],"daily_call_cap":30,"daily_usd_cap":100}`, 30, keybrake.CountCalls, false},
		{"TwilioMonthlyCalls", `{"vendor":"twilio","allowed_endpoints":["calls.create"],"monthly_call_cap":35,"daily_usd_cap":100}`, 35, keybrake.CountCalls, true},
		// One-recipient emails at $0.0015: $0.15 holds 100.
		{"ResendDailyUSD", `{"vendor":"resend","daily_usd_cap":"0.15"}`, 100, "", false},
		{"ResendDailyEmails", `{"vendor":"resend","daily_email_cap":80}`, 80, keybrake.CountEmails, false},
		{"ResendMonthlyEmails", `{"vendor":"resend","monthly_email_cap":90,"daily_email_cap":1000}`, 90, keybrake.CountEmails, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			id, secret := e.CreateKey(t, tt.key)
			gt := func() int64 {
				g := e.Twilio.GroundTruth()
				return int64(len(g.Messages)+len(g.Calls)) + int64(e.Resend.Billed().Emails)
			}
			before := gt()
			var ok int64
			switch {
			case tt.kind == keybrake.CountCalls:
				tw := e.TwilioClient(t, secret)
				ok = hammer(t, func(i int) error {
					_, err := tw.Api.CreateCall((&api.CreateCallParams{}).SetTo(fmt.Sprintf("+1415555%04d", i)).SetFrom("+14155550100").
						SetTwiml("<Response><Say>Your code is 1 2 3</Say></Response>").SetTimeLimit(60))
					return err
				}, twilioRefused)
			case strings.Contains(tt.key, `"vendor":"twilio"`):
				tw := e.TwilioClient(t, secret)
				ok = hammer(t, func(i int) error {
					_, err := tw.Api.CreateMessage(sms(fmt.Sprintf("+1415555%04d", i)))
					return err
				}, twilioRefused)
			default:
				rs := e.ResendClient(t, secret)
				ok = hammer(t, func(i int) error {
					_, err := rs.Emails.Send(&resendgo.SendEmailRequest{From: "billing@example.com", To: []string{fmt.Sprintf("a%d@x.com", i)}, Subject: "Invoice", Text: "hi"})
					return err
				}, resendRefused)
			}
			sent := gt() - before
			if ok != tt.want || sent != tt.want {
				t.Fatalf("%d sends passed and the simulator sent %d; want exactly %d", ok, sent, tt.want)
			}
			if tt.kind != "" {
				c := keyCounts(t, e.Env, id)[tt.kind]
				counted := c.Used
				if tt.monthly {
					counted = c.Monthly.Used
				}
				if counted != sent {
					t.Fatalf("keybrake counted %d %s, the simulator sent %d", counted, tt.kind, sent)
				}
			} else if sp := e.Spend(t, id); sp.Day < keybrake.Micros(tt.want)*keybrake.Micros(priceOf(tt.name)) {
				t.Fatalf("keybrake counted %s for %d sends", sp.Day, sent)
			}
		})
	}
}

func isTwilio429(err error) bool {
	var te *client.TwilioRestError
	return errors.As(err, &te) && te.Status == 429 && te.Code == twilio.CodeTooManyRequests
}

// priceOf is what one send of a case costs, in micros.
func priceOf(name string) int64 {
	if name[:6] == "Resend" {
		return 1500
	}
	return 20000
}
