package http_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	api "github.com/twilio/twilio-go/rest/api/v2010"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/internal/simfault"
	"github.com/keybrake/keybrake/twilio"
	"github.com/keybrake/keybrake/twiliosim"
)

// pastLookupWindow is when a lost Twilio create is looked up: after the
// upstream timeout (80 s by default) and the lookup's margins.
const pastLookupWindow = 5 * time.Minute

// lose makes the next n Twilio creates lose their answer: cut after
// Twilio created the message (created) or a 500 before it did (!created).
func (e *VendorEnv) lose(tb testing.TB, n int, created bool) {
	tb.Helper()
	mode := simfault.FailBefore
	if created {
		mode = simfault.CutAfter
	}
	if _, err := e.Twilio.AddFault(simfault.Fault{Method: "POST", Path: "*", Mode: mode, Count: n}); err != nil {
		tb.Fatal(err)
	}
}

// reservations returns the key's reservations by state.
func (e *VendorEnv) reservations(tb testing.TB, keyID string) map[string]int {
	tb.Helper()
	rs, err := e.Store.FindReservations(context.Background(), keybrake.ReservationFilter{KeyID: keyID})
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]int{}
	for _, r := range rs {
		out[r.State]++
	}
	return out
}

// resolvePass runs one resolver pass.
func (e *VendorEnv) resolvePass(tb testing.TB) {
	tb.Helper()
	if _, err := e.Server.Resolve(context.Background()); err != nil {
		tb.Fatal(err)
	}
}

// simSend creates a message in twiliosim directly, with the real
// credentials: a send keybrake never saw.
func (e *VendorEnv) simSend(tb testing.TB, form url.Values) {
	tb.Helper()
	r := httptest.NewRequest("POST", "/2010-04-01/Accounts/"+twiliosim.DefaultAccountSid+"/Messages.json", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Authorization", twilio.BasicAuth(twiliosim.DefaultAccountSid, twiliosim.DefaultAuthToken))
	w := httptest.NewRecorder()
	e.Twilio.ServeHTTP(w, r)
	if w.Code != http.StatusCreated && w.Code != http.StatusOK {
		tb.Fatalf("direct send: %d %s", w.Code, w.Body)
	}
}

// settleAll moves the clock past the lookup window, resolves, lets Twilio
// price what it sent, and resolves again.
func (e *VendorEnv) settleAll(tb testing.TB) {
	tb.Helper()
	e.Clock.Advance(pastLookupWindow)
	e.resolvePass(tb)
	e.Clock.Advance(time.Minute)
	e.resolvePass(tb)
}

func TestTwilioLostAnswerFoundByLookup(t *testing.T) {
	e := MustOpenVendors(t)
	id, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1"}`)
	tw := e.TwilioClient(t, secret)
	e.lose(t, 1, true)
	_, err := tw.Api.CreateMessage(sms("+14155550123"))
	twilioErr(t, err, 503, twilio.CodeUnavailable)

	// Before the window closes nothing is decided, and Twilio is not asked.
	e.Clock.Advance(30 * time.Second)
	e.resolvePass(t)
	if got := e.reservations(t, id); got[keybrake.StateUncertain] != 1 {
		t.Fatalf("inside the window: %v, want uncertain", got)
	}
	e.settleAll(t)
	got := e.reservations(t, id)
	sp, billed := e.Spend(t, id), e.Twilio.Billed()
	if got[keybrake.StateSettled] != 1 || sp.Uncertain != 0 || sp.Held != 0 || sp.Day != billed.Micros || billed.Messages != 1 {
		t.Fatalf("reservations %v, spend %+v, twiliosim billed %+v", got, sp, billed)
	}
	rs, _ := e.Store.FindReservations(context.Background(), keybrake.ReservationFilter{KeyID: id})
	if truth := e.Twilio.GroundTruth().Messages; rs[0].ObjectID != truth[0].Sid {
		t.Fatalf("settled against %q, Twilio made %q", rs[0].ObjectID, truth[0].Sid)
	}
}

func TestTwilioLostAnswerNothingCreatedReleased(t *testing.T) {
	e := MustOpenVendors(t)
	id, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1"}`)
	tw := e.TwilioClient(t, secret)
	// An identical send that was answered claims its own message; the
	// lost one (a 500 before Twilio created anything) must not take it.
	if _, err := tw.Api.CreateMessage(sms("+14155550123")); err != nil {
		t.Fatal(err)
	}
	e.Clock.Advance(10 * time.Second)
	e.lose(t, 1, false)
	_, err := tw.Api.CreateMessage(sms("+14155550123"))
	twilioErr(t, err, 500, twilio.CodeInternal)
	e.settleAll(t)
	got := e.reservations(t, id)
	sp, billed := e.Spend(t, id), e.Twilio.Billed()
	if got[keybrake.StateReleased] != 1 || got[keybrake.StateSettled] != 1 || sp.Day != billed.Micros || billed.Messages != 1 {
		t.Fatalf("reservations %v, spend %+v, twiliosim billed %+v", got, sp, billed)
	}
}

func TestTwilioLostAnswersIdenticalSends(t *testing.T) {
	t.Run("OKBothCreated", func(t *testing.T) {
		e := MustOpenVendors(t)
		id, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1"}`)
		e.lose(t, 2, true)
		for i := 0; i < 2; i++ {
			_, err := e.TwilioClient(t, secret).Api.CreateMessage(sms("+14155550123"))
			twilioErr(t, err, 503, twilio.CodeUnavailable)
		}
		e.settleAll(t)
		rs, _ := e.Store.FindReservations(context.Background(), keybrake.ReservationFilter{KeyID: id})
		if len(rs) != 2 || rs[0].ObjectID == "" || rs[0].ObjectID == rs[1].ObjectID {
			t.Fatalf("two lost identical sends settled against %q and %q, want two distinct messages", rs[0].ObjectID, rs[1].ObjectID)
		}
		if sp, billed := e.Spend(t, id), e.Twilio.Billed(); sp.Day != billed.Micros || billed.Messages != 2 || sp.Uncertain != 0 {
			t.Fatalf("spend %+v, twiliosim billed %+v", sp, billed)
		}
	})
	t.Run("OKOneKeyOneCreated", func(t *testing.T) {
		e := MustOpenVendors(t)
		id, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1"}`)
		e.lose(t, 1, true)
		_, err := e.TwilioClient(t, secret).Api.CreateMessage(sms("+14155550123"))
		twilioErr(t, err, 503, twilio.CodeUnavailable)
		e.lose(t, 1, false)
		_, err = e.TwilioClient(t, secret).Api.CreateMessage(sms("+14155550123"))
		twilioErr(t, err, 500, twilio.CodeInternal)
		e.settleAll(t)
		got := e.reservations(t, id)
		if sp, billed := e.Spend(t, id), e.Twilio.Billed(); got[keybrake.StateSettled] != 1 || got[keybrake.StateReleased] != 1 || sp.Day != billed.Micros {
			t.Fatalf("reservations %v, spend %+v, twiliosim billed %+v", got, sp, billed)
		}
	})
	t.Run("UncertainTwoKeysOneCreated", func(t *testing.T) {
		// Which key's send reached Twilio cannot be known: both stay
		// counted in full rather than release the wrong one.
		e := MustOpenVendors(t)
		a, secretA := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1"}`)
		b, secretB := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1"}`)
		e.lose(t, 1, true)
		_, err := e.TwilioClient(t, secretA).Api.CreateMessage(sms("+14155550123"))
		twilioErr(t, err, 503, twilio.CodeUnavailable)
		e.lose(t, 1, false)
		_, err = e.TwilioClient(t, secretB).Api.CreateMessage(sms("+14155550123"))
		twilioErr(t, err, 500, twilio.CodeInternal)
		e.settleAll(t)
		if sa, sb := e.Spend(t, a), e.Spend(t, b); sa.Uncertain != 20000 || sb.Uncertain != 20000 {
			t.Fatalf("spend a %+v, b %+v: both must stay counted", sa, sb)
		}
	})
}

func TestTwilioLostAnswerBodyChangedStaysCounted(t *testing.T) {
	// A message to the same number from the same sender in the window,
	// with another body: Twilio may have altered this one's body, so
	// keybrake neither takes it nor releases.
	e := MustOpenVendors(t)
	id, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1"}`)
	e.lose(t, 1, false)
	_, err := e.TwilioClient(t, secret).Api.CreateMessage(sms("+14155550123"))
	twilioErr(t, err, 500, twilio.CodeInternal)
	e.simSend(t, url.Values{"To": {"+14155550123"}, "From": {"+14155550100"}, "Body": {"Sent from your Twilio trial account - Your code is 123456"}})
	e.settleAll(t)
	if got, sp := e.reservations(t, id), e.Spend(t, id); got[keybrake.StateUncertain] != 1 || sp.Uncertain != 20000 {
		t.Fatalf("reservations %v, spend %+v: want uncertain, counted", got, sp)
	}
}

func TestTwilioLostAnswerOtherTrafficIgnored(t *testing.T) {
	// Messages to other numbers, from other senders, or outside the window
	// neither match nor keep a lost create from being released.
	e := MustOpenVendors(t)
	id, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1"}`)
	e.simSend(t, url.Values{"To": {"+14155550123"}, "From": {"+14155550100"}, "Body": {"Your code is 123456"}})
	e.Clock.Advance(10 * time.Minute)
	e.lose(t, 1, false)
	_, err := e.TwilioClient(t, secret).Api.CreateMessage(sms("+14155550123"))
	twilioErr(t, err, 500, twilio.CodeInternal)
	e.simSend(t, url.Values{"To": {"+14155550199"}, "From": {"+14155550100"}, "Body": {"Your code is 123456"}})
	e.simSend(t, url.Values{"To": {"+14155550123"}, "From": {"+14155550101"}, "Body": {"Your code is 123456"}})
	e.settleAll(t)
	if got, sp := e.reservations(t, id), e.Spend(t, id); got[keybrake.StateReleased] != 1 || sp.Day != 0 {
		t.Fatalf("reservations %v, spend %+v: want released", got, sp)
	}
}

func TestTwilioLostAnswerUnnormalisedSenderStaysCounted(t *testing.T) {
	// The request wrote From as Twilio would not store it; a message to the
	// same number from that sender, as Twilio normalises it, may be this
	// one: keybrake neither takes it nor releases.
	e := MustOpenVendors(t)
	id, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1"}`)
	e.lose(t, 1, false)
	_, err := e.TwilioClient(t, secret).Api.CreateMessage(sms("+14155550123").SetFrom("+1 (415) 555-0100"))
	twilioErr(t, err, 500, twilio.CodeInternal)
	e.simSend(t, url.Values{"To": {"+14155550123"}, "From": {"+14155550100"}, "Body": {"Your code is 123456"}})
	e.settleAll(t)
	if got, sp := e.reservations(t, id), e.Spend(t, id); got[keybrake.StateUncertain] != 1 || sp.Uncertain != 20000 {
		t.Fatalf("reservations %v, spend %+v: want uncertain, counted", got, sp)
	}
}

func TestTwilioLostCallFoundByLookup(t *testing.T) {
	e := MustOpenVendors(t)
	id, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1","allowed_endpoints":["calls.create"]}`)
	e.lose(t, 1, true)
	_, err := e.TwilioClient(t, secret).Api.CreateCall((&api.CreateCallParams{}).SetTo("+14155550123").SetFrom("+14155550100").
		SetTwiml("<Response><Say>hi</Say></Response>").SetTimeLimit(120))
	twilioErr(t, err, 503, twilio.CodeUnavailable)
	e.settleAll(t)
	calls := e.Twilio.GroundTruth().Calls
	rs, _ := e.Store.FindReservations(context.Background(), keybrake.ReservationFilter{KeyID: id})
	if len(calls) != 1 || len(rs) != 1 || rs[0].ObjectID != calls[0].Sid || rs[0].State != keybrake.StateSettled {
		t.Fatalf("reservations %+v, calls %+v", rs, calls)
	}
	if sp, billed := e.Spend(t, id), e.Twilio.Billed(); sp.Day != billed.Micros || sp.Uncertain != 0 {
		t.Fatalf("spend %+v, twiliosim billed %+v", sp, billed)
	}
}

func TestTwilioLostScheduledMessageHeldUntilPriced(t *testing.T) {
	// A scheduled message has no price until it is sent: the lookup finds
	// it and holds the reservation at the reserved amount with its sid; the
	// price pass settles Twilio's price once the message went out.
	e := MustOpenVendors(t)
	id, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1"}`)
	e.lose(t, 1, true)
	p := (&api.CreateMessageParams{}).SetTo("+14155550123").SetMessagingServiceSid("MG00000000000000000000000000000001").
		SetBody("Your code is 123456").SetScheduleType("fixed").SetSendAt(e.Clock.Now().Add(time.Hour))
	_, err := e.TwilioClient(t, secret).Api.CreateMessage(p)
	twilioErr(t, err, 503, twilio.CodeUnavailable)
	e.Clock.Advance(pastLookupWindow)
	e.resolvePass(t)
	rs, _ := e.Store.FindReservations(context.Background(), keybrake.ReservationFilter{KeyID: id})
	truth := e.Twilio.GroundTruth().Messages
	if len(truth) != 1 || rs[0].State != keybrake.StateHeld || rs[0].ObjectID != truth[0].Sid {
		t.Fatalf("before the send: %+v (twiliosim %d messages), want held on the scheduled message", rs[0], len(truth))
	}
	if sp := e.Spend(t, id); sp.Held != 20000 || sp.Uncertain != 0 {
		t.Fatalf("held spend = %+v", sp)
	}
	e.Clock.Advance(time.Hour)
	e.resolvePass(t)
	if sp, billed := e.Spend(t, id), e.Twilio.Billed(); sp.Held != 0 || sp.Day != billed.Micros || billed.Micros == 0 {
		t.Fatalf("after the send: spend %+v, twiliosim billed %+v", sp, billed)
	}
}

// TestTwilioLostAnswerFoundReadBySender: a message or call whose answer
// was lost, and that the resolver then found by To, sender, body and time,
// is its sender's like one whose answer arrived. keybrake recorded no
// sender for it, so the key that sent it got Twilio's 404 for its own sid
// (learned from its status callback or the list) for good. Another key
// still gets the 404, and nothing is recorded before the lookup decides.
func TestTwilioLostAnswerFoundReadBySender(t *testing.T) {
	e := MustOpenVendors(t)
	all := `"allowed_endpoints":["messages.create","messages.fetch","calls.create","calls.fetch"]`
	id, a := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1",`+all+`}`)
	_, b := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1",`+all+`}`)
	ta, tb := e.TwilioClient(t, a), e.TwilioClient(t, b)
	e.lose(t, 2, true)
	_, err := ta.Api.CreateMessage(sms("+14155550123"))
	twilioErr(t, err, 503, twilio.CodeUnavailable)
	_, err = ta.Api.CreateCall((&api.CreateCallParams{}).SetTo("+14155550124").SetFrom("+14155550100").
		SetTwiml("<Response><Say>hi</Say></Response>").SetTimeLimit(120))
	twilioErr(t, err, 503, twilio.CodeUnavailable)
	truth := e.Twilio.GroundTruth()
	if len(truth.Messages) != 1 || len(truth.Calls) != 1 {
		t.Fatalf("twiliosim made %d messages and %d calls, want one each", len(truth.Messages), len(truth.Calls))
	}
	msid, csid := truth.Messages[0].Sid, truth.Calls[0].Sid
	_, err = ta.Api.FetchMessage(msid, nil)
	twilioErr(t, err, 404, twilio.CodeNotFound) // not known to be A's yet

	e.settleAll(t)
	rs, _ := e.Store.FindReservations(context.Background(), keybrake.ReservationFilter{KeyID: id})
	objects := map[string]bool{}
	for _, r := range rs {
		objects[r.ObjectID] = true
	}
	if len(rs) != 2 || !objects[msid] || !objects[csid] {
		t.Fatalf("reservations %+v, want them settled against %s and %s", rs, msid, csid)
	}
	if m, err := ta.Api.FetchMessage(msid, nil); err != nil || *m.Sid != msid {
		t.Fatalf("A fetches the message the resolver found for it: %v", err)
	}
	if c, err := ta.Api.FetchCall(csid, nil); err != nil || *c.Sid != csid {
		t.Fatalf("A fetches the call the resolver found for it: %v", err)
	}
	_, err = tb.Api.FetchMessage(msid, nil)
	twilioErr(t, err, 404, twilio.CodeNotFound)
	_, err = tb.Api.FetchCall(csid, nil)
	twilioErr(t, err, 404, twilio.CodeNotFound)
}

// TestTwilioLostAnswerMatchOfAnotherKey: the lookup matches by content, so
// the message it finds for a lost create may be one keybrake answered to
// another key (an identical send that reserved nothing, which no
// reservation names). That key's create was answered with the sid, so it
// is not the lost create's: it stays that key's alone. The money is
// decided as before (the lost create stays counted against it).
func TestTwilioLostAnswerMatchOfAnotherKey(t *testing.T) {
	e := MustOpenVendors(t)
	id, a := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1"}`)
	bID, b := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1"}`)
	e.lose(t, 1, true)
	_, err := e.TwilioClient(t, a).Api.CreateMessage(sms("+14155550123"))
	twilioErr(t, err, 503, twilio.CodeUnavailable)
	sid := e.Twilio.GroundTruth().Messages[0].Sid
	// As keybrake records an answered send that reserved nothing.
	if err := e.Store.RecordSent(context.Background(), keybrake.RecordSentArgs{Vendor: keybrake.VendorTwilio, KeyID: bID, IDs: []string{sid}, Now: e.Clock.Now()}); err != nil {
		t.Fatal(err)
	}
	e.settleAll(t)
	if rs, _ := e.Store.FindReservations(context.Background(), keybrake.ReservationFilter{KeyID: id}); len(rs) != 1 || rs[0].ObjectID != sid {
		t.Fatalf("reservations %+v, want settled against %s", rs, sid)
	}
	_, err = e.TwilioClient(t, a).Api.FetchMessage(sid, nil)
	twilioErr(t, err, 404, twilio.CodeNotFound)
	if _, err := e.TwilioClient(t, b).Api.FetchMessage(sid, nil); err != nil {
		t.Fatalf("B fetches the message it was answered with: %v", err)
	}
}
