package http_test

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	resendgo "github.com/resend/resend-go/v3"
	twiliogo "github.com/twilio/twilio-go"
	"github.com/twilio/twilio-go/client"
	api "github.com/twilio/twilio-go/rest/api/v2010"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/internal/simfault"
	"github.com/keybrake/keybrake/resend"
	"github.com/keybrake/keybrake/resendsim"
	"github.com/keybrake/keybrake/twilio"
	"github.com/keybrake/keybrake/twiliosim"
)

// VendorEnv is an Env with twiliosim and resendsim as the upstreams of
// /twilio/… and /resend/….
type VendorEnv struct {
	*Env
	Twilio *twiliosim.Server
	Resend *resendsim.Server
}

// MustOpenVendors starts a VendorEnv: US SMS at $0.02 a segment, voice at
// $0.10 a minute, email at $0.001 plus $0.0005 a recipient.
func MustOpenVendors(tb testing.TB, opts ...Option) *VendorEnv {
	tb.Helper()
	return mustOpenVendorsSim(tb, twiliosim.Options{}, opts...)
}

// mustOpenVendorsSim is MustOpenVendors with twiliosim's options (its
// clock is always the server's).
func mustOpenVendorsSim(tb testing.TB, sim twiliosim.Options, opts ...Option) *VendorEnv {
	tb.Helper()
	ve := &VendorEnv{}
	rates, err := twilio.ParseRates("US sms=0.0200 mms=0.0400 voice=0.1000")
	if err != nil {
		tb.Fatal(err)
	}
	ve.Env = MustOpen(tb, func(s *khttp.Server) {
		sim.Now = s.Now
		ve.Twilio = twiliosim.New(sim)
		ts := httptest.NewServer(ve.Twilio)
		tb.Cleanup(ts.Close)
		ve.Resend = resendsim.New(resendsim.Options{Now: s.Now})
		rs := httptest.NewServer(ve.Resend)
		tb.Cleanup(rs.Close)
		// The operator declares the account's default voice, as
		// twiliosim's Console has it (man unless set).
		voice := cmp.Or(sim.DefaultVoice, "man")
		s.Twilio = &khttp.TwilioConfig{Upstream: mustURL(tb, ts.URL), AccountSid: twiliosim.DefaultAccountSid,
			Secret: twiliosim.DefaultAuthToken, Rates: rates, DefaultVoice: voice}
		s.Resend = &khttp.ResendConfig{Upstream: mustURL(tb, rs.URL), APIKey: resendsim.DefaultAPIKey,
			Pricer: resend.Pricer{PerEmail: 1000, PerRecipient: 500}}
		for _, o := range opts {
			o(s)
		}
	})
	return ve
}

// toKeybrake sends every request twilio-go makes to keybrake's /twilio,
// as docs/vendors.md tells users to.
type toKeybrake struct{ base *url.URL }

func (t toKeybrake) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.URL.Scheme, r.URL.Host = t.base.Scheme, t.base.Host
	r.URL.Path = t.base.Path + r.URL.Path
	r.URL.RawPath, r.Host = "", ""
	return http.DefaultTransport.RoundTrip(r)
}

// TwilioClient returns twilio-go pointed at keybrake with vault key secret
// in the alphanumeric form twilio-go accepts.
func (e *VendorEnv) TwilioClient(tb testing.TB, secret string) *twiliogo.RestClient {
	tb.Helper()
	tb.Setenv("TWILIO_EDGE", "")
	tb.Setenv("TWILIO_REGION", "")
	c := &client.Client{
		Credentials: client.NewCredentials(twiliosim.DefaultAccountSid, twilio.AlnumVaultKey(secret)),
		HTTPClient:  &http.Client{Transport: toKeybrake{mustURL(tb, e.Server.URL()+"/twilio")}, Timeout: 30 * time.Second},
	}
	c.SetAccountSid(twiliosim.DefaultAccountSid)
	return twiliogo.NewRestClientWithParams(twiliogo.ClientParams{Client: c})
}

// ResendClient returns resend-go pointed at keybrake's /resend/.
func (e *VendorEnv) ResendClient(tb testing.TB, secret string) *resendgo.Client {
	tb.Helper()
	c := resendgo.NewCustomClient(&http.Client{Timeout: 30 * time.Second}, secret)
	c.BaseURL = mustURL(tb, e.Server.URL()+"/resend/")
	return c
}

func sms(to string) *api.CreateMessageParams {
	return (&api.CreateMessageParams{}).SetTo(to).SetFrom("+14155550100").SetBody("Your code is 123456")
}

func twilioErr(tb testing.TB, err error, status, code int) {
	tb.Helper()
	var e *client.TwilioRestError
	if !errors.As(err, &e) {
		tb.Fatalf("err = %v (%T), want a TwilioRestError", err, err)
	}
	if e.Status != status || e.Code != code {
		tb.Fatalf("error = %d/%d %q, want %d/%d", e.Status, e.Code, e.Message, status, code)
	}
}

func TestTwilioSDKUSDCapExactUnderConcurrency(t *testing.T) {
	e := MustOpenVendors(t)
	// 25 one-segment SMS at $0.02 fit the $0.50 daily cap; 50 try at once.
	id, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"0.50"}`)
	tw := e.TwilioClient(t, secret)
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, err := tw.Api.CreateMessage(sms(fmt.Sprintf("+1415555%04d", i)))
			var te *client.TwilioRestError
			switch {
			case err == nil:
				ok.Add(1)
			case errors.As(err, &te) && te.Status == 429 && te.Code == twilio.CodeTooManyRequests:
				refused.Add(1)
			default:
				t.Errorf("send %d: %v", i, err)
			}
		}(i)
	}
	wg.Wait()
	if ok.Load() != 25 || refused.Load() != 25 {
		t.Fatalf("sent %d, refused %d; want 25 and 25", ok.Load(), refused.Load())
	}
	if n := len(e.Twilio.GroundTruth().Messages); n != 25 {
		t.Fatalf("twiliosim created %d messages, want 25", n)
	}
	sp := e.Spend(t, id)
	if sp.Day != 500000 || sp.Held != 500000 {
		t.Fatalf("spend = %+v, want $0.50 held until Twilio prices", sp)
	}

	// Twilio reports the price later; the resolver settles it (twiliosim
	// bills its own default US rate, below the operator's $0.02).
	e.Clock.Advance(10 * time.Second)
	e.MustResolve(t)
	sp = e.Spend(t, id)
	billed := e.Twilio.Billed()
	if sp.Held != 0 || sp.Day != billed.Micros {
		t.Fatalf("after pricing: spend = %+v, twiliosim billed %d", sp, billed.Micros)
	}
}

func TestTwilioRefusalsInTwilioShape(t *testing.T) {
	e := MustOpenVendors(t)
	_, stripeSecret := e.CreateKey(t, `{"daily_usd_cap":"5"}`)
	_, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"5"}`)
	t.Run("ErrOtherVendorsKey", func(t *testing.T) {
		_, err := e.TwilioClient(t, stripeSecret).Api.CreateMessage(sms("+14155550123"))
		twilioErr(t, err, 403, twilio.CodeForbidden)
	})
	t.Run("ErrUnknownCountry", func(t *testing.T) {
		_, err := e.TwilioClient(t, secret).Api.CreateMessage(sms("+447700900123"))
		twilioErr(t, err, 403, twilio.CodeForbidden)
	})
	t.Run("ErrNotAllowedEndpoint", func(t *testing.T) {
		_, err := e.TwilioClient(t, secret).Api.CreateCall((&api.CreateCallParams{}).SetTo("+14155550123").SetFrom("+14155550100").SetTwiml("<Response><Say>hi</Say></Response>"))
		twilioErr(t, err, 403, twilio.CodeForbidden)
	})
	t.Run("ErrWrongPassword", func(t *testing.T) {
		_, err := e.TwilioClient(t, "vault_key_nope").Api.CreateMessage(sms("+14155550123"))
		twilioErr(t, err, 401, twilio.CodeAuthenticate)
	})
	t.Run("ErrTwoAuthorizationHeaders", func(t *testing.T) {
		// The first names a valid vault key: the second must not ride along
		// to whoever reads the last one.
		basic := func(pw string) string {
			return "Basic " + base64.StdEncoding.EncodeToString([]byte(twiliosim.DefaultAccountSid+":"+pw))
		}
		req, _ := http.NewRequest("POST", e.Server.URL()+"/twilio/2010-04-01/Accounts/"+twiliosim.DefaultAccountSid+"/Messages.json",
			strings.NewReader("To=%2B14155550123&From=%2B14155550100&Body=hi"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Add("Authorization", basic(twilio.AlnumVaultKey(secret)))
		req.Header.Add("Authorization", basic("other"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 401 || !strings.Contains(string(body), "more than one Authorization") {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	})
	t.Run("ErrTwilioKeyOnStripe", func(t *testing.T) {
		resp, body := e.Do(t, "POST", "/v1/charges", "amount=100&currency=usd&source=tok_visa", map[string]string{"Authorization": "Bearer " + secret})
		if resp.StatusCode != 403 || !strings.Contains(string(body), "is for twilio") {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	})
	if n := len(e.Twilio.GroundTruth().Messages); n != 0 {
		t.Fatalf("refused requests created %d messages", n)
	}
}

func TestTwilioAccountFetchRedacted(t *testing.T) {
	e := MustOpenVendors(t)
	_, secret := e.CreateKey(t, `{"vendor":"twilio","allowed_endpoints":["accounts.fetch"]}`)
	acct, err := e.TwilioClient(t, secret).Api.FetchAccount(twiliosim.DefaultAccountSid)
	if err != nil {
		t.Fatal(err)
	}
	if acct.AuthToken != nil {
		t.Fatalf("auth_token reached the client: %q", *acct.AuthToken)
	}
	resp, body := e.Do(t, "GET", "/twilio/2010-04-01/Accounts/"+twiliosim.DefaultAccountSid+".json", "",
		map[string]string{"Authorization": twilio.BasicAuth(twiliosim.DefaultAccountSid, secret)})
	if resp.StatusCode != 200 || strings.Contains(string(body), twiliosim.DefaultAuthToken) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

func TestTwilioUncertainStaysCounted(t *testing.T) {
	e := MustOpenVendors(t)
	id, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1"}`)
	if _, err := e.Twilio.AddFault(simfaultCut()); err != nil {
		t.Fatal(err)
	}
	_, err := e.TwilioClient(t, secret).Api.CreateMessage(sms("+14155550123"))
	twilioErr(t, err, 503, twilio.CodeUnavailable)
	e.Clock.Advance(time.Hour)
	if _, err := e.Server.Resolve(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Found by the lookup (vendor_lookup_test.go) and settled at Twilio's
	// price, never released.
	if n, sp := len(e.Twilio.GroundTruth().Messages), e.Spend(t, id); n != 1 || sp.Day != e.Twilio.Billed().Micros || sp.Uncertain != 0 {
		t.Fatalf("sent %d, spend %+v: a lost answer must be found and settled", n, sp)
	}
}

func TestResendSDKSendAndBatch(t *testing.T) {
	e := MustOpenVendors(t)
	// $0.0015 per one-recipient email: the $0.006 cap holds 4.
	id, secret := e.CreateKey(t, `{"vendor":"resend","daily_usd_cap":"0.006"}`)
	rs := e.ResendClient(t, secret)
	mail := func(to string) *resendgo.SendEmailRequest {
		return &resendgo.SendEmailRequest{From: "Acme <billing@example.com>", To: []string{to}, Subject: "Invoice", Text: "hi"}
	}
	if _, err := rs.Emails.Send(mail("a@x.com")); err != nil {
		t.Fatal(err)
	}
	// 3 more fit exactly; a batch of 4 does not, and sends none of it.
	_, err := rs.Batch.Send([]*resendgo.SendEmailRequest{mail("b@x.com"), mail("c@x.com"), mail("d@x.com"), mail("e@x.com")})
	var rl *resendgo.RateLimitError
	if !errors.As(err, &rl) {
		t.Fatalf("batch over the cap: err = %v (%T), want a 429", err, err)
	}
	if b := e.Resend.Billed(); b.Emails != 1 {
		t.Fatalf("a refused batch sent %d emails", b.Emails-1)
	}
	out, err := rs.Batch.Send([]*resendgo.SendEmailRequest{mail("b@x.com"), mail("c@x.com"), mail("d@x.com")})
	if err != nil || len(out.Data) != 3 {
		t.Fatalf("batch = %+v %v", out, err)
	}
	if sp := e.Spend(t, id); sp.Day != 6000 || e.Resend.Billed().Emails != 4 {
		t.Fatalf("spend = %+v, billed %+v", sp, e.Resend.Billed())
	}
}

func TestResendRefusalsInResendShape(t *testing.T) {
	e := MustOpenVendors(t)
	_, twilioSecret := e.CreateKey(t, `{"vendor":"twilio"}`)
	_, secret := e.CreateKey(t, `{"vendor":"resend"}`)
	for name, tt := range map[string]struct {
		secret, path, body string
		status             int
		name               string
	}{
		"ErrOtherVendorsKey": {twilioSecret, "/resend/emails", `{"from":"a@example.com","to":"b@x.com","subject":"s","text":"t"}`, 403, "validation_error"},
		"ErrNoAPIKeys":       {secret, "/resend/api-keys", `{"name":"x"}`, 404, "not_found"},
		"ErrDuplicateField":  {secret, "/resend/emails", `{"from":"a@example.com","to":"b@x.com","to":"c@y.com","subject":"s","text":"t"}`, 422, "validation_error"},
		"ErrNotVaultKey":     {"re_real_key", "/resend/emails", `{}`, 403, "invalid_api_key"},
	} {
		resp, body := e.Do(t, "POST", tt.path, tt.body, map[string]string{"Authorization": "Bearer " + tt.secret, "Content-Type": "application/json"})
		if resp.StatusCode != tt.status || !strings.Contains(string(body), `"name":"`+tt.name+`"`) || !strings.Contains(string(body), `"statusCode":`) {
			t.Errorf("%s: %d %s", name, resp.StatusCode, body)
		}
	}
	if n := len(e.Resend.GroundTruth().Emails); n != 0 {
		t.Fatalf("refused requests sent %d emails", n)
	}
}

func simfaultCut() simfault.Fault {
	return simfault.Fault{Method: "POST", Path: "*", Mode: simfault.CutAfter}
}

var _ = keybrake.CountEmails
