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

func TestPolicy(t *testing.T) {
	p := resend.Policy{Senders: []string{"billing@acme.com", "@news.acme.com"}, RecipientDomains: []string{"x.com"}, MaxRecipients: 2}
	tests := []struct {
		name, body string
		ok         bool
	}{
		{"OK", `{"from":"Billing <BILLING@acme.com>","to":"a@x.com","subject":"s"}`, true},
		{"OKDomainSender", `{"from":"any@news.acme.com","to":"a@X.com","subject":"s"}`, true},
		{"ErrSender", `{"from":"ceo@acme.com","to":"a@x.com","subject":"s"}`, false},
		{"ErrSubdomainSender", `{"from":"a@evil.news.acme.com","to":"a@x.com","subject":"s"}`, false},
		{"ErrRecipientInBcc", `{"from":"billing@acme.com","to":"a@x.com","bcc":"spy@evil.com","subject":"s"}`, false},
		{"ErrSubdomainRecipient", `{"from":"billing@acme.com","to":"a@mail.x.com","subject":"s"}`, false},
		{"ErrTooMany", `{"from":"billing@acme.com","to":["a@x.com","b@x.com","c@x.com"],"subject":"s"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := resend.ParseEmail([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if why := p.Check(e); (why == "") != tt.ok {
				t.Errorf("Check = %q, want ok=%v", why, tt.ok)
			}
		})
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
