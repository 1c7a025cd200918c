package http_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	resendgo "github.com/resend/resend-go/v3"
	twiliogo "github.com/twilio/twilio-go"
	"github.com/twilio/twilio-go/client"
	api "github.com/twilio/twilio-go/rest/api/v2010"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/internal/simfault"
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

// TestAttackResend_RecipientsPastEmailCap: Resend counts every to, cc and
// bcc recipient as one email against the account's quota, which its plans
// bill; the email count cap counted one per email, so a key capped at 3
// emails a day sent 50 recipients' worth in one request.
func TestAttackResend_RecipientsPastEmailCap(t *testing.T) {
	e := MustOpenVendors(t)
	_, secret := e.CreateKey(t, `{"vendor":"resend","daily_email_cap":3}`)
	rs := e.ResendClient(t, secret)
	var to []string
	for i := range 50 {
		to = append(to, fmt.Sprintf("r%d@example.com", i))
	}
	_, err := rs.Emails.Send(&resendgo.SendEmailRequest{From: "billing@example.com", To: to[:30], Cc: to[30:40], Bcc: to[40:], Subject: "s", Text: "t"})
	var rl *resendgo.RateLimitError
	if err != nil && !errors.As(err, &rl) {
		t.Fatal(err)
	}
	// What fits still goes: three recipients in one email.
	if _, err := rs.Emails.Send(&resendgo.SendEmailRequest{From: "billing@example.com", To: to[:3], Subject: "s", Text: "t"}); err != nil {
		t.Fatalf("three recipients under a cap of 3: %v", err)
	}
	if b := e.Resend.Billed(); b.Recipients > 3 {
		t.Fatalf("Resend counted %d emails (%d recipients) against its quota past a daily cap of 3", b.Recipients, b.Recipients)
	}
}

// TestAttackTwilio_CallFallbackUrl: a call with closed inline Twiml was
// priced at its own minutes even with a FallbackUrl, whose TwiML Twilio
// fetches when the call's instructions fail, and which may <Dial> any
// number for as long as it likes: now unpriced, so a capped key refuses it.
func TestAttackTwilio_CallFallbackUrl(t *testing.T) {
	e := MustOpenVendors(t)
	_, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"5","allowed_endpoints":["calls.create"]}`)
	call := (&api.CreateCallParams{}).SetTo("+14155550123").SetFrom("+14155550100").SetTimeLimit(60).
		SetTwiml(`<Response><Play>https://example.com/missing.mp3</Play></Response>`).
		SetFallbackUrl("https://attacker.example/dial-premium.xml")
	_, err := e.TwilioClient(t, secret).Api.CreateCall(call)
	twilioErr(t, err, 403, twilio.CodeForbidden)
	if n := len(e.Twilio.GroundTruth().Calls); n != 0 {
		t.Fatalf("twiliosim placed %d calls", n)
	}
}

// TestAttackDelegate_ParentNarrowedToScopeOrCounts: a child of a Twilio key
// is minted while the parent has no scope and no count caps; an admin then
// narrows the parent (only +1415 numbers, one message a day). The child
// kept sending anywhere, and without limit on messages: checkAncestors
// compared caps, lists and guards, not scopes or count caps.
func TestAttackDelegate_ParentNarrowedToScopeOrCounts(t *testing.T) {
	for name, narrow := range map[string]string{
		"Scope":     `{"twilio_scope":{"allowed_number_prefixes":["+1415"]}}`,
		"CountCaps": `{"daily_message_cap":1}`,
	} {
		t.Run(name, func(t *testing.T) {
			e := MustOpenVendors(t)
			parentID, _ := e.CreateKey(t, `{"vendor":"twilio","total_usd_cap":"10"}`)
			resp, out := e.Admin(t, "POST", "/vault/keys/"+parentID+"/children", `{"total_usd_cap":"1"}`)
			var child struct {
				VaultKey string `json:"vault_key"`
			}
			if json.Unmarshal(out, &child); resp.StatusCode != 201 || child.VaultKey == "" {
				t.Fatalf("mint: %d %s", resp.StatusCode, out)
			}
			if resp, out := e.Admin(t, "PATCH", "/vault/keys/"+parentID, narrow); resp.StatusCode != 200 {
				t.Fatalf("narrow the parent: %d %s", resp.StatusCode, out)
			}
			tw := e.TwilioClient(t, child.VaultKey)
			for i := range 2 {
				_, err := tw.Api.CreateMessage(sms(fmt.Sprintf("+1408555%04d", i)))
				twilioErr(t, err, 403, twilio.CodeForbidden)
			}
			if n := len(e.Twilio.GroundTruth().Messages); n != 0 {
				t.Fatalf("the child sent %d messages past its narrowed parent", n)
			}
		})
	}
}

// TestAttackResend_AmbiguousAddress: net/mail reads RFC 5322's comments,
// groups, quoted local parts and display names holding commas, @ and <…>
// as one address; a parser that splits on commas or takes the first <…>
// (Resend's is not known to keybrake) reads another address, or several,
// outside the key's recipient domains and count. keybrake now takes only
// the two plain forms Resend documents.
func TestAttackResend_AmbiguousAddress(t *testing.T) {
	e := MustOpenVendors(t)
	_, secret := e.CreateKey(t, `{"vendor":"resend","daily_usd_cap":"1","resend_scope":{"allowed_recipient_domains":["example.com"]}}`)
	for _, to := range []string{
		`"x@evil.example, y" <a@example.com>`,
		`"<x@evil.example>" <a@example.com>`,
		`a@example.com (x@evil.example)`,
		`"x@evil.example"@example.com`,
		`G: a@example.com;`,
	} {
		b, _ := json.Marshal(map[string]any{"from": "billing@example.com", "to": to, "subject": "s", "text": "t"})
		resp, body := e.Do(t, "POST", "/resend/emails", string(b), map[string]string{"Authorization": "Bearer " + secret, "Content-Type": "application/json"})
		if resp.StatusCode != 422 {
			t.Errorf("to %s: %d %s", to, resp.StatusCode, body)
		}
	}
	// The plain forms still go.
	b := `{"from":"Acme Billing <billing@example.com>","to":["a@example.com","Ann Lee <b@example.com>"],"subject":"s","text":"t"}`
	if resp, body := e.Do(t, "POST", "/resend/emails", b, map[string]string{"Authorization": "Bearer " + secret, "Content-Type": "application/json"}); resp.StatusCode != 200 {
		t.Fatalf("plain addresses: %d %s", resp.StatusCode, body)
	}
	if n := len(e.Resend.GroundTruth().Emails); n != 1 {
		t.Fatalf("resendsim sent %d emails, want 1", n)
	}
}

// TestAttackResend_IdempotencyKeyAcrossVaultKeys: Resend scopes an
// Idempotency-Key by its API key, which every vault key shares, and its
// docs suggest predictable keys (welcome-user/123). One vault key sending
// first under another's key got the other's send swallowed (Resend
// replays the first answer) or, sending second, received the other's
// email id, which emails.get then reads. keybrake now namespaces the key
// upstream by vault key.
func TestAttackResend_IdempotencyKeyAcrossVaultKeys(t *testing.T) {
	e := MustOpenVendors(t)
	_, a := e.CreateKey(t, `{"vendor":"resend","daily_usd_cap":"1"}`)
	_, b := e.CreateKey(t, `{"vendor":"resend","daily_usd_cap":"1"}`)
	body := `{"from":"billing@example.com","to":"user@example.com","subject":"Welcome","text":"hi"}`
	send := func(secret string) string {
		resp, out := e.Do(t, "POST", "/resend/emails", body, map[string]string{"Authorization": "Bearer " + secret,
			"Content-Type": "application/json", "Idempotency-Key": "welcome-user/123"})
		var v struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(out, &v); resp.StatusCode != 200 || v.ID == "" {
			t.Fatalf("send: %d %s", resp.StatusCode, out)
		}
		return v.ID
	}
	idA, idB := send(a), send(b)
	if idA == idB {
		t.Fatalf("vault key B got vault key A's email %s", idA)
	}
	if again := send(b); again != idB {
		t.Fatalf("B's own retry got %s, want its first answer %s", again, idB)
	}
	if n := len(e.Resend.GroundTruth().Emails); n != 2 {
		t.Fatalf("resendsim sent %d emails, want one for each key", n)
	}
}

// TestAttackTwilio_CrownDependencyMobileAsGB: Jersey, Guernsey and Isle of
// Man mobiles are +44 numbers that Twilio prices as their own countries,
// not at Britain's rates. keybrake read them as GB, so a key limited to
// allowed_countries GB reached them, priced at the GB rate.
func TestAttackTwilio_CrownDependencyMobileAsGB(t *testing.T) {
	e := MustOpenVendors(t, func(s *khttp.Server) {
		s.Twilio.Rates = twilio.Rates{"US": {SMS: 20_000}, "GB": {SMS: 50_000, Voice: 50_000}}
	})
	_, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"5","twilio_scope":{"allowed_countries":["GB"]}}`)
	tw := e.TwilioClient(t, secret)
	for _, to := range []string{"+447797712345", "+447781123456", "+447624123456", "+447924123456"} { // JE, GG, IM, IM
		_, err := tw.Api.CreateMessage(sms(to))
		twilioErr(t, err, 403, twilio.CodeForbidden)
	}
	if _, err := tw.Api.CreateMessage(sms("+447700900123")); err != nil {
		t.Fatalf("a GB mobile: %v", err)
	}
	if n := len(e.Twilio.GroundTruth().Messages); n != 1 {
		t.Fatalf("twiliosim sent %d messages, want the GB one only", n)
	}
}

// TestAttackResend_RecipientHeaderUnpriced: a custom Bcc (or To, Cc,
// Resent-*) header names recipients that keybrake neither prices nor
// counts; it was refused under a resend_scope only, and passed on a key
// with caps alone.
func TestAttackResend_RecipientHeaderUnpriced(t *testing.T) {
	e := MustOpenVendors(t)
	_, secret := e.CreateKey(t, `{"vendor":"resend","daily_usd_cap":"1","daily_email_cap":1}`)
	for _, h := range []string{"Bcc", "cc", "Resent-To"} {
		b := `{"from":"billing@example.com","to":"a@example.com","subject":"s","text":"t","headers":{"` + h + `":"r1@example.com, r2@example.com"}}`
		resp, body := e.Do(t, "POST", "/resend/emails", b, map[string]string{"Authorization": "Bearer " + secret, "Content-Type": "application/json"})
		if resp.StatusCode != 422 || !strings.Contains(string(body), "headers") {
			t.Errorf("%s header: %d %s", h, resp.StatusCode, body)
		}
	}
	if n := len(e.Resend.GroundTruth().Emails); n != 0 {
		t.Fatalf("resendsim sent %d emails", n)
	}
}

// TestAttackApproval_LinkFromHostHeader: the approval link of a 402 was
// built from the request's Host header, so a key holder who sent Host:
// console.attacker.example got, to forward to an approver, a link to a
// look-alike console asking for the admin token. The link is built from
// --public-url when set, else from the admin listener's own address, as
// the links in alerts are.
func TestAttackApproval_LinkFromHostHeader(t *testing.T) {
	for _, tt := range []struct {
		name   string
		public string
	}{
		{"PublicURL", "https://keybrake.example/"},
		{"WithoutPublicURL", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := MustOpen(t, func(s *khttp.Server) { s.PublicURL = tt.public })
			want := strings.TrimSuffix(tt.public, "/")
			if want == "" {
				want = e.Server.AdminURL()
			}
			_, secret := e.CreateKey(t, `{"total_usd_cap":100,"approval":{"above_usd":1}}`)
			req, _ := http.NewRequest("POST", e.Server.URL()+"/v1/charges", strings.NewReader("amount=500&currency=usd&source=tok_visa"))
			req.Host = "console.attacker.example"
			req.Header.Set("Authorization", "Bearer "+secret)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Idempotency-Key", "approve-me")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			link := resp.Header.Get("Keybrake-Approval-Url")
			if resp.StatusCode != 402 || !strings.HasPrefix(link, want+"/console/approvals/apr_") || strings.Contains(string(body), "attacker") {
				t.Fatalf("%d link %q (want under %s): %s", resp.StatusCode, link, want, body)
			}
		})
	}
}

// TestAttackTwilio_PremiumVoiceSpeech: a call with closed inline Twiml was
// priced at its minutes only, though Twilio bills a <Say> in a voice other
// than man or woman (Polly.…-Neural, Google.…, ElevenLabs…) per
// character on top, apart from the call's price. One 60-second call
// saying 2,900 characters ten times in a neural voice was reserved at
// $0.10 under a $1 cap, and twiliosim billed $8.80. The speech is now
// priced (characters × loop at SpeechPer100), and kept counted when the
// call settles at its price; loop="0", which repeats it until the call
// ends, is refused as unpriced.
func TestAttackTwilio_PremiumVoiceSpeech(t *testing.T) {
	e := MustOpenVendors(t)
	id, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1","allowed_endpoints":["calls.create"]}`)
	tw := e.TwilioClient(t, secret)
	call := func(voice, loop string, chars int) (*api.ApiV2010Call, error) {
		twiml := `<Response><Say voice="` + voice + `" loop="` + loop + `">` + strings.Repeat("a", chars) + `</Say></Response>`
		return tw.Api.CreateCall((&api.CreateCallParams{}).SetTo("+14155550123").SetFrom("+14155550100").SetTimeLimit(60).SetTwiml(twiml))
	}
	_, err := call("Polly.Joanna-Neural", "10", 2900)
	twilioErr(t, err, 429, twilio.CodeTooManyRequests)
	_, err = call("Polly.Matthew-Generative", "0", 20)
	twilioErr(t, err, 403, twilio.CodeForbidden)
	// A voice given twice: encoding/xml keeps both, Twilio may read the
	// first.
	_, err = call(`Polly.Joanna-Neural" voice="man`, "10", 2900)
	twilioErr(t, err, 403, twilio.CodeForbidden)
	// What fits still goes, and stays counted once Twilio prices the call:
	// 150 characters twice are 4 started hundreds, $0.20 at the default
	// rate, with the $0.10 minute.
	if _, err := call("Google.en-US-Chirp3-HD-Aoede", "2", 150); err != nil {
		t.Fatalf("a short priced Say under the cap: %v", err)
	}
	// The man and woman voices cost nothing beyond the minutes.
	if _, err := call("woman", "0", 20); err != nil {
		t.Fatalf("a basic voice: %v", err)
	}
	e.Clock.Advance(10 * time.Minute)
	e.MustResolve(t)
	b := e.Twilio.Billed()
	if b.Calls != 2 || b.Micros+b.Pending > 1_000_000 {
		t.Fatalf("Twilio billed $%s for %d calls past a $1 cap", b.Micros+b.Pending, b.Calls)
	}
	if sp := e.Spend(t, id); sp.Day < b.Micros+b.Pending {
		t.Fatalf("keybrake counts $%s, Twilio billed $%s", sp.Day, b.Micros+b.Pending)
	}
}

// TestAttackTwilio_DefaultVoiceSpeech: a <Say> without voice speaks in
// the account's default voice, which Twilio's Console can set to a Polly
// voice billed per character; keybrake priced it as free. One call saying
// 2,900 characters ten times was reserved $0.10 (its minute) under a $1
// cap while Twilio billed $8.70 of speech. Now such a <Say> is priced
// unless the operator declares a basic default voice.
func TestAttackTwilio_DefaultVoiceSpeech(t *testing.T) {
	call := func(e *VendorEnv, secret, attrs string, chars int) error {
		twiml := `<Response><Say` + attrs + `>` + strings.Repeat("a", chars) + `</Say></Response>`
		_, err := e.TwilioClient(t, secret).Api.CreateCall((&api.CreateCallParams{}).SetTo("+14155550123").SetFrom("+14155550100").SetTimeLimit(60).SetTwiml(twiml))
		return err
	}
	// The operator has not declared the default voice.
	e := mustOpenVendorsSim(t, twiliosim.Options{DefaultVoice: "Polly.Salli"}, func(s *khttp.Server) { s.Twilio.DefaultVoice = "" })
	id, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1","allowed_endpoints":["calls.create"]}`)
	twilioErr(t, call(e, secret, ` loop="10"`, 2900), 429, twilio.CodeTooManyRequests)
	twilioErr(t, call(e, secret, ` language="en-US" loop="10"`, 2900), 429, twilio.CodeTooManyRequests)
	twilioErr(t, call(e, secret, ` loop="0"`, 20), 403, twilio.CodeForbidden)
	// 150 characters twice: $0.20 of speech and the $0.10 minute fit.
	if err := call(e, secret, ` loop="2"`, 150); err != nil {
		t.Fatalf("a short Say in the default voice under the cap: %v", err)
	}
	e.Clock.Advance(10 * time.Minute)
	e.MustResolve(t)
	b := e.Twilio.Billed()
	if b.Calls != 1 || b.Micros+b.Pending > 1_000_000 {
		t.Fatalf("Twilio billed $%s for %d calls past a $1 cap", b.Micros+b.Pending, b.Calls)
	}
	if sp := e.Spend(t, id); sp.Day < b.Micros+b.Pending {
		t.Fatalf("keybrake counts $%s, Twilio billed $%s", sp.Day, b.Micros+b.Pending)
	}

	// An operator who declares the account's basic default voice pays
	// only the minutes for it, looping or not.
	basic := mustOpenVendorsSim(t, twiliosim.Options{DefaultVoice: "man"})
	_, secret = basic.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1","allowed_endpoints":["calls.create"]}`)
	if err := call(basic, secret, ` loop="0"`, 2900); err != nil {
		t.Fatalf("a Say in a declared basic default voice: %v", err)
	}
}

// TestAttackTwilio_SharedCallingCodeTerritory: territories that share a
// calling code with a larger country were read as that country: Christmas
// and Cocos Islands fixed lines as AU, Abkhazia's +7 840 and +7 940 as RU,
// Northern Cyprus's +90 392 as TR, and every +590 number as Guadeloupe,
// though Saint Barthélemy and Saint Martin draw from the same ranges. A key
// limited to allowed_countries AU, RU, TR or GP reached them, priced at
// that country's rate; an operator rate for CX was never applied.
func TestAttackTwilio_SharedCallingCodeTerritory(t *testing.T) {
	e := MustOpenVendors(t, func(s *khttp.Server) {
		s.Twilio.Rates = twilio.Rates{"AU": {SMS: 50_000}, "CX": {SMS: 500_000}, "RU": {SMS: 50_000}, "TR": {SMS: 50_000},
			"GP": {SMS: 50_000}, "BL": {SMS: 50_000}, "MF": {SMS: 300_000}}
	})
	tw := func(scope string) *twiliogo.RestClient {
		_, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"5","twilio_scope":{"allowed_countries":`+scope+`}}`)
		return e.TwilioClient(t, secret)
	}
	for to, scope := range map[string]string{
		"+61891641234":  `["AU"]`, // Christmas Island
		"+61891621234":  `["AU"]`, // Cocos Islands
		"+78401234567":  `["RU"]`, // Abkhazia
		"+79401234567":  `["RU"]`,
		"+903921234567": `["TR"]`, // Northern Cyprus
		"+590690123456": `["GP"]`, // Guadeloupe, Saint Barthélemy or Saint Martin
	} {
		_, err := tw(scope).Api.CreateMessage(sms(to))
		twilioErr(t, err, 403, twilio.CodeForbidden)
	}
	// The CX rate applies: $0.50 does not fit a $0.10 cap, where AU's
	// $0.05 did; a +590 number is reserved at MF's $0.30, the dearest.
	_, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"0.10"}`)
	for _, to := range []string{"+61891641234", "+590690123456"} {
		_, err := e.TwilioClient(t, secret).Api.CreateMessage(sms(to))
		twilioErr(t, err, 429, twilio.CodeTooManyRequests)
	}
	if n := len(e.Twilio.GroundTruth().Messages); n != 0 {
		t.Fatalf("twiliosim sent %d messages", n)
	}
	// What the scope names still goes.
	if _, err := tw(`["GP","BL","MF"]`).Api.CreateMessage(sms("+590690123456")); err != nil {
		t.Fatalf("a +590 number under GP, BL and MF: %v", err)
	}
	if _, err := tw(`["AU"]`).Api.CreateMessage(sms("+61412345678")); err != nil {
		t.Fatalf("an Australian mobile under AU: %v", err)
	}
}

// TestAttackTwilio_SemicolonSeparator: a form body with a raw ";" was
// split on "&" only, so Body=hi;To=+1876… was one Body to keybrake, while
// a parser that also splits on ";" (as Go's did before 1.17, and others
// still do) reads a second To: a Jamaican number past allowed_countries
// US, priced at the US rate. keybrake cannot know Twilio's parser, so a
// raw semicolon is refused; SDKs send it escaped (%3B).
func TestAttackTwilio_SemicolonSeparator(t *testing.T) {
	e := MustOpenVendors(t)
	_, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1","twilio_scope":{"allowed_countries":["US"]}}`)
	hdr := map[string]string{"Authorization": basicAuth(twiliosim.DefaultAccountSid, secret), "Content-Type": "application/x-www-form-urlencoded"}
	path := "/twilio/2010-04-01/Accounts/" + twiliosim.DefaultAccountSid + "/Messages.json"
	for _, body := range []string{
		"To=%2B14155550123&From=%2B14155550100&Body=hi;To=%2B18765550100",
		"Body=hi;To=%2B18765550100&To=%2B14155550123&From=%2B14155550100",
	} {
		resp, got := e.Do(t, "POST", path, body, hdr)
		if resp.StatusCode != 400 || !strings.Contains(string(got), "semicolon") {
			t.Fatalf("%s: %d %s", body, resp.StatusCode, got)
		}
	}
	// Escaped, it is part of the body.
	resp, got := e.Do(t, "POST", path, "To=%2B14155550123&From=%2B14155550100&Body=hi%3B+there", hdr)
	if resp.StatusCode != 201 {
		t.Fatalf("an escaped semicolon: %d %s", resp.StatusCode, got)
	}
}

// TestAttackResend_HeaderLineBreak: a custom header's value, or the
// subject, with a line break was passed to Resend, which writes them into
// the message's header: "X-Note: hi\r\nBcc: r1@…, r2@…" may add a Bcc
// header naming recipients that keybrake neither prices nor counts, past
// the recipient-header rule of TestAttackResend_RecipientHeaderUnpriced.
// Line breaks in subjects and header values, and header names that are
// not RFC 5322 field names, are now refused on every key.
func TestAttackResend_HeaderLineBreak(t *testing.T) {
	e := MustOpenVendors(t)
	_, secret := e.CreateKey(t, `{"vendor":"resend","daily_usd_cap":"1","daily_email_cap":1}`)
	hdr := map[string]string{"Authorization": "Bearer " + secret, "Content-Type": "application/json"}
	for _, b := range []string{
		`{"from":"billing@example.com","to":"a@example.com","subject":"s","text":"t","headers":{"X-Note":"hi\r\nBcc: r1@example.com, r2@example.com"}}`,
		`{"from":"billing@example.com","to":"a@example.com","subject":"s","text":"t","headers":{"X-Note":"hi\nBcc: r1@example.com"}}`,
		`{"from":"billing@example.com","to":"a@example.com","subject":"s","text":"t","headers":{"X-Note\r\nBcc":"r1@example.com"}}`,
		`{"from":"billing@example.com","to":"a@example.com","subject":"s","text":"t","headers":{"X-Note: x\r\nBcc":"r1@example.com"}}`,
		`{"from":"billing@example.com","to":"a@example.com","subject":"hi\r\nBcc: r1@example.com","text":"t"}`,
	} {
		resp, body := e.Do(t, "POST", "/resend/emails", b, hdr)
		if resp.StatusCode != 422 || !strings.Contains(string(body), "line break") {
			t.Errorf("%s: %d %s", b, resp.StatusCode, body)
		}
	}
	if n := len(e.Resend.GroundTruth().Emails); n != 0 {
		t.Fatalf("resendsim sent %d emails", n)
	}
	// Ordinary custom headers still pass.
	ok := `{"from":"billing@example.com","to":"a@example.com","subject":"s","text":"t","headers":{"X-Entity-Ref-ID":"123","List-Unsubscribe":"<https://example.com/u>"}}`
	if resp, body := e.Do(t, "POST", "/resend/emails", ok, hdr); resp.StatusCode != 200 {
		t.Fatalf("custom headers: %d %s", resp.StatusCode, body)
	}
}

// TestAttackTwilio_OwnNumber: a message or call to one of the account's
// own Twilio numbers was priced as one outbound message or call, though
// Twilio bills it again as inbound, and the number's webhook answers it:
// an auto-reply (back to a From that may be another own number, and so on),
// a forward, a <Dial>, all at the account's expense and out of keybrake's
// sight. Such a create is now unpriced, and refused when the account's
// numbers cannot be read.
func TestAttackTwilio_OwnNumber(t *testing.T) {
	const own = "+14155550199"
	e := mustOpenVendorsSim(t, twiliosim.Options{Numbers: []string{"+14155550100", own}})
	_, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"5"}`)
	tw := e.TwilioClient(t, secret)
	_, err := tw.Api.CreateMessage(sms(own))
	twilioErr(t, err, 403, twilio.CodeForbidden)
	_, err = tw.Api.CreateCall((&api.CreateCallParams{}).SetTo(own).SetFrom("+14155550100").SetTimeLimit(60).
		SetTwiml(`<Response><Say>hi</Say></Response>`))
	twilioErr(t, err, 403, twilio.CodeForbidden)
	if g := e.Twilio.GroundTruth(); len(g.Messages)+len(g.Calls) != 0 {
		t.Fatalf("twiliosim sent %d messages and placed %d calls", len(g.Messages), len(g.Calls))
	}
	if _, err := tw.Api.CreateMessage(sms("+14155550123")); err != nil {
		t.Fatalf("another number: %v", err)
	}
	// A key that may run unpriced operations still reaches it.
	_, open := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"5","allow_unpriced":true}`)
	if _, err := e.TwilioClient(t, open).Api.CreateMessage(sms(own)); err != nil {
		t.Fatalf("allow_unpriced: %v", err)
	}
}

// TestTwilioOwnNumbersUnreadable: when the account's numbers cannot be
// read, a create is refused (fail closed) rather than sent unchecked.
func TestTwilioOwnNumbersUnreadable(t *testing.T) {
	e := MustOpenVendors(t)
	if _, err := e.Twilio.AddFault(simfault.Fault{Method: "GET", Path: "/2010-04-01/Accounts/" + twiliosim.DefaultAccountSid + "/IncomingPhoneNumbers.json", Mode: simfault.FailBefore}); err != nil {
		t.Fatal(err)
	}
	_, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"5"}`)
	_, err := e.TwilioClient(t, secret).Api.CreateMessage(sms("+14155550123"))
	twilioErr(t, err, 503, twilio.CodeUnavailable)
	if n := len(e.Twilio.GroundTruth().Messages); n != 0 {
		t.Fatalf("twiliosim sent %d messages", n)
	}
}

// TestTwilioOwnNumbersRefreshInBackground: once the account's numbers are
// older than five minutes they are read again while creates go on with the
// last list (a read is a round trip or more to Twilio, and every create of
// every key waited for it); a create waits, and is refused if the read
// fails, only once the last list is fifteen minutes old.
func TestTwilioOwnNumbersRefreshInBackground(t *testing.T) {
	const own = "+14155550199"
	e := mustOpenVendorsSim(t, twiliosim.Options{Numbers: []string{"+14155550100", own}})
	_, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"5"}`)
	tw := e.TwilioClient(t, secret)
	if _, err := tw.Api.CreateMessage(sms("+14155550123")); err != nil {
		t.Fatalf("first create: %v", err)
	}
	if _, err := e.Twilio.AddFault(simfault.Fault{Method: "GET", Path: "/2010-04-01/Accounts/" + twiliosim.DefaultAccountSid + "/IncomingPhoneNumbers.json", Mode: simfault.FailBefore}); err != nil {
		t.Fatal(err)
	}
	e.Clock.Advance(6 * time.Minute)
	if _, err := tw.Api.CreateMessage(sms("+14155550124")); err != nil {
		t.Fatalf("create while the list is read again: %v", err)
	}
	_, err := tw.Api.CreateMessage(sms(own))
	twilioErr(t, err, 403, twilio.CodeForbidden) // the last list still knows it
	e.Clock.Advance(10 * time.Minute)
	_, err = tw.Api.CreateMessage(sms("+14155550125"))
	twilioErr(t, err, 503, twilio.CodeUnavailable)
	if n := len(e.Twilio.GroundTruth().Messages); n != 2 {
		t.Fatalf("twiliosim sent %d messages, want 2", n)
	}
}

// TestAttackSelf_OwnNumberTrunkPrefix: a To that writes one of the
// account's own numbers with its national trunk prefix after the country
// code (+44 0…, +1 1…) is the same number to a parser that strips the
// prefix, as libphonenumber does and Twilio's may: it is refused as the
// own number is, not priced as an ordinary outbound one.
func TestAttackSelf_OwnNumberTrunkPrefix(t *testing.T) {
	e := mustOpenVendorsSim(t, twiliosim.Options{Numbers: []string{"+14155550100", "+14155550199"}})
	_, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"5"}`)
	tw := e.TwilioClient(t, secret)
	_, err := tw.Api.CreateMessage(sms("+114155550199"))
	twilioErr(t, err, 403, twilio.CodeForbidden)
	if !strings.Contains(err.Error(), "own numbers") {
		t.Fatalf("refused for another reason: %v", err)
	}
	_, err = tw.Api.CreateCall((&api.CreateCallParams{}).SetTo("+114155550199").SetFrom("+14155550100").SetTimeLimit(60).
		SetTwiml(`<Response><Say>hi</Say></Response>`))
	twilioErr(t, err, 403, twilio.CodeForbidden)
	if g := e.Twilio.GroundTruth(); len(g.Messages)+len(g.Calls) != 0 {
		t.Fatalf("twiliosim sent %d messages and placed %d calls", len(g.Messages), len(g.Calls))
	}
	if _, err := tw.Api.CreateMessage(sms("+14155550123")); err != nil {
		t.Fatalf("another number: %v", err)
	}
}

// TestAttackResend_TemplateVariableLineBreak: a line break in the subject
// or a custom header is refused (TestAttackResend_HeaderLineBreak), since
// written into the message's header it could add a Bcc that keybrake
// neither prices nor counts. A template's subject (and reply-to) take
// variables, which the send fills from template.variables, which keybrake
// passed through unread: the same line break, one field further in. The
// template object is now read strictly (id and variables; variables are
// strings without line breaks, or numbers, as Resend's variable types are).
func TestAttackResend_TemplateVariableLineBreak(t *testing.T) {
	e := MustOpenVendors(t)
	_, secret := e.CreateKey(t, `{"vendor":"resend","daily_usd_cap":"1","daily_email_cap":1}`)
	hdr := map[string]string{"Authorization": "Bearer " + secret, "Content-Type": "application/json"}
	for _, b := range []string{
		`{"from":"billing@example.com","to":"a@example.com","subject":"","template":{"id":"welcome","variables":{"NAME":"hi\r\nBcc: r1@example.com, r2@example.com"}}}`,
		`{"from":"billing@example.com","to":"a@example.com","template":{"id":"welcome","variables":{"NAME":"hi\nBcc: r1@example.com"}}}`,
		`{"from":"billing@example.com","to":"a@example.com","template":{"id":"welcome","variables":{"NAME":{"x":"y"}}}}`,
		`{"from":"billing@example.com","to":"a@example.com","template":{"id":"welcome","bcc":"r1@example.com"}}`,
		`{"from":"billing@example.com","to":"a@example.com","template":{"id":"welcome","variables":{"A":"x","A":"y"}}}`,
	} {
		resp, body := e.Do(t, "POST", "/resend/emails", b, hdr)
		if resp.StatusCode != 422 || !strings.Contains(string(body), "template") {
			t.Errorf("%s: %d %s", b, resp.StatusCode, body)
		}
	}
	if n := len(e.Resend.GroundTruth().Emails); n != 0 {
		t.Fatalf("resendsim sent %d emails", n)
	}
	// A template with ordinary variables still goes, as resend-go sends it.
	rs := e.ResendClient(t, secret)
	if _, err := rs.Emails.Send(&resendgo.SendEmailRequest{From: "billing@example.com", To: []string{"a@example.com"},
		Template: &resendgo.EmailTemplate{Id: "welcome", Variables: map[string]any{"NAME": "Ann", "PRICE": 499}}}); err != nil {
		t.Fatalf("template send: %v", err)
	}
}

// TestAttackResend_RateLimitedRetryReleasesUncertain: a send whose answer
// was lost (Resend sent it, then answered 500) stays counted as uncertain,
// and the client's retry under the same Idempotency-Key learns its outcome.
// Resend's rate limit (and its key check) answer before its idempotency
// layer and save nothing, so a retry answered 429 says nothing of the first
// send; the resolver waits on it, but the proxy released the reservation.
// A key holder who flooded the account's rate limit while retrying had a
// sent email uncounted, and sent another past a daily cap of 1 email.
func TestAttackResend_RateLimitedRetryReleasesUncertain(t *testing.T) {
	e := MustOpenVendors(t)
	_, secret := e.CreateKey(t, `{"vendor":"resend","daily_email_cap":1,"daily_usd_cap":1}`)
	send := func(idem, to string) (int, string) {
		t.Helper()
		resp, body := e.Do(t, "POST", "/resend/emails", `{"from":"billing@example.com","to":"`+to+`","subject":"s","text":"t"}`,
			map[string]string{"Authorization": "Bearer " + secret, "Content-Type": "application/json", "Idempotency-Key": idem})
		return resp.StatusCode, string(body)
	}
	if _, err := e.Resend.AddFault(simfault.Fault{Method: "POST", Path: "/emails", Mode: simfault.FailAfter, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if st, body := send("first", "a@example.com"); st < 500 {
		t.Fatalf("first send: %d %s, want the lost answer's 5xx", st, body)
	}
	for _, status := range []int{429, 401, 403} {
		if _, err := e.Resend.AddFault(simfault.Fault{Method: "POST", Path: "/emails", Mode: simfault.FailBefore, Status: status, Count: 1}); err != nil {
			t.Fatal(err)
		}
		if st, body := send("first", "a@example.com"); st != status {
			t.Fatalf("retry: %d %s, want Resend's %d", st, body, status)
		}
	}
	st, body := send("second", "b@example.com")
	if n := e.Resend.Billed().Emails; n != 1 {
		t.Fatalf("resendsim sent %d emails under a daily cap of 1 (another email answered %d %s)", n, st, body)
	}
	// The retry that gets an answer settles the first send, once.
	if st, body := send("first", "a@example.com"); st != 200 {
		t.Fatalf("retry: %d %s", st, body)
	}
	if n := e.Resend.Billed().Emails; n != 1 {
		t.Fatalf("resendsim sent %d emails", n)
	}
}

// TestAttackResolver_ResendKeyRefusedReleases: the resolver replays a
// send whose answer was lost; Resend checks the API key before its
// idempotency layer and saves no such answer, so a replay answered 401 or
// 403 (keybrake's Resend key revoked or rotated meanwhile) says nothing of
// the first send. Resend's resolver released it, as Stripe's did before
// TestAttackResolver_AccountGoneReleases: a sent email uncounted, and
// another sent past a daily cap of 1. It now waits.
func TestAttackResolver_ResendKeyRefusedReleases(t *testing.T) {
	e := MustOpenVendors(t)
	id, secret := e.CreateKey(t, `{"vendor":"resend","daily_email_cap":1,"daily_usd_cap":1}`)
	send := func(to string) (int, string) {
		t.Helper()
		resp, body := e.Do(t, "POST", "/resend/emails", `{"from":"billing@example.com","to":"`+to+`","subject":"s","text":"t"}`,
			map[string]string{"Authorization": "Bearer " + secret, "Content-Type": "application/json"})
		return resp.StatusCode, string(body)
	}
	if _, err := e.Resend.AddFault(simfault.Fault{Method: "POST", Path: "/emails", Mode: simfault.FailAfter, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if st, body := send("a@example.com"); st < 500 {
		t.Fatalf("first send: %d %s, want the lost answer's 5xx", st, body)
	}
	for _, status := range []int{401, 403} {
		if _, err := e.Resend.AddFault(simfault.Fault{Method: "POST", Path: "/emails", Mode: simfault.FailBefore, Status: status, Count: 1}); err != nil {
			t.Fatal(err)
		}
		e.Clock.Advance(pastLookupWindow) // past the last pass's lease
		e.resolvePass(t)
	}
	if got := e.reservations(t, id); got[keybrake.StateReleased] != 0 {
		t.Fatalf("reservations %v: the sent email was released", got)
	}
	st, body := send("b@example.com")
	if n := e.Resend.Billed().Emails; n != 1 {
		t.Fatalf("resendsim sent %d emails under a daily cap of 1 (another email answered %d %s)", n, st, body)
	}
	// A replay that gets Resend's saved answer settles it.
	e.Clock.Advance(time.Hour)
	e.resolvePass(t)
	if got := e.reservations(t, id); got[keybrake.StateSettled] != 1 {
		t.Fatalf("reservations %v, want the first send settled", got)
	}
}

// TestResendDefaultsListNothing: a Resend or Twilio key created without
// allowed_endpoints may read a message it sent by its id, but not list the
// account's: the list answers with every key's mail.
func TestResendDefaultsListNothing(t *testing.T) {
	e := MustOpenVendors(t)
	_, secret := e.CreateKey(t, `{"vendor":"resend","daily_email_cap":3}`)
	rs := e.ResendClient(t, secret)
	sent, err := rs.Emails.Send(&resendgo.SendEmailRequest{From: "billing@example.com", To: []string{"a@example.com"}, Subject: "s", Text: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Emails.Get(sent.Id); err != nil {
		t.Fatalf("get the email this key sent: %v", err)
	}
	if _, err := rs.Emails.List(); err == nil || !strings.Contains(err.Error(), "emails.list") {
		t.Fatalf("list by default: %v, want refused naming emails.list", err)
	}
	_, secret = e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1"}`)
	tw := e.TwilioClient(t, secret)
	if _, err := tw.Api.ListMessage(&api.ListMessageParams{}); err == nil {
		t.Fatal("a Twilio key lists the account's messages by default")
	} else {
		twilioErr(t, err, 403, twilio.CodeForbidden)
	}
}

// TestAttackTwilio_FailedMessageFee: Twilio bills $0.001 for a message
// that ends failed, whatever its price field reads. keybrake settled a
// message at its price, so a failed message whose price read 0 was
// released from the caps while Twilio billed the fee: a key could make
// its messages fail on purpose and spend outside its caps. A failed
// message now settles at no less than the fee.
func TestAttackTwilio_FailedMessageFee(t *testing.T) {
	e := MustOpenVendors(t)
	id, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"1"}`)
	if _, err := e.TwilioClient(t, secret).Api.CreateMessage(sms(twiliosim.FailingTo)); err != nil {
		t.Fatal(err)
	}
	e.settleAll(t)
	sp, billed := e.Spend(t, id), e.Twilio.Billed()
	if billed.Micros != twilio.FailedMessageFee || billed.Messages != 1 {
		t.Fatalf("twiliosim billed %+v, want the failed-message fee", billed)
	}
	if got := e.reservations(t, id); got[keybrake.StateSettled] != 1 || sp.Day != billed.Micros || sp.Held != 0 {
		t.Fatalf("reservations %v, spend %+v: want settled at the $0.001 Twilio billed", got, sp)
	}
}
