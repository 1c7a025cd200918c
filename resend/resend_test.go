package resend_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/resend"
)

const id = "4ef9a417-02e9-4d39-ad75-9611e0fcc33c"

func TestParseOperation(t *testing.T) {
	tests := []struct {
		method, path, name string
		class              resend.Class
		code               string
	}{
		{"POST", "/emails", "emails.send", resend.ClassPriced, ""},
		{"POST", "/emails/batch", "emails.batch", resend.ClassPriced, ""},
		{"GET", "/emails", "emails.list", resend.ClassRead, ""},
		{"GET", "/emails/" + id, "emails.get", resend.ClassRead, ""},
		{"PATCH", "/emails/" + id, "emails.update", resend.ClassWrite, ""},
		{"POST", "/emails/" + id + "/cancel", "emails.cancel", resend.ClassWrite, ""},
		{"GET", "/domains", "domains.list", resend.ClassRead, ""},
		{"GET", "/domains/" + id, "domains.get", resend.ClassRead, ""},
		{"POST", "/domains", "", 0, keybrake.ENOTFOUND},
		{"DELETE", "/domains/" + id, "", 0, keybrake.ENOTFOUND},
		{"POST", "/domains/" + id + "/verify", "", 0, keybrake.ENOTFOUND},
		{"POST", "/api-keys", "", 0, keybrake.ENOTFOUND},
		{"GET", "/api-keys", "", 0, keybrake.ENOTFOUND},
		{"POST", "/audiences", "", 0, keybrake.ENOTFOUND},
		{"POST", "/broadcasts", "", 0, keybrake.ENOTFOUND},
		{"GET", "/emails/batch", "", 0, keybrake.EINVALID}, // batch is not an id
		{"DELETE", "/emails/" + id, "", 0, keybrake.ENOTFOUND},
		{"GET", "/emails/" + id + "/attachments", "", 0, keybrake.ENOTFOUND},
		{"POST", "/emails/", "", 0, keybrake.ENOTFOUND},
		{"POST", "//emails", "", 0, keybrake.ENOTFOUND},
		{"GET", "/emails/../api-keys", "", 0, keybrake.ENOTFOUND},
		{"GET", "/emails/" + strings.ToUpper(id), "", 0, keybrake.EINVALID},
		{"GET", "/emails/%2e%2e", "", 0, keybrake.EINVALID},
		{"GET", "/emails?x", "", 0, keybrake.EINVALID},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			op, err := resend.ParseOperation(tt.method, tt.path)
			if got := keybrake.ErrorCode(err); got != tt.code {
				t.Fatalf("code = %q, want %q (%v)", got, tt.code, err)
			}
			if err == nil && (op.Name != tt.name || op.Class != tt.class) {
				t.Errorf("op = %+v", op)
			}
		})
	}
}

func TestParseEmail(t *testing.T) {
	tests := []struct {
		name, body string
		recipients int
		param      string
	}{
		{"OK", `{"from":"Acme <billing@acme.com>","to":"a@x.com","subject":"hi","html":"<p>x</p>"}`, 1, ""},
		{"OKLists", `{"from":"billing@acme.com","to":["a@x.com","B <b@y.com>"],"cc":["c@x.com"],"bcc":"d@x.com","subject":"hi","text":"x","reply_to":["r@acme.com"]}`, 4, ""},
		{"OKTemplate", `{"from":"billing@acme.com","to":"a@x.com","template":{"id":"t"}}`, 1, ""},
		{"OKScheduled", `{"from":"billing@acme.com","to":"a@x.com","subject":"s","scheduled_at":"in 1 min"}`, 1, ""},
		{"ErrNoFrom", `{"to":"a@x.com","subject":"hi"}`, 0, "from"},
		{"ErrBadFrom", `{"from":"not an address","to":"a@x.com","subject":"hi"}`, 0, "from"},
		{"ErrNoTo", `{"from":"a@acme.com","subject":"hi"}`, 0, "to"},
		{"ErrEmptyTo", `{"from":"a@acme.com","to":[],"subject":"hi"}`, 0, "to"},
		{"ErrToNumber", `{"from":"a@acme.com","to":5,"subject":"hi"}`, 0, "to"},
		{"ErrNoSubject", `{"from":"a@acme.com","to":"a@x.com"}`, 0, "subject"},
		{"ErrDuplicateTo", `{"from":"a@acme.com","to":"a@x.com","to":"b@evil.com","subject":"hi"}`, 0, "to"},
		{"ErrUnknownField", `{"from":"a@acme.com","to":"a@x.com","subject":"hi","send_copies":100}`, 0, "send_copies"},
		{"ErrTrailing", `{"from":"a@acme.com","to":"a@x.com","subject":"hi"} {}`, 0, ""},
		{"ErrArray", `[{"from":"a@acme.com"}]`, 0, ""},
		{"ErrTooMany", `{"from":"a@acme.com","to":[` + addrs(40) + `],"cc":[` + addrs(11) + `],"subject":"hi"}`, 0, "to"},
		{"OKFifty", `{"from":"a@acme.com","to":[` + addrs(40) + `],"bcc":[` + addrs(10) + `],"subject":"hi"}`, 50, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := resend.ParseEmail([]byte(tt.body))
			wantErr := tt.recipients == 0
			if (err != nil) != wantErr {
				t.Fatalf("err = %v, want error %v", err, wantErr)
			}
			if err != nil {
				if keybrake.ErrorCode(err) != keybrake.EINVALID || keybrake.ErrorParamOf(err) != tt.param {
					t.Errorf("err = %v param %q, want EINVALID %q", err, keybrake.ErrorParamOf(err), tt.param)
				}
				return
			}
			if e.Recipients() != tt.recipients {
				t.Errorf("recipients = %d, want %d", e.Recipients(), tt.recipients)
			}
		})
	}
}

func addrs(n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf(`"u%d@x.com"`, i)
	}
	return strings.Join(s, ",")
}

func batch(n int, extra string) string {
	s := make([]string, n)
	for i := range s {
		s[i] = `{"from":"a@acme.com","to":"u@x.com","subject":"s"` + extra + `}`
	}
	return "[" + strings.Join(s, ",") + "]"
}

func TestParseBatch(t *testing.T) {
	tests := []struct {
		name, body string
		n          int
		param      string
	}{
		{"OK", batch(2, ""), 2, ""},
		{"OKHundred", batch(100, ""), 100, ""},
		{"ErrEmpty", "[]", 0, ""},
		{"ErrTooMany", batch(101, ""), 0, ""},
		{"ErrScheduled", batch(1, `,"scheduled_at":"in 1 min"`), 0, "[0].scheduled_at"},
		{"ErrAttachments", batch(1, `,"attachments":[]`), 0, "[0].attachments"},
		{"ErrOneBad", `[{"from":"a@acme.com","to":"u@x.com","subject":"s"},{"from":"a@acme.com","subject":"s"}]`, 0, "[1].to"},
		{"ErrObject", `{"from":"a@acme.com"}`, 0, ""},
		{"ErrTrailing", batch(1, "") + "[]", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			es, err := resend.ParseBatch([]byte(tt.body))
			if tt.n > 0 {
				if err != nil || len(es) != tt.n {
					t.Fatalf("ParseBatch = %d, %v; want %d", len(es), err, tt.n)
				}
				return
			}
			if keybrake.ErrorCode(err) != keybrake.EINVALID || keybrake.ErrorParamOf(err) != tt.param {
				t.Errorf("err = %v param %q, want EINVALID %q", err, keybrake.ErrorParamOf(err), tt.param)
			}
		})
	}
}

func TestPrice(t *testing.T) {
	es, err := resend.ParseBatch([]byte(`[{"from":"a@acme.com","to":["u@x.com","v@x.com"],"subject":"s"},{"from":"a@acme.com","to":"u@x.com","cc":"c@x.com","bcc":"b@x.com","subject":"s"}]`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		p      resend.Pricer
		micros keybrake.Micros
		code   string
	}{
		{"PerEmail", resend.Pricer{PerEmail: 900}, 1800, ""},
		{"PerRecipient", resend.Pricer{PerRecipient: 400}, 2000, ""},
		{"Both", resend.Pricer{PerEmail: 900, PerRecipient: 400}, 3800, ""},
		{"ErrNoRate", resend.Pricer{}, 0, keybrake.EFORBIDDEN},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := tt.p.Price(es)
			if keybrake.ErrorCode(err) != tt.code || c.Micros != tt.micros {
				t.Fatalf("Price = %+v %v, want %d %q", c, err, tt.micros, tt.code)
			}
			if err == nil && (c.Emails != 2 || c.Recipients != 5) {
				t.Errorf("counts = %+v", c)
			}
		})
	}
}

func mustPolicy(t *testing.T, s keybrake.ResendScope) resend.Policy {
	t.Helper()
	n, err := resend.NormalizePolicy(s)
	if err != nil {
		t.Fatal(err)
	}
	return resend.Policy(n)
}

func TestPolicy(t *testing.T) {
	p := mustPolicy(t, keybrake.ResendScope{Senders: []string{"Billing@ACME.com", "@news.acme.com", "bücher.example"}, RecipientDomains: []string{"X.com", "xn--bcher-kva.example"}, MaxRecipients: 2})
	tests := []struct {
		name, body string
		rule       string // "" when allowed
	}{
		{"OK", `{"from":"Billing <BILLING@acme.com>","to":"a@x.com","subject":"s"}`, ""},
		{"OKDomainSender", `{"from":"any@news.acme.com","to":"a@X.com","subject":"s"}`, ""},
		{"OKToArray", `{"from":"billing@acme.com","to":["a@x.com","b@X.COM"],"subject":"s"}`, ""},
		{"ErrTrailingDotSender", `{"from":"billing@acme.com.","to":"a@x.com","subject":"s"}`, "resend_scope.allowed_senders"},
		{"ErrUnderscoreDomain", `{"from":"billing@acme.com","to":"a@x_y.com","subject":"s"}`, "resend_scope.allowed_recipient_domains"},
		{"OKIDNUnicode", `{"from":"shop@bücher.example","to":"kunde@BÜCHER.example","subject":"s"}`, ""},
		{"OKIDNPunycode", `{"from":"shop@xn--bcher-kva.example","to":"kunde@xn--bcher-kva.example","subject":"s"}`, ""},
		{"ErrSender", `{"from":"ceo@acme.com","to":"a@x.com","subject":"s"}`, "resend_scope.allowed_senders"},
		{"ErrSenderDisplayNameLies", `{"from":"\"billing@acme.com\" <ceo@evil.com>","to":"a@x.com","subject":"s"}`, "resend_scope.allowed_senders"},
		{"ErrSubdomainSender", `{"from":"a@evil.news.acme.com","to":"a@x.com","subject":"s"}`, "resend_scope.allowed_senders"},
		{"ErrParentOfDomainSender", `{"from":"a@acme.com","to":"a@x.com","subject":"s"}`, "resend_scope.allowed_senders"},
		{"ErrLookalikeSender", `{"from":"billing@acme.com.evil.com","to":"a@x.com","subject":"s"}`, "resend_scope.allowed_senders"},
		{"ErrCyrillicSender", `{"from":"billing@асme.com","to":"a@x.com","subject":"s"}`, "resend_scope.allowed_senders"},
		{"ErrRecipientInBcc", `{"from":"billing@acme.com","to":"a@x.com","bcc":"spy@evil.com","subject":"s"}`, "resend_scope.allowed_recipient_domains"},
		{"ErrRecipientInCcString", `{"from":"billing@acme.com","to":["a@x.com"],"cc":"spy@evil.com","subject":"s"}`, "resend_scope.allowed_recipient_domains"},
		{"ErrSubdomainRecipient", `{"from":"billing@acme.com","to":"a@mail.x.com","subject":"s"}`, "resend_scope.allowed_recipient_domains"},
		{"ErrRecipientSuffix", `{"from":"billing@acme.com","to":"a@evilx.com","subject":"s"}`, "resend_scope.allowed_recipient_domains"},
		{"ErrRecipientLiteral", `{"from":"billing@acme.com","to":"a@[127.0.0.1]","subject":"s"}`, "resend_scope.allowed_recipient_domains"},
		{"ErrRecipientQuotedAt", `{"from":"billing@acme.com","to":"\"a@x.com\"@evil.com","subject":"s"}`, "resend_scope.allowed_recipient_domains"},
		{"ErrTooMany", `{"from":"billing@acme.com","to":["a@x.com","b@x.com","c@x.com"],"subject":"s"}`, "resend_scope.max_recipients"},
		{"ErrTooManyWithDuplicates", `{"from":"billing@acme.com","to":["a@x.com","a@x.com"],"cc":"a@x.com","subject":"s"}`, "resend_scope.max_recipients"},
		{"ErrBccHeader", `{"from":"billing@acme.com","to":"a@x.com","headers":{"bcc":"spy@evil.com"},"subject":"s"}`, ""},
		{"OKOtherHeader", `{"from":"billing@acme.com","to":"a@x.com","headers":{"X-Entity-Ref-ID":"1"},"subject":"s"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := resend.ParseEmail([]byte(tt.body))
			if err != nil {
				if strings.HasPrefix(tt.name, "Err") && keybrake.ErrorCode(err) == keybrake.EINVALID {
					return // refused before the scope: net/mail does not read it as one address
				}
				t.Fatal(err)
			}
			err = p.Check([]*resend.Email{e}, false)
			wantErr := strings.HasPrefix(tt.name, "Err")
			switch {
			case !wantErr && err != nil:
				t.Fatalf("Check = %v, want allowed", err)
			case wantErr && keybrake.ErrorCode(err) != keybrake.EFORBIDDEN:
				t.Fatalf("Check = %v, want EFORBIDDEN", err)
			case wantErr && !strings.Contains(keybrake.ErrorMessage(err), tt.rule):
				t.Fatalf("Check = %v, want %s named", err, tt.rule)
			}
		})
	}
	t.Run("ErrBatchOneEmail", func(t *testing.T) {
		emails, err := resend.ParseBatch([]byte(`[{"from":"billing@acme.com","to":"a@x.com","subject":"s"},{"from":"billing@acme.com","to":"a@x.com","bcc":"b@evil.com","subject":"s"}]`))
		if err != nil {
			t.Fatal(err)
		}
		err = p.Check(emails, true)
		if keybrake.ErrorCode(err) != keybrake.EFORBIDDEN || !strings.Contains(keybrake.ErrorMessage(err), "email [1] of the batch") {
			t.Fatalf("Check = %v, want email [1] named", err)
		}
		if err := p.Check(emails[:1], true); err != nil {
			t.Fatalf("the good email alone: %v", err)
		}
	})
}

func TestNormalizePolicy(t *testing.T) {
	got, err := resend.NormalizePolicy(keybrake.ResendScope{Senders: []string{"@Example.COM.", "Bill@Example.com", "bill@example.com", "bücher.example"}, RecipientDomains: []string{"@X.com"}, MaxRecipients: 50})
	if err != nil || strings.Join(got.Senders, ",") != "example.com,bill@example.com,xn--bcher-kva.example" || got.RecipientDomains[0] != "x.com" {
		t.Fatalf("NormalizePolicy = %+v, %v", got, err)
	}
	for _, bad := range []keybrake.ResendScope{
		{Senders: []string{""}}, {Senders: []string{"Name <a@b.com>"}}, {Senders: []string{" a@b.com"}}, {Senders: []string{"a@b@c.com"}}, {Senders: []string{"localhost"}},
		{RecipientDomains: []string{"a@b.com"}}, {RecipientDomains: []string{"exa mple.com"}}, {RecipientDomains: []string{"*.example.com"}}, {RecipientDomains: []string{"example..com"}},
		{MaxRecipients: -1}, {MaxRecipients: 51},
	} {
		if _, err := resend.NormalizePolicy(bad); keybrake.ErrorCode(err) != keybrake.EINVALID || !strings.Contains(keybrake.ErrorMessage(err), "resend_scope.") {
			t.Errorf("NormalizePolicy(%+v) = %v, want EINVALID naming the field", bad, err)
		}
	}
}

func TestAuthErrorsIdempotency(t *testing.T) {
	if k, err := resend.ParseAuth("Bearer vault_key_abc"); err != nil || k != "vault_key_abc" {
		t.Errorf("ParseAuth = %q %v", k, err)
	}
	for _, bad := range []string{"", "Basic dmF1bHQ6", "Bearer ", "Bearer a b", "vault_key_abc"} {
		if _, err := resend.ParseAuth(bad); keybrake.ErrorCode(err) != keybrake.EUNAUTHORIZED {
			t.Errorf("ParseAuth(%q) = %v", bad, err)
		}
	}
	_, missing := resend.ParseAuth("")
	if e := resend.ErrorFor(missing); e.StatusCode != 401 || e.Name != resend.NameMissingAPIKey {
		t.Errorf("missing key error = %+v", e)
	}
	if e := resend.ErrorFor(keybrake.Errorf(keybrake.EOVERCAP, "over")); e.StatusCode != 429 || e.Name != resend.NameSpendCap {
		t.Errorf("over cap error = %+v", e)
	}
	if e := resend.ErrorFor(keybrake.ErrorParam("to", "bad")); e.StatusCode != 422 || e.Name != resend.NameValidation {
		t.Errorf("invalid error = %+v", e)
	}
	if e := resend.ErrorFor(fmt.Errorf("db password=hunter2")); e.StatusCode != 500 || strings.Contains(e.Message, "hunter2") {
		t.Errorf("internal error = %+v", e)
	}
	if string(resend.ErrorFor(keybrake.ErrorParam("to", "bad")).Body()) != `{"statusCode":422,"name":"validation_error","message":"bad"}` {
		t.Error("error body shape")
	}

	for _, tt := range []struct {
		values []string
		key    string
		ok     bool
	}{
		{nil, "", true}, {[]string{"k1"}, "k1", true}, {[]string{strings.Repeat("k", 256)}, strings.Repeat("k", 256), true},
		{[]string{""}, "", false}, {[]string{strings.Repeat("k", 257)}, "", false}, {[]string{"a", "b"}, "", false},
	} {
		k, err := resend.ParseIdempotencyKey(tt.values)
		if (err == nil) != tt.ok || k != tt.key {
			t.Errorf("ParseIdempotencyKey(%q) = %q %v", tt.values, k, err)
		}
	}
	if resend.Fingerprint([]byte(`{"a":1,"b":[1,2]}`)) != resend.Fingerprint([]byte("{ \"b\": [1,2],\n \"a\": 1 }")) {
		t.Error("fingerprint depends on field order or white space")
	}
	if resend.Fingerprint([]byte(`{"a":1}`)) == resend.Fingerprint([]byte(`{"a":2}`)) {
		t.Error("fingerprint ignores values")
	}
	for ev, want := range map[string][2]bool{"delivered": {true, false}, "canceled": {false, true}, "scheduled": {false, false}, "bounced": {true, false}} {
		s, r := resend.Outcome(ev)
		if [2]bool{s, r} != want {
			t.Errorf("Outcome(%s) = %v %v", ev, s, r)
		}
	}
	if _, err := resend.ParseUpdate([]byte(`{"scheduled_at":"2026-01-01T00:00:00Z"}`), id); err != nil {
		t.Error(err)
	}
	if _, err := resend.ParseUpdate([]byte(`{"id":"`+id+`","scheduled_at":"2026-01-01T00:00:00Z"}`), id); err != nil {
		t.Error(err)
	}
	if _, err := resend.ParseUpdate([]byte(`{"id":"other","scheduled_at":"2026-01-01T00:00:00Z"}`), id); err == nil {
		t.Error("update with another id accepted")
	}
	if _, err := resend.ParseUpdate([]byte(`{"scheduled_at":"x","to":"a@b.c"}`), id); err == nil {
		t.Error("update with to accepted")
	}
}
