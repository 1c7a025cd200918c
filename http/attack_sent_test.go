package http_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	resendgo "github.com/resend/resend-go/v3"
	api "github.com/twilio/twilio-go/rest/api/v2010"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/internal/simfault"
	"github.com/keybrake/keybrake/resendsim"
	"github.com/keybrake/keybrake/twilio"
	"github.com/keybrake/keybrake/twiliosim"
)

// upstreamLog records the paths of the requests keybrake forwards
// upstream, to show a refused request forwarded nothing.
type upstreamLog struct {
	base http.RoundTripper
	mu   sync.Mutex
	reqs []string // "GET /emails/…"
}

func (l *upstreamLog) RoundTrip(r *http.Request) (*http.Response, error) {
	l.mu.Lock()
	l.reqs = append(l.reqs, r.Method+" "+r.URL.EscapedPath())
	l.mu.Unlock()
	return l.base.RoundTrip(r)
}

// naming counts the forwarded requests whose path contains id, in any case.
func (l *upstreamLog) naming(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.reqs {
		if strings.Contains(strings.ToLower(r), strings.ToLower(id)) {
			n++
		}
	}
	return n
}

// logUpstream is an Option recording what keybrake forwards.
func logUpstream(l *upstreamLog) Option {
	return func(s *khttp.Server) {
		l.base = s.Transport
		if l.base == nil {
			l.base = http.DefaultTransport
		}
		s.Transport = l
	}
}

const resendAll = `"allowed_endpoints":["emails.send","emails.batch","emails.get","emails.update","emails.cancel"]`

// resendSendAs sends one email with resend-go as secret and returns its id.
func resendSendAs(t *testing.T, e *VendorEnv, secret string, req *resendgo.SendEmailRequest) string {
	t.Helper()
	sent, err := e.ResendClient(t, secret).Emails.Send(req)
	if err != nil || sent.Id == "" {
		t.Fatalf("send: %v", err)
	}
	return sent.Id
}

// wantResendNotFound checks a resend-go error is Resend's 404 for an
// unknown email.
func wantResendNotFound(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), "Email not found") {
		t.Fatalf("%s: %v, want Resend's 404 Email not found", what, err)
	}
}

// TestAttackResend_ReadOtherKeysEmail: emails.get is in every Resend key's
// default allowed_endpoints, and keybrake forwarded it with its one Resend
// key, which reads any email of the account: vault key B read the login
// link vault key A had mailed, given its id (from a log, a support ticket,
// a webhook). Now a key reads only what it (or a key minted under it) sent
// through keybrake, every email of a batch included; anything else is
// Resend's own 404, and nothing is forwarded.
func TestAttackResend_ReadOtherKeysEmail(t *testing.T) {
	up := &upstreamLog{}
	e := MustOpenVendors(t, logUpstream(up))
	_, a := e.CreateKey(t, `{"vendor":"resend","daily_usd_cap":"1"}`)
	_, b := e.CreateKey(t, `{"vendor":"resend","daily_usd_cap":"1"}`)
	id := resendSendAs(t, e, a, &resendgo.SendEmailRequest{From: "login@example.com", To: []string{"alice@example.com"},
		Subject: "Your sign-in link", Text: "https://app.example.com/login?token=secret-token-of-alice"})
	if got, err := e.ResendClient(t, a).Emails.Get(id); err != nil || got.Id != id {
		t.Fatalf("A reads its own email: %+v %v", got, err)
	}
	_, err := e.ResendClient(t, b).Emails.Get(id)
	wantResendNotFound(t, "B reads A's email", err)
	if n := up.naming(id); n != 1 { // A's get
		t.Fatalf("%d requests naming A's email forwarded, want A's get only: %q", n, up.reqs)
	}

	// Every email of a batch is A's, not only the first.
	batch, err := e.ResendClient(t, a).Batch.Send([]*resendgo.SendEmailRequest{
		{From: "login@example.com", To: []string{"x@example.com"}, Subject: "code", Text: "111111"},
		{From: "login@example.com", To: []string{"y@example.com"}, Subject: "code", Text: "222222"},
		{From: "login@example.com", To: []string{"z@example.com"}, Subject: "code", Text: "333333"},
	})
	if err != nil || len(batch.Data) != 3 {
		t.Fatalf("batch: %+v %v", batch, err)
	}
	for _, d := range batch.Data {
		if _, err := e.ResendClient(t, a).Emails.Get(d.Id); err != nil {
			t.Fatalf("A reads the batch's %s: %v", d.Id, err)
		}
		_, err := e.ResendClient(t, b).Emails.Get(d.Id)
		wantResendNotFound(t, "B reads A's batch email", err)
	}

	// An email sent outside keybrake (or before it kept the record) is
	// no key's.
	outside := sendOutsideResend(t, e)
	_, err = e.ResendClient(t, a).Emails.Get(outside)
	wantResendNotFound(t, "a key reads an email sent outside keybrake", err)
	if n := up.naming(outside); n != 0 {
		t.Fatalf("the read of an email sent outside keybrake was forwarded: %q", up.reqs)
	}

	// Other spellings of A's id are refused before anything is forwarded.
	before := up.naming(id)
	for _, path := range []string{
		"/resend/emails/" + strings.ToUpper(id),
		"/resend/emails/" + strings.Replace(id, "-", "%2D", 1),
		"/resend/emails/" + id + "/",
		"/resend/emails/" + id + "%2F",
		"/resend//emails/" + id,
		"/resend/emails/" + id + "?id=" + id,
		"/resend/emails/" + outside + "?id=" + id,
	} {
		resp, body := e.Do(t, "GET", path, "", map[string]string{"Authorization": "Bearer " + b})
		if resp.StatusCode < 400 {
			t.Errorf("B GET %s: %d %s", path, resp.StatusCode, body)
		}
	}
	if n := up.naming(id); n != before {
		t.Fatalf("B's spellings of A's id were forwarded: %q", up.reqs)
	}
}

// sendOutsideResend sends an email straight to resendsim with the real
// key, as a script outside keybrake would, and returns its id.
func sendOutsideResend(t *testing.T, e *VendorEnv) string {
	t.Helper()
	req, _ := http.NewRequest("POST", e.Server.Resend.Upstream.String()+"/emails",
		strings.NewReader(`{"from":"ops@example.com","to":"bob@example.com","subject":"reset","text":"code 424242"}`))
	req.Header.Set("Authorization", "Bearer "+resendsim.DefaultAPIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		ID string `json:"id"`
	}
	if json.NewDecoder(resp.Body).Decode(&v); v.ID == "" {
		t.Fatalf("send outside keybrake: %d", resp.StatusCode)
	}
	return v.ID
}

// TestAttackResend_CancelOtherKeysEmail: a key allowed emails.cancel and
// emails.update canceled or moved any scheduled email of the account: B
// canceled A's scheduled email, which stayed counted on A (Resend bills
// what it accepted) and was never delivered. Now B gets Resend's 404 and
// nothing is forwarded; A still cancels its own.
func TestAttackResend_CancelOtherKeysEmail(t *testing.T) {
	up := &upstreamLog{}
	e := MustOpenVendors(t, logUpstream(up))
	_, a := e.CreateKey(t, `{"vendor":"resend","daily_usd_cap":"1",`+resendAll+`}`)
	_, b := e.CreateKey(t, `{"vendor":"resend","daily_usd_cap":"1",`+resendAll+`}`)
	when := e.Clock.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)
	schedule := func(to string) string {
		return resendSendAs(t, e, a, &resendgo.SendEmailRequest{From: "billing@example.com", To: []string{to},
			Subject: "Your invoice", Text: "due tomorrow", ScheduledAt: when})
	}
	id := schedule("alice@example.com")
	_, err := e.ResendClient(t, b).Emails.Cancel(id)
	wantResendNotFound(t, "B cancels A's scheduled email", err)
	_, err = e.ResendClient(t, b).Emails.Update(&resendgo.UpdateEmailRequest{Id: id, ScheduledAt: e.Clock.Now().Add(48 * time.Hour).UTC().Format(time.RFC3339)})
	wantResendNotFound(t, "B reschedules A's email", err)
	for _, m := range e.Resend.GroundTruth().Emails {
		if m.ID == id && (m.Canceled || !m.ScheduledAt.Equal(e.Clock.Now().Add(2*time.Hour).Truncate(time.Second))) {
			t.Fatalf("A's email after B's attempts: %+v", m)
		}
	}
	if n := up.naming(id); n != 0 {
		t.Fatalf("B's cancel or update was forwarded: %q", up.reqs)
	}
	// Raw cancels in other spellings forward nothing either.
	for _, path := range []string{"/resend/emails/" + strings.ToUpper(id) + "/cancel", "/resend/emails/" + id + "/cancel/", "/resend/emails/" + id + "%2Fcancel"} {
		resp, body := e.Do(t, "POST", path, "", map[string]string{"Authorization": "Bearer " + b})
		if resp.StatusCode < 400 {
			t.Errorf("B POST %s: %d %s", path, resp.StatusCode, body)
		}
	}
	if n := up.naming(id); n != 0 {
		t.Fatalf("B's raw cancels were forwarded: %q", up.reqs)
	}
	// A cancels its own.
	if _, err := e.ResendClient(t, a).Emails.Cancel(id); err != nil {
		t.Fatalf("A cancels its own scheduled email: %v", err)
	}
}

// TestAttackTwilio_FetchOtherKeysMessage: messages.fetch is in every Twilio
// key's default allowed_endpoints, and keybrake fetched any message of the
// account with its credential: B read the one-time code A had texted.
// With messages.update, messages.delete and the calls' operations B could
// redact or delete A's message, or redirect or hang up A's call. Now each
// is Twilio's 20404 unless the key (or a key minted under it) sent it.
func TestAttackTwilio_FetchOtherKeysMessage(t *testing.T) {
	up := &upstreamLog{}
	e := MustOpenVendors(t, logUpstream(up))
	all := `"allowed_endpoints":["messages.create","messages.fetch","messages.update","messages.delete","calls.create","calls.fetch","calls.update"]`
	_, a := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"5",`+all+`}`)
	_, b := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"5",`+all+`}`)
	ta, tb := e.TwilioClient(t, a), e.TwilioClient(t, b)
	msg, err := ta.Api.CreateMessage(sms("+14155550123"))
	if err != nil {
		t.Fatal(err)
	}
	sid := *msg.Sid
	if got, err := ta.Api.FetchMessage(sid, nil); err != nil || *got.Body != "Your code is 123456" {
		t.Fatalf("A fetches its own message: %v", err)
	}
	_, err = tb.Api.FetchMessage(sid, nil)
	twilioErr(t, err, 404, twilio.CodeNotFound)
	_, err = tb.Api.UpdateMessage(sid, (&api.UpdateMessageParams{}).SetBody(""))
	twilioErr(t, err, 404, twilio.CodeNotFound)
	twilioErr(t, tb.Api.DeleteMessage(sid, nil), 404, twilio.CodeNotFound)

	call, err := ta.Api.CreateCall((&api.CreateCallParams{}).SetTo("+14155550124").SetFrom("+14155550100").SetTimeLimit(60).
		SetTwiml(`<Response><Play>https://example.com/hold.mp3</Play></Response>`))
	if err != nil {
		t.Fatal(err)
	}
	csid := *call.Sid
	if _, err := ta.Api.FetchCall(csid, nil); err != nil {
		t.Fatalf("A fetches its own call: %v", err)
	}
	_, err = tb.Api.FetchCall(csid, nil)
	twilioErr(t, err, 404, twilio.CodeNotFound)
	_, err = tb.Api.UpdateCall(csid, (&api.UpdateCallParams{}).SetStatus("completed"))
	twilioErr(t, err, 404, twilio.CodeNotFound)

	// Other spellings of A's sid, and B's own sid with A's in the query.
	own, err := tb.Api.CreateMessage(sms("+14155550125").SetBody("B's own message"))
	if err != nil {
		t.Fatal(err)
	}
	base := "/twilio/2010-04-01/Accounts/" + twiliosim.DefaultAccountSid + "/Messages/"
	for _, path := range []string{
		base + strings.ToUpper(sid[:2]) + strings.ToUpper(sid[2:]) + ".json",
		base + "sm" + sid[2:] + ".json",
		base + sid,
		base + sid + "/",
		base + sid + ".json/",
		base + sid + ".JSON",
		base + sid + ".xml",
		base + sid + "%2Ejson",
		base + "%53" + sid[1:] + ".json",
		"/twilio/2010-04-01/Accounts/" + twiliosim.DefaultAccountSid + "/Calls/" + sid + ".json",
	} {
		resp, body := e.Do(t, "GET", path, "", map[string]string{"Authorization": basicAuth(twiliosim.DefaultAccountSid, b)})
		if resp.StatusCode < 400 || strings.Contains(string(body), "123456") {
			t.Errorf("B GET %s: %d %s", path, resp.StatusCode, body)
		}
	}
	resp, body := e.Do(t, "GET", base+*own.Sid+".json?Sid="+sid, "", map[string]string{"Authorization": basicAuth(twiliosim.DefaultAccountSid, b)})
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"sid":"`+*own.Sid+`"`) {
		t.Errorf("B's own message, A's sid in the query: %d %s", resp.StatusCode, body)
	}
	// A's create and fetch, and the price pass's fetches of A's held
	// message and call, are all that named them.
	for _, id := range []string{sid, csid} {
		for _, r := range up.reqs {
			if strings.Contains(strings.ToLower(r), strings.ToLower(id)) && !strings.HasPrefix(r, "GET ") {
				t.Fatalf("a write naming %s was forwarded: %q", id, up.reqs)
			}
		}
	}
	if n := up.naming(sid); n != 1 {
		t.Fatalf("%d requests naming A's message forwarded, want A's fetch only: %q", n, up.reqs)
	}
}

// TestTwilioMMSFetchedBySender: a message with media has an MM sid, not SM
// (Twilio's error 90001: "SM or MM"); keybrake refused every path naming
// one as not found, so its sender could not read it back.
func TestTwilioMMSFetchedBySender(t *testing.T) {
	e := MustOpenVendors(t)
	all := `"allowed_endpoints":["messages.create","messages.fetch"]`
	_, a := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"5",`+all+`}`)
	_, b := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"5",`+all+`}`)
	ta, tb := e.TwilioClient(t, a), e.TwilioClient(t, b)
	msg, err := ta.Api.CreateMessage(sms("+14155550123").SetMediaUrl([]string{"https://example.com/receipt.png"}))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(*msg.Sid, "MM") {
		t.Fatalf("an MMS's sid %s, want MM…", *msg.Sid)
	}
	if got, err := ta.Api.FetchMessage(*msg.Sid, nil); err != nil || *got.Sid != *msg.Sid {
		t.Fatalf("the sender fetches its MMS: %v", err)
	}
	_, err = tb.Api.FetchMessage(*msg.Sid, nil)
	twilioErr(t, err, 404, twilio.CodeNotFound)
}

// TestSentScopeKeys: who else may read a key's email. A key's parent (at
// any depth) reads what its children sent, as it answers for their
// budget; a child reads neither its parent's nor a sibling's. A rotated
// key keeps its emails (the key is the same, its secret is new); a
// revoked one reads nothing. An email whose answer was lost is the key's
// once the resolver's replay or the client's own retry gets it.
func TestSentScopeKeys(t *testing.T) {
	e := MustOpenVendors(t)
	aID, a := e.CreateKey(t, `{"vendor":"resend","daily_usd_cap":"5","total_usd_cap":"10","mint":true}`)
	child := func() string {
		resp, out := e.Admin(t, "POST", "/vault/keys/"+aID+"/children", `{"total_usd_cap":"1"}`)
		var v struct {
			VaultKey string `json:"vault_key"`
		}
		if json.Unmarshal(out, &v); resp.StatusCode != http.StatusCreated || v.VaultKey == "" {
			t.Fatalf("mint: %d %s", resp.StatusCode, out)
		}
		return v.VaultKey
	}
	c1, c2 := child(), child()
	email := func() *resendgo.SendEmailRequest {
		return &resendgo.SendEmailRequest{From: "login@example.com", To: []string{"someone@example.com"}, Subject: "code", Text: "987654"}
	}
	byParent, byChild := resendSendAs(t, e, a, email()), resendSendAs(t, e, c1, email())
	get := func(secret, id string) error {
		_, err := e.ResendClient(t, secret).Emails.Get(id)
		return err
	}
	if err := get(a, byChild); err != nil {
		t.Fatalf("the parent reads its child's email: %v", err)
	}
	wantResendNotFound(t, "a child reads its parent's email", get(c1, byParent))
	wantResendNotFound(t, "a child reads its sibling's email", get(c2, byChild))

	// Rotation keeps the key's emails; revocation ends every read.
	resp, out := e.Admin(t, "POST", "/vault/keys/"+aID+"/rotate", "")
	var rot struct {
		VaultKey string `json:"vault_key"`
	}
	if json.Unmarshal(out, &rot); resp.StatusCode != 200 || rot.VaultKey == "" {
		t.Fatalf("rotate: %d %s", resp.StatusCode, out)
	}
	if err := get(rot.VaultKey, byParent); err != nil {
		t.Fatalf("the rotated key reads its email: %v", err)
	}
	e.Admin(t, "POST", "/vault/keys/"+aID+"/revoke", "")
	if err := get(rot.VaultKey, byParent); err == nil {
		t.Fatal("a revoked key read its email")
	}

	// A send whose answer was lost: the resolver's replay gets the id.
	_, d := e.CreateKey(t, `{"vendor":"resend","daily_usd_cap":"1"}`)
	if _, err := e.Resend.AddFault(simfault.Fault{Method: "POST", Path: "/emails", Mode: simfault.FailAfter, Count: 1}); err != nil {
		t.Fatal(err)
	}
	send := func() (int, string) {
		resp, body := e.Do(t, "POST", "/resend/emails", `{"from":"login@example.com","to":"z@example.com","subject":"code","text":"555555"}`,
			map[string]string{"Authorization": "Bearer " + d, "Content-Type": "application/json", "Idempotency-Key": "login-z"})
		var v struct {
			ID string `json:"id"`
		}
		json.Unmarshal(body, &v)
		return resp.StatusCode, v.ID
	}
	if st, _ := send(); st < 500 {
		t.Fatalf("send: %d, want the lost answer's 5xx", st)
	}
	emails := e.Resend.GroundTruth().Emails
	lost := emails[len(emails)-1].ID
	wantResendNotFound(t, "read before anything told keybrake the id", get(d, lost))
	e.Clock.Advance(time.Hour)
	e.resolvePass(t)
	if err := get(d, lost); err != nil {
		t.Fatalf("read once the resolver's replay got the id: %v", err)
	}
	// The client's own retry replays the same id: still its own, once.
	if st, id := send(); st != 200 || id != lost {
		t.Fatalf("retry: %d %s, want %s", st, id, lost)
	}
	if err := get(d, lost); err != nil {
		t.Fatalf("read after the retry: %v", err)
	}
	_, other := e.CreateKey(t, `{"vendor":"resend","daily_usd_cap":"1"}`)
	wantResendNotFound(t, "another key reads the recovered email", get(other, lost))
}

// TestSentScopeUnpricedCreate: a create keybrake reserved nothing for (an
// unpriced message to one of the account's own numbers, on a key with
// allow_unpriced) is recorded as its key's too.
func TestSentScopeUnpricedCreate(t *testing.T) {
	const own = "+14155550199"
	e := mustOpenVendorsSim(t, twiliosim.Options{Numbers: []string{"+14155550100", own}})
	_, open := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"5","allow_unpriced":true}`)
	_, other := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"0.01"}`)
	msg, err := e.TwilioClient(t, open).Api.CreateMessage(sms(own))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.TwilioClient(t, open).Api.FetchMessage(*msg.Sid, nil); err != nil {
		t.Fatalf("fetch the unpriced message this key sent: %v", err)
	}
	_, err = e.TwilioClient(t, other).Api.FetchMessage(*msg.Sid, nil)
	twilioErr(t, err, 404, twilio.CodeNotFound)
	// Over its cap: refused, nothing sent, so no id to record.
	_, err = e.TwilioClient(t, other).Api.CreateMessage(sms("+14155550123"))
	twilioErr(t, err, 429, twilio.CodeTooManyRequests)
	if n := len(e.Twilio.GroundTruth().Messages); n != 1 {
		t.Fatalf("twiliosim sent %d messages, want the unpriced one only", n)
	}
}

// sentFailing fails the store's SentService while fail is set.
type sentFailing struct {
	keybrake.Store
	fail *atomic.Bool
}

func (s sentFailing) RecordSent(ctx context.Context, args keybrake.RecordSentArgs) error {
	if s.fail.Load() {
		return keybrake.Errorf(keybrake.EUNAVAILABLE, "store down")
	}
	return s.Store.RecordSent(ctx, args)
}

func (s sentFailing) FindSenders(ctx context.Context, vendor, id string) ([]string, error) {
	if s.fail.Load() {
		return nil, keybrake.Errorf(keybrake.EUNAVAILABLE, "store down")
	}
	return s.Store.FindSenders(ctx, vendor, id)
}

// TestSentScopeStoreFails: a read whose sender keybrake cannot look up is
// refused (503, nothing forwarded: fail closed); a send whose ids cannot
// be recorded is still answered (the email was sent and counted), and its
// email then reads as unknown.
func TestSentScopeStoreFails(t *testing.T) {
	var fail atomic.Bool
	up := &upstreamLog{}
	e := MustOpenVendors(t, logUpstream(up), func(s *khttp.Server) { s.Store = sentFailing{s.Store, &fail} })
	_, a := e.CreateKey(t, `{"vendor":"resend","daily_usd_cap":"1"}`)
	req := &resendgo.SendEmailRequest{From: "login@example.com", To: []string{"a@example.com"}, Subject: "code", Text: "123123"}
	id := resendSendAs(t, e, a, req)
	fail.Store(true)
	resp, body := e.Do(t, "GET", "/resend/emails/"+id, "", map[string]string{"Authorization": "Bearer " + a})
	if resp.StatusCode != http.StatusServiceUnavailable || up.naming(id) != 0 {
		t.Fatalf("read with the store down: %d %s (forwarded: %q)", resp.StatusCode, body, up.reqs)
	}
	unrecorded := resendSendAs(t, e, a, req)
	fail.Store(false)
	_, err := e.ResendClient(t, a).Emails.Get(unrecorded)
	wantResendNotFound(t, "read an email whose id was not recorded", err)
	if _, err := e.ResendClient(t, a).Emails.Get(id); err != nil {
		t.Fatalf("read once the store is back: %v", err)
	}
}

// TestSentPruned: retention forgets who sent an object once the record is
// older than the sent retention (serve --sent-retention); the object is
// then every key's unknown id, its own sender's too: the vendor's 404, and
// nothing forwarded. A younger one is still read by its sender.
func TestSentPruned(t *testing.T) {
	up := &upstreamLog{}
	e := MustOpenVendors(t, logUpstream(up))
	_, tw := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1"}`)
	_, rs := e.CreateKey(t, `{"vendor":"resend","daily_usd_cap":"1"}`)
	send := func() (sid, email string) {
		t.Helper()
		m, err := e.TwilioClient(t, tw).Api.CreateMessage(sms("+14155550123"))
		if err != nil {
			t.Fatal(err)
		}
		return *m.Sid, resendSendAs(t, e, rs, &resendgo.SendEmailRequest{From: "login@example.com", To: []string{"alice@example.com"}, Subject: "code", Text: "123456"})
	}
	oldSid, oldEmail := send()
	e.Clock.Advance(30 * 24 * time.Hour)
	newSid, newEmail := send()
	e.Clock.Advance(15 * 24 * time.Hour) // the first ones are 45 days old, the second 15

	p := &keybrake.Pruner{Store: e.Store, Sent: keybrake.MinSentRetention, Pause: time.Microsecond, Now: e.Clock.Now}
	if rep, err := p.Once(context.Background()); err != nil || rep.Sent != 2 || rep.Events != 0 || rep.Reservations != 0 {
		t.Fatalf("pass = %+v, %v; want the two records older than %s only", rep, err, keybrake.MinSentRetention)
	}
	if m, err := e.TwilioClient(t, tw).Api.FetchMessage(newSid, nil); err != nil || *m.Sid != newSid {
		t.Fatalf("the sender reads its kept message: %v", err)
	}
	if got, err := e.ResendClient(t, rs).Emails.Get(newEmail); err != nil || got.Id != newEmail {
		t.Fatalf("the sender reads its kept email: %v", err)
	}
	before := up.naming(oldSid) + up.naming(oldEmail)
	_, err := e.TwilioClient(t, tw).Api.FetchMessage(oldSid, nil)
	twilioErr(t, err, 404, twilio.CodeNotFound)
	_, err = e.ResendClient(t, rs).Emails.Get(oldEmail)
	wantResendNotFound(t, "the sender reads its pruned email", err)
	if after := up.naming(oldSid) + up.naming(oldEmail); after != before {
		t.Fatalf("the reads of pruned ids were forwarded: %q", up.reqs)
	}
}

// TestAttackTwilio_ListOtherKeysMessages: a key given messages.list (or
// calls.list) read every message of the account, another key's one-time
// codes included, even when its twilio_scope.allowed_from gave it senders
// of its own. Now such a key lists only with Twilio's From filter naming
// one of its senders (kept on every page, so Twilio's paging works as it
// does); a list without it, or from another key's number, is refused and
// nothing is forwarded. A key without allowed_from still lists everything
// (docs/money-model.md).
func TestAttackTwilio_ListOtherKeysMessages(t *testing.T) {
	up := &upstreamLog{}
	e := MustOpenVendors(t, logUpstream(up))
	lists := `"allowed_endpoints":["messages.create","messages.list","calls.create","calls.list"]`
	_, a := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"5",`+lists+`,"twilio_scope":{"allowed_from":["+14155550100"]}}`)
	_, b := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"5",`+lists+`,"twilio_scope":{"allowed_from":["+14155550199"]}}`)
	ta, tb := e.TwilioClient(t, a), e.TwilioClient(t, b)
	if _, err := tb.Api.CreateMessage(sms("+14155550123").SetFrom("+14155550199").SetBody("B's code is 999999")); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := ta.Api.CreateMessage(sms("+14155550124")); err != nil {
			t.Fatal(err)
		}
	}
	forwarded := len(up.reqs)
	for _, p := range []*api.ListMessageParams{{}, (&api.ListMessageParams{}).SetFrom("+14155550199"), (&api.ListMessageParams{}).SetTo("+14155550123")} {
		got, err := ta.Api.ListMessage(p)
		for _, m := range got {
			if strings.Contains(*m.Body, "999999") {
				t.Fatalf("A listed B's message: %+v", p)
			}
		}
		twilioErr(t, err, 403, twilio.CodeForbidden)
	}
	if _, err := ta.Api.ListCall(&api.ListCallParams{}); err == nil {
		t.Fatal("A lists the account's calls without From")
	}
	auth := map[string]string{"Authorization": basicAuth(twiliosim.DefaultAccountSid, a)}
	base := "/twilio/2010-04-01/Accounts/" + twiliosim.DefaultAccountSid + "/Messages.json?"
	for _, q := range []string{"from=%2B14155550100", "From=%2B14155550100&FROM=%2B14155550199", "From=%2B14155550100&From=%2B14155550199", "From=+14155550100"} {
		if resp, body := e.Do(t, "GET", base+q, "", auth); resp.StatusCode != http.StatusForbidden {
			t.Errorf("A GET ?%s: %d %s", q, resp.StatusCode, body)
		}
	}
	if len(up.reqs) != forwarded {
		t.Fatalf("refused lists were forwarded: %q", up.reqs[forwarded:])
	}
	// Narrowed to its own sender, across Twilio's pages.
	own, err := ta.Api.ListMessage((&api.ListMessageParams{}).SetFrom("+14155550100").SetPageSize(2))
	if err != nil || len(own) != 3 {
		t.Fatalf("A lists its own messages, two a page: %d, %v", len(own), err)
	}
	for _, m := range own {
		if *m.From != "+14155550100" {
			t.Fatalf("A's list has a message from %s", *m.From)
		}
	}
	// A key without allowed_from lists the account, as the operator chose.
	_, c := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"5",`+lists+`}`)
	if all, err := e.TwilioClient(t, c).Api.ListMessage(&api.ListMessageParams{}); err != nil || len(all) != 4 {
		t.Fatalf("an unscoped key lists %d messages, %v; want all 4", len(all), err)
	}
}

// TestAttackSent_SubresourcesAndOtherAccounts: what the red team tried
// against the per-key ids after they landed, and held: a message's or a
// call's sub-resources (media, feedback, recordings, notifications,
// streams, transcriptions), A's sid under another account's path or
// under the account's top level, doubled slashes, and a Resend email's
// sub-paths, with any method, are refused before anything naming A's
// objects is forwarded (keybrake parses only the paths it proxies).
func TestAttackSent_SubresourcesAndOtherAccounts(t *testing.T) {
	up := &upstreamLog{}
	e := MustOpenVendors(t, logUpstream(up))
	all := `"allowed_endpoints":["messages.create","messages.fetch","messages.update","messages.delete","calls.create","calls.fetch","calls.update"]`
	_, a := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"5",`+all+`}`)
	_, b := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"5",`+all+`}`)
	ta := e.TwilioClient(t, a)
	msg, err := ta.Api.CreateMessage(sms("+14155550123"))
	if err != nil {
		t.Fatal(err)
	}
	call, err := ta.Api.CreateCall((&api.CreateCallParams{}).SetTo("+14155550124").SetFrom("+14155550100").SetTimeLimit(60).
		SetTwiml(`<Response><Play>https://example.com/hold.mp3</Play></Response>`))
	if err != nil {
		t.Fatal(err)
	}
	sid, csid := *msg.Sid, *call.Sid
	acct := twiliosim.DefaultAccountSid
	other := "AC" + strings.Repeat("0", 32)
	if other == acct {
		other = "AC" + strings.Repeat("1", 32)
	}
	root := "/twilio/2010-04-01/Accounts/" + acct
	var paths []string
	for _, sub := range []string{"Media", "Media/ME" + strings.Repeat("a", 32), "Feedback"} {
		paths = append(paths, root+"/Messages/"+sid+"/"+sub+".json")
	}
	for _, sub := range []string{"Recordings", "Notifications", "Streams", "Transcriptions", "Payments", "Siprec", "Events", "UserDefinedMessages"} {
		paths = append(paths, root+"/Calls/"+csid+"/"+sub+".json")
	}
	paths = append(paths,
		"/twilio/2010-04-01/Accounts/"+other+"/Messages/"+sid+".json",
		"/twilio/2010-04-01/Accounts/"+other+"/Calls/"+csid+".json",
		root+"/Messages//"+sid+".json",
		root+"//Messages/"+sid+".json",
		"/twilio//2010-04-01/Accounts/"+acct+"/Messages/"+sid+".json",
		root+"/Messages/"+sid+"/.json",
		root+"/Messages/"+sid+"/../"+sid+".json",
		root+"/Messages/./"+sid+".json",
		root+"/SMS/Messages/"+sid+".json",
		root+"/Recordings/"+csid+".json",
		root+"/Notifications/"+csid+".json",
		root+"/Messages/"+sid+";.json",
		root+"/Messages/"+sid+".json;x",
	)
	for _, method := range []string{"GET", "POST", "DELETE"} {
		for _, path := range paths {
			body := ""
			if method == "POST" {
				body = "Body="
			}
			resp, out := e.Do(t, method, path, body, map[string]string{"Authorization": basicAuth(acct, b), "Content-Type": "application/x-www-form-urlencoded"})
			if resp.StatusCode < 400 {
				t.Errorf("B %s %s: %d %s", method, path, resp.StatusCode, out)
			}
		}
	}
	for _, id := range []string{sid, csid} {
		for _, r := range up.reqs {
			if strings.Contains(strings.ToLower(r), strings.ToLower(id)) && !strings.HasPrefix(r, "GET ") {
				t.Fatalf("a write naming %s was forwarded: %q", id, up.reqs)
			}
		}
	}
	if n := up.naming(sid); n != 0 {
		t.Fatalf("%d requests naming A's message were forwarded: %q", n, up.reqs)
	}

	// Resend: an email's sub-paths, for every method.
	_, ra := e.CreateKey(t, `{"vendor":"resend","daily_usd_cap":"5",`+resendAll+`}`)
	_, rb := e.CreateKey(t, `{"vendor":"resend","daily_usd_cap":"5",`+resendAll+`}`)
	id := resendSendAs(t, e, ra, &resendgo.SendEmailRequest{From: "login@example.com", To: []string{"alice@example.com"},
		Subject: "Your sign-in link", Text: "https://app.example.com/login?token=secret"})
	before := up.naming(id)
	for _, method := range []string{"GET", "POST", "PATCH", "DELETE"} {
		for _, path := range []string{
			"/resend/emails/" + id + "/attachments",
			"/resend/emails/" + id + "/attachments/" + id,
			"/resend/emails/" + id + "/cancel/",
			"/resend/emails/" + id + "/cancel/x",
			"/resend/emails/./" + id,
			"/resend/emails/x/../" + id,
			"/resend/emails/" + id + ".json",
			"/resend/emails/" + id + ";x",
			"/resend/Emails/" + id,
		} {
			resp, out := e.Do(t, method, path, `{"scheduled_at":"in 1 hour"}`, map[string]string{"Authorization": "Bearer " + rb, "Content-Type": "application/json"})
			if resp.StatusCode < 400 {
				t.Errorf("B %s %s: %d %s", method, path, resp.StatusCode, out)
			}
		}
	}
	if n := up.naming(id); n != before {
		t.Fatalf("B's paths naming A's email were forwarded: %q", up.reqs)
	}
}

// TestAttackTwilio_ListParamLookalikes: under allowed_from a list was
// checked for exactly one parameter named From, and every other parameter
// went to Twilio as sent: From[]=, "From\x00"=, "From "= carried another
// key's number next to the one keybrake checked, for whichever stack on
// Twilio's side reads such a name as From (a C string ends at the NUL; a
// form parser trims or strips []). Under allowed_from a list now takes
// only Twilio's own filters and paging parameters; the SDK's lists, with
// their date filters and paging, work as before.
func TestAttackTwilio_ListParamLookalikes(t *testing.T) {
	up := &upstreamLog{}
	e := MustOpenVendors(t, logUpstream(up))
	lists := `"allowed_endpoints":["messages.create","messages.list","calls.create","calls.list"]`
	_, a := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"5",`+lists+`,"twilio_scope":{"allowed_from":["+14155550100"]}}`)
	ta := e.TwilioClient(t, a)
	for range 3 {
		if _, err := ta.Api.CreateMessage(sms("+14155550124")); err != nil {
			t.Fatal(err)
		}
	}
	forwarded := len(up.reqs)
	auth := map[string]string{"Authorization": basicAuth(twiliosim.DefaultAccountSid, a)}
	acct := "/twilio/2010-04-01/Accounts/" + twiliosim.DefaultAccountSid
	for _, q := range []string{
		"/Messages.json?From=%2B14155550100&From%00=%2B14155550199",
		"/Messages.json?From=%2B14155550100&From%5B%5D=%2B14155550199",
		"/Messages.json?From=%2B14155550100&From%20=%2B14155550199",
		"/Messages.json?From=%2B14155550100&%20From=%2B14155550199",
		"/Messages.json?From=%2B14155550100&From.=%2B14155550199",
		"/Calls.json?From=%2B14155550100&Fr%C3%B6m=%2B14155550199",
	} {
		if resp, body := e.Do(t, "GET", acct+q, "", auth); resp.StatusCode != http.StatusForbidden {
			t.Errorf("A GET %s: %d %s", q, resp.StatusCode, body)
		}
	}
	if len(up.reqs) != forwarded {
		t.Fatalf("refused lists were forwarded: %q", up.reqs[forwarded:])
	}
	if _, err := ta.Api.ListMessage((&api.ListMessageParams{}).SetFrom("+14155550100").
		SetDateSentAfter(time.Now().Add(-48 * time.Hour)).SetDateSentBefore(time.Now().Add(time.Hour))); err != nil {
		t.Fatalf("A lists its own messages by date: %v", err)
	}
	own, err := ta.Api.ListMessage((&api.ListMessageParams{}).SetFrom("+14155550100").SetTo("+14155550124").SetPageSize(1))
	if err != nil || len(own) != 3 {
		t.Fatalf("A lists its own messages with the SDK's filters, one a page: %d, %v", len(own), err)
	}
	if _, err := ta.Api.ListCall((&api.ListCallParams{}).SetFrom("+14155550100").SetStatus("completed").
		SetStartTimeAfter(time.Now().Add(-48 * time.Hour)).SetEndTimeBefore(time.Now().Add(time.Hour)).SetPageSize(5)); err != nil {
		t.Fatalf("A lists its own calls with the SDK's filters: %v", err)
	}
}
