package http_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twilio/twilio-go/client"
	api "github.com/twilio/twilio-go/rest/api/v2010"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/internal/simfault"
	"github.com/keybrake/keybrake/twilio"
	"github.com/keybrake/keybrake/twiliosim"
)

// TestAttackTwilio_GraphemeClusterSegments: Twilio splits a UCS-2 body
// into parts of 67 code units only between grapheme clusters (its own
// segment calculator never cuts one), so a letter carrying 33 combining
// marks (34 units) fills a part alone. keybrake packed code units and
// counted 24 segments ($0.48) for 47 such letters, which Twilio sends as
// 47 segments ($0.94): a $0.50 cap let $0.94 through in one message.
func TestAttackTwilio_GraphemeClusterSegments(t *testing.T) {
	// Twilio bills what the operator's rates say: the gap is the count.
	rates, err := twilio.ParseRates("US sms=0.0200 mms=0.0400 voice=0.1000")
	if err != nil {
		t.Fatal(err)
	}
	e := mustOpenVendorsSim(t, twiliosim.Options{Rates: rates})
	_, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"0.50"}`)
	zalgo := strings.Repeat("a"+strings.Repeat("\u0301", 33), 47) // 1,598 characters
	msg := (&api.CreateMessageParams{}).SetTo("+14155550123").SetFrom("+14155550100").SetBody(zalgo)
	_, err = e.TwilioClient(t, secret).Api.CreateMessage(msg)
	var te *client.TwilioRestError
	if err != nil && !(errors.As(err, &te) && te.Status == 429) {
		t.Fatalf("send: %v", err)
	}
	e.Clock.Advance(10 * time.Second)
	if b := e.Twilio.Billed(); b.Micros+b.Pending > 500_000 {
		t.Fatalf("Twilio billed $%s for %d messages (%d segments) past a $0.50 cap", b.Micros+b.Pending, b.Messages, b.Segments)
	}
	// What fits still goes: a short body of such letters.
	short := (&api.CreateMessageParams{}).SetTo("+14155550123").SetFrom("+14155550100").
		SetBody(strings.Repeat("a"+strings.Repeat("\u0301", 33), 3))
	if _, err := e.TwilioClient(t, secret).Api.CreateMessage(short); err != nil {
		t.Fatalf("3 segments under a $0.50 cap: %v", err)
	}
}

// TestAttackResend_ReplayPastIdempotencyWindow: the resolver replays a
// send whose answer was lost with its Idempotency-Key, which Resend
// remembers for 24 hours. While replays were answered 429 (Resend's rate
// limit, shared by every vault key, answers before its idempotency layer)
// the send stayed uncertain; the first replay that got through a day later
// was a new send: two emails went out and one was counted. Past the window
// it is no longer replayed, and stays counted.
func TestAttackResend_ReplayPastIdempotencyWindow(t *testing.T) {
	e := MustOpenVendors(t)
	id, secret := e.CreateKey(t, `{"vendor":"resend","daily_email_cap":5,"daily_usd_cap":1}`)
	if _, err := e.Resend.AddFault(simfault.Fault{Method: "POST", Path: "/emails", Mode: simfault.FailAfter, Count: 1}); err != nil {
		t.Fatal(err)
	}
	resp, body := e.Do(t, "POST", "/resend/emails", `{"from":"billing@example.com","to":"a@example.com","subject":"s","text":"t"}`,
		map[string]string{"Authorization": "Bearer " + secret, "Content-Type": "application/json"})
	if resp.StatusCode < 500 {
		t.Fatalf("send: %d %s, want the lost answer's 5xx", resp.StatusCode, body)
	}
	for range 25 {
		if _, err := e.Resend.AddFault(simfault.Fault{Method: "POST", Path: "/emails", Mode: simfault.FailBefore, Status: 429, Count: 1}); err != nil {
			t.Fatal(err)
		}
		e.Clock.Advance(time.Hour)
		e.resolvePass(t)
	}
	e.Clock.Advance(time.Hour)
	e.resolvePass(t)
	got := e.reservations(t, id)
	if n := e.Resend.Billed().Emails; n != 1 {
		t.Fatalf("resendsim sent %d emails for one send counted once (reservations %v)", n, got)
	}
	if got[keybrake.StateSettled] != 1 {
		t.Fatalf("reservations %v, want the send settled, counted", got)
	}
}

// TestAttackTwilio_SmartEncodingLengthens: Twilio's Smart Encoding
// replaces a tab with seven spaces (… with three full stops, ½ with 1/2)
// before it encodes the body. keybrake counted the body as sent: 200 tabs
// are 200 UCS-2 units, 3 segments ($0.06 under a $0.10 cap), which Twilio
// sent as 1,400 GSM-7 septets, 10 segments ($0.20).
func TestAttackTwilio_SmartEncodingLengthens(t *testing.T) {
	rates, err := twilio.ParseRates("US sms=0.0200 mms=0.0400 voice=0.1000")
	if err != nil {
		t.Fatal(err)
	}
	e := mustOpenVendorsSim(t, twiliosim.Options{Rates: rates})
	_, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"0.10"}`)
	msg := (&api.CreateMessageParams{}).SetTo("+14155550123").SetFrom("+14155550100").
		SetBody(strings.Repeat("\t", 200)).SetSmartEncoded(true)
	_, err = e.TwilioClient(t, secret).Api.CreateMessage(msg)
	var te *client.TwilioRestError
	if err != nil && !(errors.As(err, &te) && te.Status == 429) {
		t.Fatalf("send: %v", err)
	}
	e.Clock.Advance(10 * time.Second)
	if b := e.Twilio.Billed(); b.Micros+b.Pending > 100_000 {
		t.Fatalf("Twilio billed $%s for %d messages (%d segments) past a $0.10 cap", b.Micros+b.Pending, b.Messages, b.Segments)
	}
	// What fits still goes: 20 tabs, 140 septets, one segment.
	short := (&api.CreateMessageParams{}).SetTo("+14155550123").SetFrom("+14155550100").
		SetBody(strings.Repeat("\t", 20)).SetSmartEncoded(true)
	if _, err := e.TwilioClient(t, secret).Api.CreateMessage(short); err != nil {
		t.Fatalf("one segment under a $0.10 cap: %v", err)
	}
}

// TestAttackTwilio_RCSSegmentsByUTF8: a message through an RCS sender (or
// a Messaging Service with one in its pool) goes out as RCS, whose text
// Twilio bills in the United States by segments of 160 UTF-8 bytes at the
// SMS rate. keybrake counted SMS segments: 1,600 "é" are 11 GSM-7
// segments ($0.22 under a $0.30 cap) but 3,200 bytes, 20 RCS segments
// ($0.40).
func TestAttackTwilio_RCSSegmentsByUTF8(t *testing.T) {
	rates, err := twilio.ParseRates("US sms=0.0200 mms=0.0400 voice=0.1000")
	if err != nil {
		t.Fatal(err)
	}
	e := mustOpenVendorsSim(t, twiliosim.Options{Rates: rates})
	_, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"0.30"}`)
	msg := (&api.CreateMessageParams{}).SetTo("+14155550123").SetFrom("rcs:keybrake_agent").
		SetBody(strings.Repeat("é", 1600))
	_, err = e.TwilioClient(t, secret).Api.CreateMessage(msg)
	var te *client.TwilioRestError
	if err != nil && !(errors.As(err, &te) && te.Status == 429) {
		t.Fatalf("send: %v", err)
	}
	e.Clock.Advance(10 * time.Second)
	if b := e.Twilio.Billed(); b.Micros+b.Pending > 300_000 {
		t.Fatalf("Twilio billed $%s for %d messages (%d segments) past a $0.30 cap", b.Micros+b.Pending, b.Messages, b.Segments)
	}
	// What fits still goes: 400 bytes, 3 RCS segments.
	short := (&api.CreateMessageParams{}).SetTo("+14155550123").SetFrom("rcs:keybrake_agent").
		SetBody(strings.Repeat("é", 200))
	if _, err := e.TwilioClient(t, secret).Api.CreateMessage(short); err != nil {
		t.Fatalf("3 segments under a $0.30 cap: %v", err)
	}
}
