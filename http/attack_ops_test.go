package http_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/keybrake/keybrake"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestAttackAlert_HoldMovedPastMidnight: a hold raised on a later day
// moves into that day whole (keybrake.RaiseBuckets), but on SQLite the move
// wrote the counters directly and the threshold trigger saw only the
// raise's difference. A key holder with a $10 daily cap held $9 at 23:30,
// raised it by 50 cents after midnight and confirmed it: $9.50 of the new
// day's $10 moved with neither its 50% nor its 80% alert, the operator's
// only warning that the day's budget was nearly gone. The move now checks
// the thresholds of the buckets it fills, as PostgreSQL's counter trigger
// always did.
func TestAttackAlert_HoldMovedPastMidnight(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"daily_usd_cap":10,"allowed_endpoints":["*"]}`)
		e.Clock.Set(time.Date(2026, 11, 30, 23, 30, 0, 0, time.UTC))
		pi := a.must(t, 200, "POST", "/v1/payment_intents", "amount=900&currency=usd&payment_method=pm_card_visa")
		e.Clock.Set(time.Date(2026, 12, 1, 0, 10, 0, 0, time.UTC))
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi), "amount=950")
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi)+"/confirm", "")
		got := map[string]bool{}
		for _, al := range thresholdAlertList(t, e.Server.Store, a.keyID) {
			got[al.AlertKey] = true
		}
		for _, p := range []string{"50", "80"} {
			if k := "threshold:" + a.keyID + ":daily:2026-12-01:" + p; !got[k] {
				t.Errorf("no %s%% alert for 2026-12-01, where $9.50 of $10 moved (alerts: %v)", p, got)
			}
		}
		a.wantMoneyComplete(t, 950)
	})
}

// thresholdAlertList returns keyID's threshold alerts.
func thresholdAlertList(t *testing.T, store keybrake.Store, keyID string) []*keybrake.Alert {
	t.Helper()
	as, err := store.FindAlerts(t.Context(), keybrake.AlertFilter{KeyID: keyID, Kind: keybrake.AlertThreshold, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return as
}

// TestAttackMCP_ClientNameHidesCalls: an MCP session's client name (from
// its initialize request) is recorded, cut to 200 bytes, in the audit
// event of every tool call. The cut fell inside a multi-byte character
// when the agent chose a name that put one there, and PostgreSQL refuses
// text that is not UTF-8: every event of the session failed to insert and
// was dropped ("audit event lost" in the log), so the agent's refunds and
// customers moved money and changed data with no trace in the audit log
// the operator reads and exports. The name is now cut at a character
// boundary.
func TestAttackMCP_ClientNameHidesCalls(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		keyID, secret := e.CreateKey(t, `{"daily_usd_cap":100}`)
		name := strings.Repeat("a", 199) + "é" // "… 1.0" appended: byte 200 is é's first
		cs := e.MCP(t, secret, name, nil)
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_customer", Arguments: map[string]any{"name": "Jo"}})
		if err != nil || res.IsError {
			t.Fatalf("create_customer: %v %+v", err, res)
		}
		var call *keybrake.Event
		for _, ev := range e.events(t, keyID) {
			if ev.Via == keybrake.ViaMCP && ev.Operation == "customers.create" {
				call = ev
			}
		}
		if call == nil {
			t.Fatalf("the tool call has no audit event")
		}
		if !utf8.ValidString(call.MCPClient) || !strings.HasPrefix(call.MCPClient, strings.Repeat("a", 199)) {
			t.Fatalf("recorded client %q", call.MCPClient)
		}
	})
}

// TestAttackAudit_OddBytesDropEvents: an audit event quotes text the key
// holder chose (the refused customer, the Keybrake-Allow-Duplicate
// header's reason), and PostgreSQL refuses text that is not UTF-8 or holds
// a NUL byte: the event failed to insert and was dropped. One byte made a
// request vanish from the audit log, an allowed $5 charge with it (a
// duplicate let through by an override whose reason was "\xff"), and with
// it the refusal-burst alert the events raise. Both stores now keep such
// text with U+FFFD in place of the bytes (keybrake.CleanText).
func TestAttackAudit_OddBytesDropEvents(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		keyID, secret := e.CreateKey(t, `{"allowed_customers":["cus_A"]}`)
		dupID, dupSecret := e.CreateKey(t, `{"daily_usd_cap":100,"guards":{"duplicate":{"window_seconds":600,"allow_override":true}}}`)
		form := Header{"Content-Type", "application/x-www-form-urlencoded"}
		for _, body := range []string{"amount=100&currency=usd&customer=cus_%FF", "amount=100&currency=usd&customer=cus_%00"} {
			if resp, out := e.DoRaw(t, "POST", "/v1/payment_intents", body, Header{"Authorization", "Bearer " + secret}, form); resp.StatusCode != 403 {
				t.Fatalf("%s: %d %s", body, resp.StatusCode, out)
			}
		}
		auth := Header{"Authorization", "Bearer " + dupSecret}
		for i, h := range [][]Header{{auth, form}, {auth, form, {keybrake.OverrideHeader, "retry \xff"}}} {
			if resp, out := e.DoRaw(t, "POST", "/v1/charges", "amount=500&currency=usd&source=tok_visa", h...); resp.StatusCode != 200 {
				t.Fatalf("charge %d: %d %s", i, resp.StatusCode, out)
			}
		}
		var denied, allowed int
		for _, ev := range e.events(t, keyID) {
			if ev.Decision == keybrake.DecisionDeny && strings.Contains(ev.Reason, "cus_\uFFFD") {
				denied++
			}
		}
		for _, ev := range e.events(t, dupID) {
			if ev.Decision == keybrake.DecisionAllow && ev.Operation == "charges.create" {
				allowed++
				if !utf8.ValidString(ev.Reason) {
					t.Errorf("reason %q kept as sent", ev.Reason)
				}
			}
		}
		if denied != 2 || allowed != 2 {
			t.Fatalf("%d refusals and %d charges audited, want 2 and 2 (one event per request)", denied, allowed)
		}
		if sc, ok := e.Store.(keybrake.AuditChainService); ok {
			if rep, err := keybrake.VerifyAuditLog(context.Background(), sc, nil); err != nil || !rep.OK() {
				t.Fatalf("audit chain: %+v, %v", rep, err)
			}
		}
	})
}

// TestAttackGuards_OddBytesDodgeBreaker: the breaker suspends a key after
// refusal_burst refusals, quoting the last refusal in the suspension's
// reason. On PostgreSQL a refusal naming customer "cus_\xff" made that
// reason text PostgreSQL refuses, so the suspension, and with it the count
// of the refusal, rolled back: a key holder probed the key's allowlists
// without end and the breaker never tripped. The reason is now kept with
// U+FFFD in place of the byte, and the key is suspended on the burst.
func TestAttackGuards_OddBytesDodgeBreaker(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		keyID, secret := e.CreateKey(t, `{"allowed_customers":["cus_A"],"guards":{"breaker":{"refusal_burst":3,"refusal_window_seconds":600}}}`)
		for i := 0; i < 3; i++ {
			if resp, out := e.DoRaw(t, "POST", "/v1/payment_intents", "amount=100&currency=usd&customer=cus_%FF",
				Header{"Authorization", "Bearer " + secret}, Header{"Content-Type", "application/x-www-form-urlencoded"}); resp.StatusCode != 403 {
				t.Fatalf("refusal %d: %d %s", i, resp.StatusCode, out)
			}
		}
		k, err := e.Store.FindKeyByID(context.Background(), keyID)
		if err != nil {
			t.Fatal(err)
		}
		if k.SuspendedAt == nil || !utf8.ValidString(k.SuspendedReason) {
			t.Fatalf("after 3 refusals under a burst of 3: suspended at %v (%q)", k.SuspendedAt, k.SuspendedReason)
		}
	})
}

// TestAttackAudit_ExportShowsOtherAmount: an audit export is evidence, its
// chain checked offline by `keybrake audit verify`. Go's JSON decoder
// matches names case-insensitively and keeps the last of repeated ones,
// so a line edited to read "amount":50,"AMOUNT":500 showed every other
// reader (jq, a spreadsheet import, a person) a 50-cent charge where $5
// moved, while the verifier read 500, found the hash right and called
// the export intact. A line must now be exactly as keybrake writes it.
func TestAttackAudit_ExportShowsOtherAmount(t *testing.T) {
	e := MustOpen(t)
	_, secret := e.CreateKey(t, `{"daily_usd_cap":100}`)
	resp, out := e.DoRaw(t, "POST", "/v1/charges", "amount=500&currency=usd&source=tok_visa",
		Header{"Authorization", "Bearer " + secret}, Header{"Content-Type", "application/x-www-form-urlencoded"})
	if resp.StatusCode != 200 {
		t.Fatalf("charge: %d %s", resp.StatusCode, out)
	}
	e.Server.FlushAudit()
	var buf bytes.Buffer
	if rep, err := keybrake.VerifyAuditLog(context.Background(), e.Store.(keybrake.AuditChainService), &buf); err != nil || !rep.OK() {
		t.Fatalf("export: %+v, %v", rep, err)
	}
	if !strings.Contains(buf.String(), `"amount":500,`) {
		t.Fatalf("no $5 charge in the export:\n%s", buf.String())
	}
	for _, forged := range []string{`"amount":50,"AMOUNT":500,`, `"amount":50,"amount":500,`, `"amount":500,"via":"mcp","Via":"",`} {
		edited := strings.Replace(buf.String(), `"amount":500,`, forged, 1)
		rep, err := keybrake.VerifyAuditExport(strings.NewReader(edited))
		if err == nil && rep.OK() {
			t.Errorf("an export with %s verified as intact", forged)
		}
	}
	// As written, it still verifies.
	if rep, err := keybrake.VerifyAuditExport(bytes.NewReader(buf.Bytes())); err != nil || !rep.OK() || rep.Events == 0 {
		t.Fatalf("the export as written: %+v, %v", rep, err)
	}
}

// TestAttackAdmin_CaseVariantPolicyHidden: the guards and approval fields
// of the admin API were decoded with encoding/json, which matches names
// regardless of case and keeps the last, so a reviewed key policy
// {"breaker":{"refusal_burst":3,"refusal_window_seconds":3600,
// "REFUSAL_WINDOW_SECONDS":1}} made a breaker that trips only on 3
// refusals within one second, and {"above_usd":50,"above_uſd":100000} (a long s) one whose
// approvals start at $100,000, while the change request, and the admin
// audit log's copy of it, read an hour and $50. Such a field is now
// refused.
func TestAttackAdmin_CaseVariantPolicyHidden(t *testing.T) {
	e := MustOpen(t)
	for _, body := range []string{
		`{"guards":{"breaker":{"refusal_burst":3,"refusal_window_seconds":3600,"REFUSAL_WINDOW_SECONDS":1}}}`,
		`{"guards":{"velocity":[{"name":"v","per":"key","operations":["charges.create"],"limit":1,"window_seconds":60,"Limit":1000}]}}`,
		`{"approval":{"above_usd":50,"above_uſd":100000}}`,
	} {
		resp, out := e.Admin(t, "POST", "/vault/keys", body)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", body, resp.StatusCode, out)
		}
	}
	// Names as documented still work.
	if resp, out := e.Admin(t, "POST", "/vault/keys", `{"guards":{"breaker":{"refusal_burst":3,"refusal_window_seconds":60}},"approval":{"above_usd":50}}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("a plain policy: %d %s", resp.StatusCode, out)
	}
}
