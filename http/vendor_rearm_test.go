package http_test

import (
	"strings"
	"testing"

	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/internal/simfault"
)

// TestResendRetryAfterErrorIsCounted: Resend keeps no answer to a request
// that failed (a 429, a 5xx it reported), so a retry under the same
// Idempotency-Key sends anew. keybrake released the first attempt; the
// retry must be reserved again under every cap, counts included, and
// refused when the day is full, never forwarded uncounted.
func TestResendRetryAfterErrorIsCounted(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) { testResendRetryAfterError(t, MustOpenVendors(t)) })
	t.Run("Postgres", func(t *testing.T) {
		testResendRetryAfterError(t, MustOpenVendors(t, func(s *khttp.Server) { s.Store = kbtest.Postgres(t) }))
	})
}

func testResendRetryAfterError(t *testing.T, e *VendorEnv) {
	id, secret := e.CreateKey(t, `{"vendor":"resend","daily_email_cap":1,"daily_usd_cap":1}`)
	send := func(idem, to string) (int, string) {
		t.Helper()
		resp, body := e.Do(t, "POST", "/resend/emails", `{"from":"billing@example.com","to":"`+to+`","subject":"s","text":"t"}`,
			map[string]string{"Authorization": "Bearer " + secret, "Content-Type": "application/json", "Idempotency-Key": idem})
		return resp.StatusCode, string(body)
	}
	if _, err := e.Resend.AddFault(simfault.Fault{Method: "POST", Path: "/emails", Mode: simfault.FailBefore, Status: 429, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if st, body := send("first", "a@x.com"); st != 429 {
		t.Fatalf("first attempt: %d %s, want Resend's 429", st, body)
	}
	if st, body := send("second", "b@x.com"); st != 200 {
		t.Fatalf("another email: %d %s", st, body)
	}
	// The day is full: the retry of the first attempt would be a second
	// email.
	st, body := send("first", "a@x.com")
	if n := e.Resend.Billed().Emails; n != 1 {
		t.Fatalf("resendsim sent %d emails under a daily cap of 1 (retry answered %d %s)", n, st, body)
	}
	if st != 429 || !strings.Contains(body, "daily cap of 1 emails") {
		t.Fatalf("retry over the cap: %d %s", st, body)
	}
	if c := keyCounts(t, e.Env, id)["emails"]; c.Used != 1 {
		t.Fatalf("counts.emails = %+v, want 1 used", c)
	}
	// With room again (a new day), the retry is reserved and counted anew.
	e.Clock.Advance(24 * 60 * 60 * 1e9)
	if st, body := send("first", "a@x.com"); st != 200 {
		t.Fatalf("retry on a new day: %d %s", st, body)
	}
	if n, c := e.Resend.Billed().Emails, keyCounts(t, e.Env, id)["emails"]; n != 2 || c.Used != 1 {
		t.Fatalf("sent %d, counted today %+v; want 2 sent, 1 today", n, c)
	}
}
