package http_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
)

func guardedCharge(e *Env, t *testing.T, secret, idem, body string, extra map[string]string) (*http.Response, string) {
	t.Helper()
	h := map[string]string{"Authorization": "Bearer " + secret, "Idempotency-Key": idem}
	for k, v := range extra {
		h[k] = v
	}
	resp, out := e.Do(t, "POST", "/stripe/v1/charges", body, h)
	return resp, string(out)
}

func TestGuards_Duplicate(t *testing.T) {
	e := MustOpen(t)
	_, secret := e.CreateKey(t, `{"guards":{"duplicate":{"window_seconds":3600,"allow_override":true}}}`)
	body := "amount=2000&currency=usd&source=tok_visa"
	if resp, out := guardedCharge(e, t, secret, "a", body, nil); resp.StatusCode != 200 {
		t.Fatalf("first: %d %s", resp.StatusCode, out)
	}
	if resp, out := guardedCharge(e, t, secret, "a", body, nil); resp.StatusCode != 200 {
		t.Fatalf("replay: %d %s", resp.StatusCode, out)
	}
	resp, out := guardedCharge(e, t, secret, "b", body, nil)
	if resp.StatusCode != 409 || !strings.Contains(out, "keybrake_duplicate_charge") || !strings.Contains(out, "ch_") || !strings.Contains(out, keybrake.OverrideHeader) {
		t.Fatalf("duplicate: %d %s", resp.StatusCode, out)
	}
	if n, _ := e.SucceededCents("usd"); n != 1 {
		t.Fatalf("upstream charges: %d, want 1", n)
	}
	resp, out = guardedCharge(e, t, secret, "c", body, map[string]string{keybrake.OverrideHeader: "second seat, ticket 42"})
	if resp.StatusCode != 200 {
		t.Fatalf("override: %d %s", resp.StatusCode, out)
	}
	// The override is in the audit log.
	_, ev := e.Admin(t, "GET", "/vault/keys/"+keyIDOf(t, e, secret)+"/events", "")
	if !strings.Contains(string(ev), "ticket 42") {
		t.Fatalf("override not audited: %s", ev)
	}
}

func keyIDOf(t *testing.T, e *Env, secret string) string {
	t.Helper()
	k, err := e.Store.FindKeyBySecretHash(t.Context(), khttp.HashSecret(secret))
	if err != nil {
		t.Fatal(err)
	}
	return k.ID
}

func TestGuards_Velocity(t *testing.T) {
	e := MustOpen(t)
	_, secret := e.CreateKey(t, `{"guards":{"velocity":[{"name":"three_a_day","per":"customer","operations":["charges.create"],"limit":3,"window_seconds":86400}]}}`)
	for i := range 3 {
		if resp, out := guardedCharge(e, t, secret, fmt.Sprint(i), fmt.Sprintf("amount=%d&currency=usd&source=tok_visa", 100+i), nil); resp.StatusCode != 200 {
			t.Fatalf("charge %d: %d %s", i, resp.StatusCode, out)
		}
	}
	e.Clock.Advance(time.Hour)
	resp, out := guardedCharge(e, t, secret, "x", "amount=999&currency=usd&source=tok_visa", nil)
	// A day is counted in buckets of 24 minutes: the first charge's
	// bucket leaves the window 23 hours from now, rounded up to one.
	wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != 429 || wait < 23*3600 || wait > 23*3600+24*60 || !strings.Contains(out, "three_a_day") {
		t.Fatalf("fourth: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), out)
	}
}

func TestGuards_FieldRules(t *testing.T) {
	e := MustOpen(t)
	t.Run("ErrBadRuleNamesIt", func(t *testing.T) {
		for _, tc := range []struct{ expr, want string }{
			{`amount <=`, "1:10"},
			{`amount + 1`, "type int"},
			{`amount == "x"`, "no matching overload"},
			{`nosuchvar > 1`, "undeclared reference"},
			{strings.Repeat("(", 200) + "true" + strings.Repeat(")", 200), "recursion"},
		} {
			resp, out := e.Admin(t, "POST", "/vault/keys", fmt.Sprintf(`{"guards":{"rules":[{"name":"r1","expr":%q}]}}`, tc.expr))
			if resp.StatusCode != 400 || !strings.Contains(string(out), `r1`) || !strings.Contains(string(out), "guards.rules[0].expr") || !strings.Contains(string(out), tc.want) {
				t.Fatalf("%q: %d %s", tc.expr, resp.StatusCode, out)
			}
		}
		resp, out := e.Admin(t, "POST", "/vault/keys", `{"guards":{"rulez":[]}}`)
		if resp.StatusCode != 400 || !strings.Contains(string(out), "rulez") {
			t.Fatalf("unknown field: %d %s", resp.StatusCode, out)
		}
	})
	_, secret := e.CreateKey(t, `{"guards":{"rules":[
		{"name":"small_usd","expr":"has(amount) && amount <= 5000 && currency == \"usd\""},
		{"name":"run_id","expr":"has(metadata.run_id)"},
		{"name":"no_transfers","expr":"!has(transfer_data)"},
		{"name":"usage","expr":"description.startsWith(\"Usage billing\")"}]}}`)
	ok := "amount=100&currency=usd&source=tok_visa&metadata[run_id]=r1&description=Usage+billing+nov"
	for _, tc := range []struct {
		body, rule string
	}{
		{ok, ""},
		{strings.Replace(ok, "amount=100", "amount=5001", 1), "small_usd"},
		{strings.Replace(ok, "metadata[run_id]=r1", "metadata[x]=1", 1), "run_id"},
		{ok + "&transfer_data[destination]=acct_1", "no_transfers"},
		{strings.Replace(ok, "description=Usage+billing+nov", "description=Other", 1), "usage"},
		{strings.Replace(ok, "&description=Usage+billing+nov", "", 1), "usage"},
	} {
		resp, out := guardedCharge(e, t, secret, "k"+tc.body, tc.body, nil)
		if tc.rule == "" && resp.StatusCode != 200 || tc.rule != "" && (resp.StatusCode != 403 || !strings.Contains(out, `\"`+tc.rule+`\"`)) {
			t.Fatalf("%s: %d %s (want rule %q)", tc.body, resp.StatusCode, out, tc.rule)
		}
	}
	// Reads are not money-moving: rules without operations do not apply.
	resp, out := e.Do(t, "GET", "/stripe/v1/charges", "", map[string]string{"Authorization": "Bearer " + secret})
	if resp.StatusCode != 200 {
		t.Fatalf("list: %d %s", resp.StatusCode, out)
	}
}

// Hostile rules are bounded: at compile time by the parser's limits, at
// run time by CEL's cost limit, never by wall time.
func TestGuards_FieldRulesHostile(t *testing.T) {
	e := MustOpen(t)
	costly := `[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, a+b+c+d > 0))))`
	_, secret := e.CreateKey(t, fmt.Sprintf(`{"guards":{"rules":[{"name":"costly","expr":%q}]}}`, costly))
	start := time.Now()
	resp, out := guardedCharge(e, t, secret, "a", "amount=100&currency=usd&source=tok_visa", nil)
	if resp.StatusCode != 403 || !strings.Contains(out, "cost limit") {
		t.Fatalf("costly rule: %d %s", resp.StatusCode, out)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("costly rule took %v", d)
	}
	huge := `"` + strings.Repeat("a", 3000) + `" == description`
	if resp, out := e.Admin(t, "POST", "/vault/keys", fmt.Sprintf(`{"guards":{"rules":[{"name":"huge","expr":%q}]}}`, huge)); resp.StatusCode != 400 {
		t.Fatalf("huge literal: %d %s", resp.StatusCode, out)
	}
	wide := strings.TrimSuffix(strings.Repeat("amount == 1 || ", 150), " || ")
	if resp, out := e.Admin(t, "POST", "/vault/keys", fmt.Sprintf(`{"guards":{"rules":[{"name":"wide","expr":%q}]}}`, wide)); resp.StatusCode != 400 {
		t.Fatalf("wide expression: %d %s", resp.StatusCode, out)
	}
}

func TestGuards_BreakerRepeatSuspendsAndResume(t *testing.T) {
	e := MustOpen(t)
	id, secret := e.CreateKey(t, `{"guards":{"duplicate":{"window_seconds":3600},"breaker":{"repeat_body":4,"repeat_window_seconds":60}}}`)
	body := "amount=700&currency=usd&source=tok_visa"
	// An agent looping on the same charge under fresh Idempotency-Keys: one
	// charge, refusals as duplicates, then the key is suspended.
	codes := []int{}
	for i := range 6 {
		resp, _ := guardedCharge(e, t, secret, fmt.Sprint("loop", i), body, nil)
		codes = append(codes, resp.StatusCode)
	}
	if fmt.Sprint(codes) != "[200 409 409 403 403 403]" {
		t.Fatalf("statuses %v", codes)
	}
	if n, _ := e.SucceededCents("usd"); n != 1 {
		t.Fatalf("upstream charges: %d", n)
	}
	resp, out := guardedCharge(e, t, secret, "other", "amount=100&currency=usd&source=tok_mastercard", nil)
	if resp.StatusCode != 403 || !strings.Contains(out, "suspended") || !strings.Contains(out, "/resume") {
		t.Fatalf("suspended key: %d %s", resp.StatusCode, out)
	}
	if resp, out := e.Admin(t, "POST", "/vault/keys/"+id+"/resume", ""); resp.StatusCode != 200 || !strings.Contains(string(out), `"suspended_at": null`) {
		t.Fatalf("resume: %d %s", resp.StatusCode, out)
	}
	if resp, out := guardedCharge(e, t, secret, "other", "amount=100&currency=usd&source=tok_mastercard", nil); resp.StatusCode != 200 {
		t.Fatalf("after resume: %d %s", resp.StatusCode, out)
	}
}

func TestGuards_BreakerRefusalBurst(t *testing.T) {
	e := MustOpen(t)
	_, secret := e.CreateKey(t, `{"per_request_usd_cap":1,"guards":{"breaker":{"refusal_burst":3,"refusal_window_seconds":10}}}`)
	for i := range 3 {
		if resp, out := guardedCharge(e, t, secret, fmt.Sprint(i), fmt.Sprintf("amount=%d&currency=usd&source=tok_visa", 500+i), nil); resp.StatusCode != 429 {
			t.Fatalf("over cap %d: %d %s", i, resp.StatusCode, out)
		}
	}
	resp, out := guardedCharge(e, t, secret, "small", "amount=50&currency=usd&source=tok_visa", nil)
	if resp.StatusCode != 403 || !strings.Contains(out, "suspended") || !strings.Contains(out, "refusal_burst") {
		t.Fatalf("after the burst: %d %s", resp.StatusCode, out)
	}
}
