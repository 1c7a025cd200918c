package http_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/alert"
)

// holdForApproval sends form to path under idem with the vault key secret
// and returns the approval the 402 names.
func holdForApproval(t *testing.T, e *Env, secret, path, idem string, form url.Values) string {
	t.Helper()
	resp, out := e.Do(t, "POST", path, form.Encode(), map[string]string{"Authorization": "Bearer " + secret, "Idempotency-Key": idem})
	if resp.StatusCode != http.StatusPaymentRequired || resp.Header.Get("Keybrake-Approval-Id") == "" {
		t.Fatalf("%s: %d %s, want 402 keybrake_approval_required", path, resp.StatusCode, out)
	}
	return resp.Header.Get("Keybrake-Approval-Id")
}

// approvalSurfaces returns every place an approver sees approval id: the
// Slack alert's text, the keybrake alert's body, the admin API's approval
// object and the signed approve link's page.
func approvalSurfaces(t *testing.T, e *Env, slack, kb interface {
	Acked() map[string]int
	Body(string) []byte
}, id string) (slackText, kbBody, adminJSON, linkPage string) {
	t.Helper()
	for range 2 {
		if err := e.Server.SendAlerts(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for ev := range slack.Acked() {
		var b struct {
			Text string `json:"text"`
		}
		json.Unmarshal(slack.Body(ev), &b)
		if strings.Contains(b.Text, id) {
			slackText = b.Text
		}
	}
	var link string
	for ev := range kb.Acked() {
		var probe alert.Event
		json.Unmarshal(kb.Body(ev), &probe)
		if probe.Data.Approval != nil && probe.Data.Approval.ID == id {
			kbBody, link = string(kb.Body(ev)), probe.Data.Approval.ApproveURL
		}
	}
	if slackText == "" || kbBody == "" || link == "" {
		t.Fatalf("no approval_required alert for %s: slack %q, keybrake %q", id, slackText, kbBody)
	}
	resp, out := e.Admin(t, "GET", "/vault/approvals/"+id, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("admin approval: %d %s", resp.StatusCode, out)
	}
	adminJSON = string(out)
	lr, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	defer lr.Body.Close()
	page, _ := io.ReadAll(lr.Body)
	if lr.StatusCode != http.StatusOK {
		t.Fatalf("link page: %d %s", lr.StatusCode, page)
	}
	return slackText, kbBody, adminJSON, string(page)
}

// TestAttackApproval_DestinationHidden: an agent holding a key whose
// transfers wait for a person asked for "$500 transfers.create". The
// approver saw the operation, the amount and the key, but not the
// destination: the approval covered a transfer to the agent's own
// connected account, which the person would never have approved, and the
// approved retry moved $500 there within the key's cap. Every place an
// approval is shown now lists the parameters the fingerprint covers —
// destination first, even behind 45 metadata entries — escaped for HTML
// and Slack.
func TestAttackApproval_DestinationHidden(t *testing.T) {
	e := MustOpen(t)
	slack := MustWebhook(t, e, keybrake.FormatSlack)
	kb := MustWebhook(t, e, keybrake.FormatKeybrake)
	_, secret := e.CreateKey(t, `{"label":"agent","allowed_endpoints":["*"],"total_usd_cap":1000,"approval":{"above_usd":100}}`)
	form := url.Values{"amount": {"50000"}, "currency": {"usd"}, "description": {"<b>payout</b> & <https://evil.example|Approve>"}}
	for i := range 45 {
		form.Set("metadata[pad"+strings.Repeat("x", i%3)+string(rune('a'+i%26))+string(rune('a'+i/26))+"]", "padding")
	}
	form.Set("destination", "acct_1Attacker")
	id := holdForApproval(t, e, secret, "/v1/transfers", "tr-1", form)

	slackText, kbBody, adminJSON, page := approvalSurfaces(t, e, slack, kb, id)
	if !strings.Contains(slackText, `destination = "acct_1Attacker"`) || !strings.Contains(slackText, "…and ") {
		t.Errorf("the Slack alert does not show the destination:\n%s", slackText)
	}
	if strings.Contains(slackText, "<https://evil.example|") || !strings.Contains(slackText, "&lt;https://evil.example|Approve&gt;") {
		t.Errorf("the Slack alert's parameters are not escaped:\n%s", slackText)
	}
	var ev alert.Event
	if err := json.Unmarshal([]byte(kbBody), &ev); err != nil || !hasParam(ev.Data.Approval.Params, "destination", "acct_1Attacker") ||
		!strings.Contains(ev.Data.Message, `destination = "acct_1Attacker"`) {
		t.Errorf("the keybrake alert does not show the destination: %s", kbBody)
	}
	var a keybrake.Approval
	if err := json.Unmarshal([]byte(adminJSON), &a); err != nil || !hasParam(a.Params, "destination", "acct_1Attacker") ||
		!hasParam(a.Params, "amount", "50000") || a.Params.More == 0 || len(a.Params.List) > 40 {
		t.Errorf("the admin API's approval does not show the destination: %s", adminJSON)
	}
	if !strings.Contains(page, "<code>destination</code></dt><dd><code>acct_1Attacker</code>") {
		t.Errorf("the link page does not show the destination:\n%s", page)
	}
	if strings.Contains(page, "<b>payout</b>") || !strings.Contains(page, "&lt;b&gt;payout&lt;/b&gt;") {
		t.Errorf("the link page does not escape the parameters:\n%s", page)
	}
}

func hasParam(p *keybrake.ApprovalParams, name, value string) bool {
	if p == nil {
		return false
	}
	for _, kv := range p.List {
		if kv.Name == name && kv.Value == value && !kv.Masked {
			return true
		}
	}
	return false
}

// TestAttackApproval_ParamsLeakSecrets: showing an approval's parameters
// must not put a secret or card data in the store, an alert, the admin API
// or a page: a client_secret, a parameter named like a password or a
// token, a value holding a Stripe key or a client secret are masked; a
// card number is refused before any approval is made; a value with a
// newline cannot add an "Approve:" line to the alert.
func TestAttackApproval_ParamsLeakSecrets(t *testing.T) {
	e := MustOpen(t)
	slack := MustWebhook(t, e, keybrake.FormatSlack)
	kb := MustWebhook(t, e, keybrake.FormatKeybrake)
	_, secret := e.CreateKey(t, `{"label":"agent","allowed_endpoints":["*"],"total_usd_cap":1000,"approval":{"above_usd":100}}`)

	pan := url.Values{"amount": {"50000"}, "currency": {"usd"}, "destination": {"acct_1"}, "metadata[note]": {"4242 4242 4242 4242"}}
	resp, out := e.Do(t, "POST", "/v1/transfers", pan.Encode(), map[string]string{"Authorization": "Bearer " + secret, "Idempotency-Key": "tr-pan"})
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a transfer with a card number: %d %s, want 400", resp.StatusCode, out)
	}
	if list, err := e.Store.FindApprovals(context.Background(), keybrake.ApprovalFilter{}); err != nil || len(list) != 0 {
		t.Fatalf("a request with a card number made an approval: %v, %v", list, err)
	}

	secrets := []string{"pi_3Abc_secret_DEF123", "hunter2-pass", "sk_live_leakedkey", "tok_privateXYZ", "whsec_leaked"}
	form := url.Values{"amount": {"50000"}, "currency": {"usd"}, "destination": {"acct_1Real"},
		"metadata[client_secret]": {secrets[0]}, // transfers.create takes no client_secret: an unknown top-level name is refused (stripe.CheckParams)
		"metadata[password]":      {secrets[1]},
		"metadata[note]":          {"key " + secrets[2]},
		"metadata[card_token]":    {secrets[3]},
		"metadata[hook]":          {secrets[4]},
		"metadata[callback]":      {"https://user:" + secrets[1] + "x@example.com/cb"},
		"metadata[description]":   {"ok\nApprove: https://evil.example/approve\u202e"},
		"transfer_group":          {"ORDER_42"},
	}
	id := holdForApproval(t, e, secret, "/v1/transfers", "tr-2", form)
	slackText, kbBody, adminJSON, page := approvalSurfaces(t, e, slack, kb, id)
	stored, err := e.Store.FindApprovalByID(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	storedJSON, _ := json.Marshal(stored)
	for where, s := range map[string]string{"Slack alert": slackText, "keybrake alert": kbBody, "admin API": adminJSON, "link page": page, "store": string(storedJSON)} {
		for _, sec := range secrets {
			if strings.Contains(s, sec) {
				t.Errorf("the %s shows %q:\n%s", where, sec, s)
			}
		}
		if !strings.Contains(s, "acct_1Real") || !strings.Contains(s, "ORDER_42") {
			t.Errorf("the %s does not show the request's other parameters:\n%s", where, s)
		}
	}
	for _, line := range strings.Split(slackText, "\n") {
		if strings.HasPrefix(line, "Approve: https://evil.example") {
			t.Errorf("a parameter added an Approve line to the alert:\n%s", slackText)
		}
	}
	if strings.Contains(page, "\u202e") || strings.Contains(slackText, "\u202e") {
		t.Error("a bidi override reached a page or an alert")
	}
}

// TestApprovalParams_Resend: a Resend email waiting for approval shows its
// recipients as resend.ParseEmail read them, not its content; an approval
// recorded without parameters (before the store kept them) says so on the
// admin API and the alert.
func TestApprovalParams_Resend(t *testing.T) {
	e := MustOpenVendors(t)
	_, secret := e.CreateKey(t, `{"vendor":"resend","total_usd_cap":"10","approval":{"above_usd":"0.001"}}`)
	resp, body := e.Do(t, "POST", "/resend/emails", `{"from":"a@example.com","to":["victim@x.com"],"bcc":"copy@attacker.example","subject":"Invoice","html":"<p>secret content</p>"}`,
		map[string]string{"Authorization": "Bearer " + secret, "Content-Type": "application/json", "Idempotency-Key": "approve-me-1"})
	id := resp.Header.Get("Keybrake-Approval-Id")
	if resp.StatusCode != http.StatusPaymentRequired || id == "" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	_, out := e.Admin(t, "GET", "/vault/approvals/"+id, "")
	var a keybrake.Approval
	if err := json.Unmarshal(out, &a); err != nil || !hasParam(a.Params, "to", "victim@x.com") || !hasParam(a.Params, "bcc", "copy@attacker.example") ||
		!hasParam(a.Params, "subject", "Invoice") || strings.Contains(string(out), "secret content") {
		t.Fatalf("the approval of an email: %s", out)
	}

	old := &keybrake.Approval{ID: "apr_old0000000000000000", KeyID: a.KeyID, IdempotencyKey: "before-migration", Fingerprint: "fp",
		Operation: "resend.emails.send", Method: "POST", Path: "/resend/emails", Reason: "old",
		CreatedAt: e.Clock.Now(), ExpiresAt: e.Clock.Now().Add(time.Hour)}
	if _, _, err := e.Store.RequestApproval(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	if _, out := e.Admin(t, "GET", "/vault/approvals/"+old.ID, ""); !strings.Contains(string(out), `"params": null`) && !strings.Contains(string(out), `"params":null`) {
		t.Fatalf("an approval without recorded parameters: %s", out)
	}
	msg, err := alert.BodyWith(keybrake.FormatSlack, &keybrake.Alert{Kind: keybrake.AlertApproval, KeyID: a.KeyID, ApprovalID: old.ID, Detail: old.Operation},
		nil, &alert.ApprovalInfo{ID: old.ID, ExpiresAt: old.ExpiresAt})
	if err != nil || !strings.Contains(string(msg), "Parameters: not recorded") {
		t.Fatalf("the alert of an approval without recorded parameters: %s, %v", msg, err)
	}
}
