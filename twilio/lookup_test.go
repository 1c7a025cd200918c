package twilio_test

import (
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/twilio"
)

func TestParseSent(t *testing.T) {
	s, err := twilio.ParseSent("twilio.messages.create", "To=%2B14155550123&From=%2B14155550100&Body=hi+there&MediaUrl=a&MediaUrl=b")
	if err != nil || s.Kind != "Messages" || s.To != "+14155550123" || s.From != "+14155550100" || s.Body != "hi there" || s.NumMedia != 2 {
		t.Fatalf("ParseSent = %+v, %v", s, err)
	}
	if q := s.Query(); q.Get("To") != "+14155550123" || q.Get("From") != "+14155550100" || q.Get("PageSize") != "1000" || q.Has("DateSent>") {
		t.Fatalf("Query = %v", q)
	}
	if s, _ := twilio.ParseSent("messages.create", "To=%2B14155550123&From=%2B1+(415)+555-0100&Body=x"); s.Query().Has("From") {
		t.Fatalf("a From Twilio would normalise filtered the list: %v", s.Query())
	}
	for name, tt := range map[string]struct{ op, body string }{
		"ErrOperation": {"twilio.messages.list", "To=%2B14155550123&From=%2B14155550100"},
		"ErrNoTo":      {"twilio.messages.create", "From=%2B14155550100&Body=x"},
		"ErrNoSender":  {"twilio.calls.create", "To=%2B14155550123"},
		"ErrTwoTos":    {"twilio.messages.create", "To=%2B1&To=%2B2&From=%2B14155550100"},
	} {
		if _, err := twilio.ParseSent(tt.op, tt.body); keybrake.ErrorCode(err) != keybrake.EINVALID {
			t.Errorf("%s: err = %v, want EINVALID", name, err)
		}
	}
}

func TestSentMatch(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	from, until := t0.Add(-time.Minute), t0.Add(2*time.Minute)
	sms := twilio.Sent{Kind: "Messages", To: "+14155550123", From: "+14155550100", Body: "hi"}
	svc := twilio.Sent{Kind: "Messages", To: "+14155550123", MessagingServiceSid: "MG1", Body: "hi"}
	call := twilio.Sent{Kind: "Calls", To: "+14155550123", From: "+14155550100"}
	base := twilio.Resource{Sid: "SM1", To: "+14155550123", From: "+14155550100", Body: "hi", NumMedia: "0", Direction: "outbound-api", Created: t0}
	with := func(f func(*twilio.Resource)) twilio.Resource { r := base; f(&r); return r }
	for name, tt := range map[string]struct {
		s    twilio.Sent
		r    twilio.Resource
		want twilio.Match
	}{
		"Exact":             {sms, base, twilio.MatchExact},
		"ExactCall":         {call, with(func(r *twilio.Resource) { r.Body = "" }), twilio.MatchExact},
		"ExactService":      {svc, with(func(r *twilio.Resource) { r.From, r.MessagingServiceSid = "+14155550999", "MG1" }), twilio.MatchExact},
		"LooseBody":         {sms, with(func(r *twilio.Resource) { r.Body = "Sent from your Twilio trial account - hi" }), twilio.MatchLoose},
		"LooseMedia":        {sms, with(func(r *twilio.Resource) { r.NumMedia = "1" }), twilio.MatchLoose},
		"LooseSender":       {sms, with(func(r *twilio.Resource) { r.From = "+14155550101" }), twilio.MatchLoose},
		"LooseOtherService": {svc, with(func(r *twilio.Resource) { r.MessagingServiceSid = "MG2" }), twilio.MatchLoose},
		"NoneTo":            {sms, with(func(r *twilio.Resource) { r.To = "+14155550124" }), twilio.MatchNone},
		"NoneInbound":       {sms, with(func(r *twilio.Resource) { r.Direction = "inbound" }), twilio.MatchNone},
		"NoneBefore":        {sms, with(func(r *twilio.Resource) { r.Created = from.Add(-time.Second) }), twilio.MatchNone},
		"NoneAfter":         {sms, with(func(r *twilio.Resource) { r.Created = until.Add(time.Second) }), twilio.MatchNone},
		"EdgeFrom":          {sms, with(func(r *twilio.Resource) { r.Created = from }), twilio.MatchExact},
		"EdgeUntil":         {sms, with(func(r *twilio.Resource) { r.Created = until }), twilio.MatchExact},
	} {
		if got := tt.s.Match(tt.r, from, until); got != tt.want {
			t.Errorf("%s: Match = %d, want %d", name, got, tt.want)
		}
	}
}

func TestParsePage(t *testing.T) {
	p, err := twilio.ParsePage("Messages", []byte(`{"messages":[{"sid":"SM1","to":"+1","date_created":"Mon, 30 Nov 2026 12:00:00 +0000","price":"-0.00790"}],"next_page_uri":"/2010-04-01/Accounts/AC1/Messages.json?Page=1"}`))
	if err != nil || len(p.Resources) != 1 || !p.Resources[0].Created.Equal(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)) || p.NextPageURI == "" || *p.Resources[0].Price != "-0.00790" {
		t.Fatalf("ParsePage = %+v, %v", p, err)
	}
	for name, body := range map[string]string{
		"ErrDate":  `{"messages":[{"sid":"SM1","date_created":"yesterday"}]}`,
		"ErrNoSid": `{"messages":[{"date_created":"Mon, 30 Nov 2026 12:00:00 +0000"}]}`,
		"ErrJSON":  `{"messages":[`,
	} {
		if _, err := twilio.ParsePage("Messages", []byte(body)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if p, err := twilio.ParsePage("Calls", []byte(`{"calls":[],"next_page_uri":null}`)); err != nil || p.NextPageURI != "" {
		t.Fatalf("last page = %+v, %v", p, err)
	}
}
