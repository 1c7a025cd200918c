package http_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/alert"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/storetest"
)

// TestApprovalLink: a request waiting for approval raises one signed
// approval_required alert whose approve link decides once by POST (a GET
// only confirms); tampered, expired and replayed links are refused; the
// approved retry is counted once. On SQLite and PostgreSQL.
func TestApprovalLink(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) { testApprovalLink(t, MustOpen(t)) })
	t.Run("Postgres", func(t *testing.T) {
		testApprovalLink(t, MustOpen(t, func(s *khttp.Server) { s.Store = kbtest.Postgres(t) }))
	})
}

func testApprovalLink(t *testing.T, e *Env) {
	ctx := context.Background()
	hook := MustWebhook(t, e, keybrake.FormatKeybrake)
	keyID, secret := e.CreateKey(t, `{"label":"agent","total_usd_cap":1000,"approval":{"above_usd":100}}`)
	sc := e.Stripe(secret)
	charge := func(idem string, cents int64) error {
		p := chargeParams(cents, "usd")
		p.SetIdempotencyKey(idem)
		_, err := sc.V1Charges.Create(ctx, p)
		return err
	}
	// links asks for approval of a charge and returns the alert's payload.
	links := func(idem string, cents int64) alert.ApprovalInfo {
		t.Helper()
		before := len(hook.Acked())
		for range 2 { // the retry finds the same approval and raises nothing
			if se := StripeErr(t, charge(idem, cents), http.StatusPaymentRequired); se.Code != "keybrake_approval_required" {
				t.Fatalf("want approval required: %+v", se)
			}
		}
		for range 2 {
			if err := e.Server.SendAlerts(ctx); err != nil {
				t.Fatal(err)
			}
		}
		acked := hook.Acked()
		if len(acked) != before+1 || hook.BadSignatures() != 0 {
			t.Fatalf("alerts acknowledged %v (had %d), bad signatures %d", acked, before, hook.BadSignatures())
		}
		var ev alert.Event
		var body []byte
		for id, n := range acked {
			var probe alert.Event
			json.Unmarshal(hook.Body(id), &probe)
			if probe.Type == "alert.approval_required" && probe.Data.Approval != nil && probe.Data.Approval.IdempotencyKey == idem {
				if n != 1 {
					t.Fatalf("alert %s delivered %d times", id, n)
				}
				ev, body = probe, hook.Body(id)
			}
		}
		ap := ev.Data.Approval
		if ap == nil || ap.KeyID != keyID || ap.Operation != "charges.create" || ap.USD != keybrake.Micros(cents)*10_000 ||
			ap.ExpiresAt.IsZero() || !strings.Contains(ap.ConsoleURL, "/console/approvals/"+ap.ID) || ev.Data.ApprovalID != ap.ID {
			t.Fatalf("approval_required payload: %s", body)
		}
		if s, _ := e.Store.LinkSecret(ctx, keybrake.LinkSecretApprovals); strings.Contains(string(body), string(s)) {
			t.Fatal("the link secret is in the alert")
		}
		return *ap
	}
	do := func(method, link string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, link, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		if s, _ := e.Store.LinkSecret(ctx, keybrake.LinkSecretApprovals); strings.Contains(b.String(), string(s)) {
			t.Fatal("the link secret is in a page")
		}
		return resp.StatusCode, b.String()
	}
	state := func(id string) string {
		t.Helper()
		a, err := e.Store.FindApprovalByID(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return a.Status(e.Clock.Now())
	}
	with := func(link, key, value string) string {
		u, _ := url.Parse(link)
		q := u.Query()
		q.Set(key, value)
		u.RawQuery = q.Encode()
		return u.String()
	}

	ap := links("ik-150", 150_00)
	if st, page := do("GET", ap.ApproveURL); st != http.StatusOK || !strings.Contains(page, `<form method="post">`) || state(ap.ID) != keybrake.ApprovalPending {
		t.Fatalf("GET of the link (a chat preview): %d, state %s\n%s", st, state(ap.ID), page)
	}
	u, _ := url.Parse(ap.ApproveURL)
	q := u.Query()
	tampered := map[string]string{
		"deny with the approve MAC": with(ap.ApproveURL, "action", "deny"),
		"later expiry":              with(ap.ApproveURL, "exp", q.Get("exp")+"0"),
		"other endpoint":            with(ap.ApproveURL, "endpoint", "ep_attacker"),
		"other approval":            strings.Replace(ap.ApproveURL, ap.ID, "apr_0000000000000000", 1),
		"flipped MAC":               with(ap.ApproveURL, "sig", strings.Repeat("0", 64)),
		"short MAC":                 with(ap.ApproveURL, "sig", q.Get("sig")[:10]),
		"no MAC":                    strings.Replace(ap.ApproveURL, "sig=", "sog=", 1),
		"MAC twice":                 ap.ApproveURL + "&sig=" + q.Get("sig"),
		"action twice":              ap.ApproveURL + "&action=deny",
	}
	for name, link := range tampered {
		if st, _ := do("POST", link); st != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, st)
		}
	}
	if st := state(ap.ID); st != keybrake.ApprovalPending {
		t.Fatalf("a tampered link decided: %s", st)
	}
	st, page := do("POST", ap.ApproveURL)
	if st != http.StatusOK || state(ap.ID) != keybrake.ApprovalApproved {
		t.Fatalf("POST of the approve link: %d, state %s\n%s", st, state(ap.ID), page)
	}
	a, _ := e.Store.FindApprovalByID(ctx, ap.ID)
	if !strings.HasPrefix(a.DecidedBy, "signed link (endpoint we_") {
		t.Fatalf("decided_by = %q", a.DecidedBy)
	}
	for _, link := range []string{ap.ApproveURL, ap.DenyURL} {
		if st, _ := do("POST", link); st != http.StatusConflict {
			t.Fatalf("replayed link: %d, want 409", st)
		}
	}
	if state(ap.ID) != keybrake.ApprovalApproved {
		t.Fatal("a replayed deny link changed the decision")
	}
	for range 3 {
		if err := charge("ik-150", 150_00); err != nil {
			t.Fatalf("approved retry: %v", err)
		}
	}
	if n, cents := e.SucceededCents("usd"); n != 1 || cents != 150_00 || e.Spend(t, keyID).Total != storetest.USD(150) {
		t.Fatalf("approved retry: %d charges, %d cents, %+v", n, cents, e.Spend(t, keyID))
	}

	late := links("ik-late", 120_00)
	e.Clock.Advance(keybrake.DefaultApprovalTTL)
	if st, _ := do("POST", late.ApproveURL); st != http.StatusGone || state(late.ID) != keybrake.ApprovalExpired {
		t.Fatalf("expired link: %d, state %s", st, state(late.ID))
	}

	e.Server.FlushAudit()
	if _, out := e.Admin(t, "GET", "/vault/audit", ""); !strings.Contains(string(out), "signed link (endpoint we_") {
		t.Fatalf("admin audit lacks the link decision: %s", out)
	}
	// Bad MACs count as failed authentications: enough of them and the
	// address is refused even with a good link.
	limited := false
	for range 40 {
		if st, _ := do("GET", tampered["flipped MAC"]); st == http.StatusTooManyRequests {
			limited = true
			break
		}
	}
	if !limited {
		t.Fatal("40 bad links in a row were never rate limited")
	}
}
