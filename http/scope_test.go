package http_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	resendgo "github.com/resend/resend-go/v3"
	"github.com/twilio/twilio-go/client"
	api "github.com/twilio/twilio-go/rest/api/v2010"

	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/twilio"
	"github.com/keybrake/keybrake/twiliosim"
)

const (
	allowedService = "MG0123456789abcdef0123456789abcdef"
	otherService   = "MGffffffffffffffffffffffffffffffff"
)

// TestScopeAdmin: the scope fields are validated strictly, normalized,
// shown on the key, replaced whole by an update, removed by null, and
// refused on a key of another vendor.
func TestScopeAdmin(t *testing.T) {
	e := MustOpenVendors(t)
	for name, body := range map[string]string{
		"ErrTwilioScopeOnResendKey":   `{"vendor":"resend","twilio_scope":{"allowed_countries":["US"]}}`,
		"ErrResendScopeOnTwilioKey":   `{"vendor":"twilio","resend_scope":{"max_recipients":2}}`,
		"ErrTwilioScopeOnStripeKey":   `{"twilio_scope":{"allowed_countries":["US"]}}`,
		"ErrResendScopeOnStripeKey":   `{"resend_scope":{"allowed_senders":["example.com"]}}`,
		"ErrUnknownField":             `{"vendor":"twilio","twilio_scope":{"allowed_country":["US"]}}`,
		"ErrOtherVendorsField":        `{"vendor":"twilio","twilio_scope":{"allowed_senders":["a@b.com"]}}`,
		"ErrDuplicateField":           `{"vendor":"twilio","twilio_scope":{"allowed_countries":["US"],"allowed_countries":["GB"]}}`,
		"ErrNotAnObject":              `{"vendor":"twilio","twilio_scope":["US"]}`,
		"ErrNotAList":                 `{"vendor":"twilio","twilio_scope":{"allowed_countries":"US"}}`,
		"ErrUnknownCountry":           `{"vendor":"twilio","twilio_scope":{"allowed_countries":["ZZ"]}}`,
		"ErrPrefixWithoutPlus":        `{"vendor":"twilio","twilio_scope":{"allowed_number_prefixes":["1415"]}}`,
		"ErrFromWithSpaces":           `{"vendor":"twilio","twilio_scope":{"allowed_from":["+1 415 555 0100"]}}`,
		"ErrBadService":               `{"vendor":"twilio","twilio_scope":{"allowed_messaging_services":["MG123"]}}`,
		"ErrSenderWithDisplayName":    `{"vendor":"resend","resend_scope":{"allowed_senders":["Acme <a@example.com>"]}}`,
		"ErrRecipientDomainIsAddress": `{"vendor":"resend","resend_scope":{"allowed_recipient_domains":["a@example.com"]}}`,
		"ErrMaxRecipientsTooHigh":     `{"vendor":"resend","resend_scope":{"max_recipients":51}}`,
		"ErrMaxRecipientsString":      `{"vendor":"resend","resend_scope":{"max_recipients":"2"}}`,
		"ErrMaxRecipientsFraction":    `{"vendor":"resend","resend_scope":{"max_recipients":2.5}}`,
		"ErrMaxRecipientsNegative":    `{"vendor":"resend","resend_scope":{"max_recipients":-1}}`,
		"ErrMonthlyCapOnOtherVendor":  `{"vendor":"resend","monthly_message_cap":5}`,
		"ErrMonthlyCapFraction":       `{"vendor":"twilio","monthly_message_cap":1.5}`,
	} {
		if resp, out := e.Admin(t, "POST", "/vault/keys", body); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(out), "_scope") && !strings.Contains(string(out), "_cap") {
			t.Errorf("%s: %d %s", name, resp.StatusCode, out)
		}
	}

	id, _ := e.CreateKey(t, `{"vendor":"twilio","twilio_scope":{"allowed_countries":["us","CA","US"],"allowed_from":["WhatsApp:+14155550100"]},"monthly_message_cap":100}`)
	var k struct {
		Scope   *map[string][]string `json:"twilio_scope"`
		Resend  json.RawMessage      `json:"resend_scope"`
		Monthly *int64               `json:"monthly_message_cap"`
	}
	get := func() {
		t.Helper()
		resp, out := e.Admin(t, "GET", "/vault/keys/"+id, "")
		k.Scope = nil
		if resp.StatusCode != 200 || json.Unmarshal(out, &k) != nil {
			t.Fatalf("GET: %d %s", resp.StatusCode, out)
		}
	}
	get()
	if k.Scope == nil || strings.Join((*k.Scope)["allowed_countries"], ",") != "US,CA" || (*k.Scope)["allowed_from"][0] != "whatsapp:+14155550100" || string(k.Resend) != "null" || k.Monthly == nil || *k.Monthly != 100 {
		t.Fatalf("created key: %+v %s", k.Scope, k.Resend)
	}
	if resp, out := e.Admin(t, "PATCH", "/vault/keys/"+id, `{"resend_scope":{"max_recipients":1}}`); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("resend_scope on a Twilio key by update: %d %s", resp.StatusCode, out)
	}
	if resp, out := e.Admin(t, "PATCH", "/vault/keys/"+id, `{"twilio_scope":{"allowed_number_prefixes":["+1415"]}}`); resp.StatusCode != 200 {
		t.Fatalf("replace: %d %s", resp.StatusCode, out)
	}
	get()
	if k.Scope == nil || len((*k.Scope)["allowed_countries"]) != 0 || (*k.Scope)["allowed_number_prefixes"][0] != "+1415" {
		t.Fatalf("an update replaces the whole scope: %+v", k.Scope)
	}
	if resp, out := e.Admin(t, "PATCH", "/vault/keys/"+id, `{"twilio_scope":null}`); resp.StatusCode != 200 {
		t.Fatalf("remove: %d %s", resp.StatusCode, out)
	}
	if get(); k.Scope != nil {
		t.Fatalf("after null: %+v", k.Scope)
	}

	// A child's scope is not checked against its parent's: a scoped key
	// mints none.
	pid, _ := e.CreateKey(t, `{"vendor":"resend","resend_scope":{"allowed_senders":["example.com"]},"total_usd_cap":10,"mint":true}`)
	if resp, out := e.Admin(t, "POST", "/vault/keys/"+pid+"/children", `{"label":"child"}`); resp.StatusCode != http.StatusForbidden || !strings.Contains(string(out), "scope") {
		t.Fatalf("mint from a scoped key: %d %s", resp.StatusCode, out)
	}
}

// TestScopeSDK: a key's scope refuses, through twilio-go and resend-go,
// every destination, sender and recipient outside it, in the vendor's own
// error shape naming the rule, before anything is reserved or sent; what
// is inside it is sent. On SQLite and PostgreSQL.
func TestScopeSDK(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) { testScopeSDK(t, MustOpenVendors(t)) })
	t.Run("Postgres", func(t *testing.T) {
		testScopeSDK(t, MustOpenVendors(t, func(s *khttp.Server) { s.Store = kbtest.Postgres(t) }))
	})
}

func testScopeSDK(t *testing.T, e *VendorEnv) {
	t.Run("Twilio", func(t *testing.T) {
		id, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":10,"allowed_endpoints":["messages.create","calls.create"],
			"twilio_scope":{"allowed_countries":["US"],"allowed_number_prefixes":["+1415","+1628"],"allowed_from":["+14155550100"],"allowed_messaging_services":["`+allowedService+`"]}}`)
		tw := e.TwilioClient(t, secret)
		msg := func(to, from, svc string) *api.CreateMessageParams {
			p := (&api.CreateMessageParams{}).SetTo(to).SetBody("hi")
			if from != "" {
				p.SetFrom(from)
			}
			if svc != "" {
				p.SetMessagingServiceSid(svc)
			}
			return p
		}
		if _, err := tw.Api.CreateMessage(msg("+14155550123", "+14155550100", allowedService)); err != nil {
			t.Fatalf("inside the scope: %v", err)
		}
		if _, err := tw.Api.CreateMessage(msg("+16285550123", "", allowedService)); err != nil {
			t.Fatalf("through the listed service: %v", err)
		}
		for name, tt := range map[string]struct {
			p    *api.CreateMessageParams
			rule string
		}{
			"ErrCountry":        {msg("+447700900123", "+14155550100", allowedService), "allowed_countries"},
			"ErrCountryJamaica": {msg("+18765550123", "+14155550100", allowedService), "allowed_countries"},
			"ErrPrefix":         {msg("+12125550123", "+14155550100", allowedService), "allowed_number_prefixes"},
			"ErrFrom":           {msg("+14155550123", "+14155550999", allowedService), "allowed_from"},
			"ErrFromWhatsApp":   {msg("+14155550123", "whatsapp:+14155550100", allowedService), "allowed_from"},
			"ErrService":        {msg("+14155550123", "", otherService), "allowed_messaging_services"},
			"ErrNoService":      {msg("+14155550123", "+14155550100", ""), "allowed_messaging_services"},
			"ErrToWithSpaces":   {msg("+1 415 555 0123", "+14155550100", allowedService), "allowed_countries"},
			"ErrToWithDashes":   {msg("+1-415-555-0123", "+14155550100", allowedService), "allowed_countries"},
		} {
			_, err := tw.Api.CreateMessage(tt.p)
			var te *client.TwilioRestError
			if !errors.As(err, &te) || te.Status != 403 || te.Code != twilio.CodeForbidden || !strings.Contains(te.Message, "twilio_scope."+tt.rule) {
				t.Errorf("%s: %v, want Twilio's 403/20403 naming twilio_scope.%s", name, err, tt.rule)
			}
		}
		call := (&api.CreateCallParams{}).SetTo("+447700900123").SetFrom("+14155550100").SetTwiml("<Response><Say>hi</Say></Response>").SetTimeLimit(60)
		if _, err := tw.Api.CreateCall(call); err == nil || !strings.Contains(err.Error(), "twilio_scope.allowed_countries") {
			t.Errorf("call abroad: %v", err)
		}
		call = (&api.CreateCallParams{}).SetTo("+14155550123").SetFrom("+14155550999").SetTwiml("<Response><Say>hi</Say></Response>").SetTimeLimit(60)
		if _, err := tw.Api.CreateCall(call); err == nil || !strings.Contains(err.Error(), "twilio_scope.allowed_from") {
			t.Errorf("call from an unlisted number: %v", err)
		}
		// Raw forms twilio-go would never send.
		auth := map[string]string{"Authorization": twilio.BasicAuth(twiliosim.DefaultAccountSid, secret), "Content-Type": "application/x-www-form-urlencoded"}
		path := "/twilio/2010-04-01/Accounts/" + twiliosim.DefaultAccountSid + "/Messages.json"
		for name, body := range map[string]string{
			"ErrToTwice":   "To=%2B14155550123&To=%2B447700900123&From=%2B14155550100&MessagingServiceSid=" + allowedService + "&Body=x",
			"ErrFromTwice": "To=%2B14155550123&From=%2B14155550100&From=%2B14155550999&MessagingServiceSid=" + allowedService + "&Body=x",
			"ErrLowerTo":   "To=%2B14155550123&to=%2B447700900123&From=%2B14155550100&MessagingServiceSid=" + allowedService + "&Body=x",
			"ErrFromSpace": "To=%2B14155550123&From=+%2B14155550100&MessagingServiceSid=" + allowedService + "&Body=x",
		} {
			resp, out := e.Do(t, "POST", path, body, auth)
			if resp.StatusCode != 400 && resp.StatusCode != 403 || !strings.Contains(string(out), `"code":`) {
				t.Errorf("%s: %d %s", name, resp.StatusCode, out)
			}
		}
		if n := len(e.Twilio.GroundTruth().Messages) + len(e.Twilio.GroundTruth().Calls); n != 2 {
			t.Fatalf("twiliosim created %d messages and calls, want the 2 inside the scope", n)
		}
		if sp := e.Spend(t, id); sp.Day != 40000 {
			t.Fatalf("spend %+v, want the 2 messages only ($0.04): a refusal reserves nothing", sp)
		}
	})

	t.Run("Resend", func(t *testing.T) {
		id, secret := e.CreateKey(t, `{"vendor":"resend","daily_usd_cap":1,
			"resend_scope":{"allowed_senders":["example.com","onboarding@resend.dev"],"allowed_recipient_domains":["x.com","BÜCHER.example"],"max_recipients":2}}`)
		rs := e.ResendClient(t, secret)
		mail := func(from string, to ...string) *resendgo.SendEmailRequest {
			return &resendgo.SendEmailRequest{From: from, To: to, Subject: "Invoice", Text: "hi"}
		}
		if _, err := rs.Emails.Send(mail("Acme <Billing@EXAMPLE.com>", "a@X.com", "kunde@bücher.example")); err != nil {
			t.Fatalf("inside the scope: %v", err)
		}
		if _, err := rs.Batch.Send([]*resendgo.SendEmailRequest{mail("onboarding@resend.dev", "a@x.com"), mail("b@example.com", "b@xn--bcher-kva.example")}); err != nil {
			t.Fatalf("a batch inside the scope: %v", err)
		}
		cc := mail("billing@example.com", "a@x.com")
		cc.Cc = []string{"spy@evil.com"}
		bcc := mail("billing@example.com", "a@x.com")
		bcc.Bcc = []string{"spy@mail.x.com"}
		header := mail("billing@example.com", "a@x.com")
		header.Headers = map[string]string{"Bcc": "spy@evil.com"}
		for name, tt := range map[string]struct {
			m    *resendgo.SendEmailRequest
			rule string
		}{
			"ErrSender":           {mail("billing@other.com", "a@x.com"), "resend_scope.allowed_senders"},
			"ErrSenderSubdomain":  {mail("billing@mail.example.com", "a@x.com"), "resend_scope.allowed_senders"},
			"ErrSenderOtherLocal": {mail("other@resend.dev", "a@x.com"), "resend_scope.allowed_senders"},
			"ErrRecipientTo":      {mail("billing@example.com", "a@evil.com"), "resend_scope.allowed_recipient_domains"},
			"ErrRecipientCc":      {cc, "resend_scope.allowed_recipient_domains"},
			"ErrRecipientBccSub":  {bcc, "resend_scope.allowed_recipient_domains"},
			"ErrTooMany":          {mail("billing@example.com", "a@x.com", "b@x.com", "c@x.com"), "resend_scope.max_recipients"},
			"ErrHeader":           {header, "Bcc header"},
		} {
			_, err := rs.Emails.Send(tt.m)
			if err == nil || !strings.Contains(err.Error(), tt.rule) {
				t.Errorf("%s: %v, want %s named", name, err, tt.rule)
			}
		}
		_, err := rs.Batch.Send([]*resendgo.SendEmailRequest{mail("billing@example.com", "a@x.com"), mail("billing@example.com", "b@x.com", "c@evil.com")})
		if err == nil || !strings.Contains(err.Error(), "email [1] of the batch") {
			t.Errorf("a batch with one email outside the scope: %v", err)
		}
		// Resend's own shape: statusCode, name, message.
		resp, out := e.Do(t, "POST", "/resend/emails", `{"from":"a@other.com","to":"a@x.com","subject":"s","text":"t"}`,
			map[string]string{"Authorization": "Bearer " + secret, "Content-Type": "application/json"})
		var re struct {
			StatusCode int    `json:"statusCode"`
			Name       string `json:"name"`
			Message    string `json:"message"`
		}
		if resp.StatusCode != 403 || json.Unmarshal(out, &re) != nil || re.StatusCode != 403 || re.Name != "validation_error" || !strings.Contains(re.Message, "resend_scope.allowed_senders") {
			t.Errorf("raw refusal: %d %s", resp.StatusCode, out)
		}
		// to as a string, as the API takes it.
		resp, out = e.Do(t, "POST", "/resend/emails", `{"from":"a@example.com","to":"evil@evil.com","subject":"s","text":"t"}`,
			map[string]string{"Authorization": "Bearer " + secret, "Content-Type": "application/json"})
		if resp.StatusCode != 403 || !strings.Contains(string(out), "allowed_recipient_domains") {
			t.Errorf("to as a string: %d %s", resp.StatusCode, out)
		}
		if n := e.Resend.Billed().Emails; n != 3 {
			t.Fatalf("resendsim sent %d emails, want the 3 inside the scope", n)
		}
		if c := keyCounts(t, e.Env, id)["emails"]; c.Used != 4 {
			t.Fatalf("counted %+v, want 4: one per recipient, as Resend's quota counts", c)
		}
	})
}

var _ = url.Values{}
