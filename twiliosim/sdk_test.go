package twiliosim_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	twiliogo "github.com/twilio/twilio-go"
	"github.com/twilio/twilio-go/client"
	api "github.com/twilio/twilio-go/rest/api/v2010"

	"github.com/keybrake/keybrake/internal/simfault"
	"github.com/keybrake/keybrake/twiliosim"
)

// rewrite sends every request twilio-go makes to base instead of
// https://api.twilio.com: twilio-go's API base URL is fixed, so a custom
// http.Client whose Transport rewrites the scheme and host (and prepends
// base's path, "/twilio" for keybrake) is how a client reaches a proxy.
type rewrite struct {
	base *url.URL
	next http.RoundTripper
}

func (t rewrite) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.URL.Scheme, r.URL.Host = t.base.Scheme, t.base.Host
	r.URL.Path = strings.TrimSuffix(t.base.Path, "/") + r.URL.Path
	r.URL.RawPath = ""
	r.Host = ""
	return t.next.RoundTrip(r)
}

// newClient returns a twilio-go client pointed at baseURL.
func newClient(tb testing.TB, baseURL, user, password string) *twiliogo.RestClient {
	tb.Helper()
	tb.Setenv("TWILIO_EDGE", "")
	tb.Setenv("TWILIO_REGION", "")
	u, err := url.Parse(baseURL)
	if err != nil {
		tb.Fatal(err)
	}
	c := &client.Client{
		Credentials: client.NewCredentials(user, password),
		HTTPClient:  &http.Client{Transport: rewrite{u, http.DefaultTransport}, Timeout: 10 * time.Second},
	}
	c.SetAccountSid(twiliosim.DefaultAccountSid)
	return twiliogo.NewRestClientWithParams(twiliogo.ClientParams{Client: c})
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func mustServer(tb testing.TB, opts twiliosim.Options) (*twiliosim.Server, *twiliogo.RestClient) {
	tb.Helper()
	clk := &clock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	opts.Now = clk.Now
	sim := twiliosim.New(opts)
	ts := httptest.NewServer(sim)
	tb.Cleanup(ts.Close)
	return sim, newClient(tb, ts.URL, twiliosim.DefaultAccountSid, twiliosim.DefaultAuthToken)
}

func restError(tb testing.TB, err error) *client.TwilioRestError {
	tb.Helper()
	var e *client.TwilioRestError
	if !errors.As(err, &e) {
		tb.Fatalf("err = %v (%T), want a TwilioRestError", err, err)
	}
	return e
}

func TestMessageLifecycle(t *testing.T) {
	sim, tw := mustServer(t, twiliosim.Options{})
	params := (&api.CreateMessageParams{}).SetTo("+14155550100").SetFrom("+14155550199").SetBody(strings.Repeat("a", 161))
	m, err := tw.Api.CreateMessage(params)
	if err != nil {
		t.Fatal(err)
	}
	if *m.Status != "queued" || m.Price != nil || *m.NumSegments != "2" || !strings.HasPrefix(*m.Sid, "SM") {
		t.Fatalf("created = status %v price %v segments %v", *m.Status, m.Price, *m.NumSegments)
	}
	steps := []struct {
		after  time.Duration
		status string
		price  string
	}{
		{time.Second, "sending", ""},
		{time.Second, "sent", "-0.02200"}, // 2 segments × $0.011
		{2 * time.Second, "delivered", "-0.02200"},
	}
	for _, st := range steps {
		sim.Advance(st.after)
		got, err := tw.Api.FetchMessage(*m.Sid, nil)
		if err != nil {
			t.Fatal(err)
		}
		price := ""
		if got.Price != nil {
			price = *got.Price
		}
		if *got.Status != st.status || price != st.price {
			t.Errorf("after %s: status %s price %q, want %s %q", st.after, *got.Status, price, st.status, st.price)
		}
	}
	b := sim.Billed()
	if b.Micros != 22000 || b.Messages != 1 || b.Segments != 2 || b.Pending != 0 {
		t.Errorf("billed = %+v", b)
	}
	bal, err := tw.Api.FetchBalance(nil)
	if err != nil || *bal.Balance != "19.978" {
		t.Errorf("balance = %v %v", bal, err)
	}

	// Redact, then delete: both need a final message.
	if _, err := tw.Api.UpdateMessage(*m.Sid, (&api.UpdateMessageParams{}).SetBody("")); err != nil {
		t.Fatal(err)
	}
	if err := tw.Api.DeleteMessage(*m.Sid, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Api.FetchMessage(*m.Sid, nil); restError(t, err).Code != 20404 {
		t.Errorf("fetch after delete: %v", err)
	}
	if g := sim.GroundTruth(); len(g.Messages) != 1 || !g.Messages[0].Redacted || !g.Messages[0].Deleted || g.Messages[0].Price != 22000 {
		t.Errorf("ground truth = %+v", g.Messages)
	}
}

func TestMessageInProgressCannotBeDeleted(t *testing.T) {
	_, tw := mustServer(t, twiliosim.Options{})
	m, err := tw.Api.CreateMessage((&api.CreateMessageParams{}).SetTo("+14155550100").SetFrom("+14155550199").SetBody("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Api.DeleteMessage(*m.Sid, nil); restError(t, err).Code != 20009 {
		t.Errorf("delete in progress: %v", err)
	}
}

func TestScheduledCanceledIsNotBilled(t *testing.T) {
	sim, tw := mustServer(t, twiliosim.Options{})
	at := sim.Now().Add(time.Hour)
	m, err := tw.Api.CreateMessage((&api.CreateMessageParams{}).SetTo("+14155550100").
		SetMessagingServiceSid("MG0123456789abcdef0123456789abcdef").SetBody("later").
		SetScheduleType("fixed").SetSendAt(at))
	if err != nil {
		t.Fatal(err)
	}
	if *m.Status != "scheduled" {
		t.Fatalf("status = %s", *m.Status)
	}
	if _, err := tw.Api.UpdateMessage(*m.Sid, (&api.UpdateMessageParams{}).SetStatus("canceled")); err != nil {
		t.Fatal(err)
	}
	sim.Advance(2 * time.Hour)
	if b := sim.Billed(); b.Micros != 0 || b.Messages != 0 || b.Pending != 0 {
		t.Errorf("billed = %+v", b)
	}
}

func TestCallLifecycle(t *testing.T) {
	sim, tw := mustServer(t, twiliosim.Options{CallSeconds: 90})
	twiml := "<Response><Say>Hello</Say></Response>"
	c, err := tw.Api.CreateCall((&api.CreateCallParams{}).SetTo("+14155550100").SetFrom("+14155550199").SetTwiml(twiml).SetTimeLimit(600))
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []struct {
		after         time.Duration
		status, price string
	}{
		{time.Second, "ringing", ""},
		{4 * time.Second, "in-progress", ""},
		{90 * time.Second, "completed", "-0.02800"}, // 90 s is 2 started minutes × $0.014
	} {
		sim.Advance(st.after)
		got, err := tw.Api.FetchCall(*c.Sid, nil)
		if err != nil {
			t.Fatal(err)
		}
		price := ""
		if got.Price != nil {
			price = *got.Price
		}
		if *got.Status != st.status || price != st.price {
			t.Errorf("status %s price %q, want %s %q", *got.Status, price, st.status, st.price)
		}
	}

	// A TimeLimit shorter than the talk ends the call at the limit.
	short, err := tw.Api.CreateCall((&api.CreateCallParams{}).SetTo("+14155550100").SetFrom("+14155550199").SetTwiml(twiml).SetTimeLimit(30))
	if err != nil {
		t.Fatal(err)
	}
	// Hanging up early bills the minutes so far; canceling before the
	// answer bills nothing.
	early, _ := tw.Api.CreateCall((&api.CreateCallParams{}).SetTo("+14155550100").SetFrom("+14155550199").SetTwiml(twiml))
	never, _ := tw.Api.CreateCall((&api.CreateCallParams{}).SetTo("+14155550100").SetFrom("+14155550199").SetTwiml(twiml))
	if _, err := tw.Api.UpdateCall(*never.Sid, (&api.UpdateCallParams{}).SetStatus("canceled")); err != nil {
		t.Fatal(err)
	}
	sim.Advance(5*time.Second + 61*time.Second)
	if _, err := tw.Api.UpdateCall(*early.Sid, (&api.UpdateCallParams{}).SetStatus("completed")); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Api.UpdateCall(*early.Sid, (&api.UpdateCallParams{}).SetStatus("canceled")); err != nil {
		t.Errorf("ending an ended call: %v", err)
	}
	for sid, want := range map[string][2]string{*short.Sid: {"completed", "30"}, *early.Sid: {"completed", "61"}, *never.Sid: {"canceled", "0"}} {
		got, err := tw.Api.FetchCall(sid, nil)
		if err != nil {
			t.Fatal(err)
		}
		if *got.Status != want[0] || *got.Duration != want[1] {
			t.Errorf("call %s: %s %s, want %v", sid, *got.Status, *got.Duration, want)
		}
	}
	if b := sim.Billed(); b.Calls != 4 || b.Micros != 28000+14000+28000 {
		t.Errorf("billed = %+v", b)
	}
}

func TestErrors(t *testing.T) {
	sim, tw := mustServer(t, twiliosim.Options{})
	ts := httptest.NewServer(sim)
	defer ts.Close()

	bad := newClient(t, ts.URL, twiliosim.DefaultAccountSid, "wrongtoken")
	_, err := bad.Api.CreateMessage((&api.CreateMessageParams{}).SetTo("+14155550100").SetFrom("+1").SetBody("x"))
	if e := restError(t, err); e.Code != 20003 || e.Status != 401 || e.MoreInfo != "https://www.twilio.com/docs/errors/20003" {
		t.Errorf("bad token: %+v", e)
	}
	// twilio-go refuses a password with anything but letters and digits
	// before sending: a vault_key_… must be given as vaultkey….
	under := newClient(t, ts.URL, twiliosim.DefaultAccountSid, "vault_key_abc")
	if _, err := under.Api.FetchBalance(nil); restError(t, err).Code != 21224 {
		t.Errorf("underscore password: %v", err)
	}
	for name, p := range map[string]*api.CreateMessageParams{
		"21604": (&api.CreateMessageParams{}).SetFrom("+14155550199").SetBody("x"),
		"21211": (&api.CreateMessageParams{}).SetTo("+15005550001").SetFrom("+14155550199").SetBody("x"),
		"21603": (&api.CreateMessageParams{}).SetTo("+14155550100").SetBody("x"),
		"21602": (&api.CreateMessageParams{}).SetTo("+14155550100").SetFrom("+14155550199"),
		"21617": (&api.CreateMessageParams{}).SetTo("+14155550100").SetFrom("+14155550199").SetBody(strings.Repeat("a", 1601)),
	} {
		_, err := tw.Api.CreateMessage(p)
		if e := restError(t, err); e.Status != 400 || itoa(e.Code) != name {
			t.Errorf("%s: %+v", name, e)
		}
	}
	if n := len(sim.GroundTruth().Messages); n != 0 {
		t.Errorf("refused messages were created: %d", n)
	}
	other := newClient(t, ts.URL, twiliosim.DefaultAccountSid, twiliosim.DefaultAuthToken)
	_, err = other.Api.FetchAccount("AC0123456789abcdef0123456789abcdef")
	if e := restError(t, err); e.Status != 404 {
		t.Errorf("another account: %+v", e)
	}
}

func itoa(n int) string {
	s := ""
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s
}

func TestFaultsLeaveGroundTruth(t *testing.T) {
	sim, tw := mustServer(t, twiliosim.Options{})
	path := "/2010-04-01/Accounts/" + twiliosim.DefaultAccountSid + "/Messages.json"
	p := (&api.CreateMessageParams{}).SetTo("+14155550100").SetFrom("+14155550199").SetBody("x")
	for _, mode := range []string{simfault.FailBefore, simfault.FailAfter, simfault.CutAfter} {
		sim.ClearFaults()
		if _, err := sim.AddFault(simfault.Fault{Method: "POST", Path: path, Mode: mode, Count: 1}); err != nil {
			t.Fatal(err)
		}
		before := len(sim.GroundTruth().Messages)
		if _, err := tw.Api.CreateMessage(p); err == nil {
			t.Fatalf("%s: no error", mode)
		}
		created := len(sim.GroundTruth().Messages) - before
		if want := map[string]int{simfault.FailBefore: 0, simfault.FailAfter: 1, simfault.CutAfter: 1}[mode]; created != want {
			t.Errorf("%s: %d messages created, want %d", mode, created, want)
		}
	}
	sim.Advance(5 * time.Second)
	// The lost messages are found again by To, From and date, the way
	// keybrake's resolver looks for a send whose answer it lost.
	list, err := tw.Api.ListMessage((&api.ListMessageParams{}).SetTo("+14155550100").SetFrom("+14155550199").
		SetDateSentAfter(sim.Now().Add(-time.Minute)).SetPageSize(1))
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Errorf("listed %d messages over pages of 1, want 2", len(list))
	}
	if b := sim.Billed(); b.Messages != 2 || b.Micros != 22000 {
		t.Errorf("billed = %+v", b)
	}
}

func TestAccountAnswersWithItsToken(t *testing.T) {
	_, tw := mustServer(t, twiliosim.Options{Numbers: []string{"+14155550199"}})
	a, err := tw.Api.FetchAccount(twiliosim.DefaultAccountSid)
	if err != nil {
		t.Fatal(err)
	}
	if a.AuthToken == nil || *a.AuthToken != twiliosim.DefaultAuthToken {
		t.Error("accounts.fetch should answer with auth_token, as Twilio does (the proxy must redact it)")
	}
	nums, err := tw.Api.ListIncomingPhoneNumber(nil)
	if err != nil || len(nums) != 1 || *nums[0].PhoneNumber != "+14155550199" {
		t.Errorf("numbers = %v %v", nums, err)
	}
}
