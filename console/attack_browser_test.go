package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/keybrake/keybrake/internal/kbtest"
)

// browserSession starts headless chromium signed in to the console at
// base; do runs steps, waitJS polls a predicate until it holds and eval
// reads a value.
type browserSession struct {
	t   *testing.T
	ctx context.Context
}

func newBrowserSession(t *testing.T, base string) *browserSession {
	t.Helper()
	path := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelT(); cancel(); cancelAlloc() })
	b := &browserSession{t: t, ctx: ctx}
	b.do("open the console", chromedp.Navigate(base+"/console/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.do("sign in", chromedp.SendKeys(chromedp.CSS("#token"), kbtest.AdminToken), chromedp.Submit(chromedp.CSS("#token")))
	b.waitJS("the overview", `location.pathname === "/console/" && !!document.querySelector("#stat-calls")`)
	return b
}

func (b *browserSession) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

func (b *browserSession) waitJS(what, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(browserTimeout)
	for {
		_, err := chromedp.Run(b.ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(time.Until(deadline)), chromedp.WithPollingInterval(50*time.Millisecond)))
		if err == nil {
			return
		}
		if time.Now().After(deadline) || b.ctx.Err() != nil {
			text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerHTML.slice(0, 4000) : ""`))
			b.t.Fatalf("waiting for %s (%s): %v\npage: %s", what, expr, err, text)
		}
	}
}

func (b *browserSession) eval(expr string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// TestAttackConsole_StreamLineBreak: the live feed's Server-Sent Events
// split each row's HTML into data: lines at "\n" only, but the format also
// ends a line at a lone "\r", which html/template leaves as it is. A key
// holder whose request put "\r" in its audit event (here in a customer ID
// its key may not use, quoted in the refusal) cut the operator's live row
// short and wrote its own SSE fields after it: a forged "id:" (where the
// feed resumes after a reconnect, skipping every later event), "event:"
// and "data:" lines.
func TestAttackConsole_StreamLineBreak(t *testing.T) {
	s := MustConsole(t, nil)
	base := s.URL()
	_, secret := kbtest.VaultKey(t, base, `{"label":"agent","allowed_customers":["cus_a"]}`)
	b := newBrowserSession(t, base)
	b.waitJS("the live feed", `document.querySelector("#live") && document.querySelector("#live").textContent === "live"`)

	customer := "cus_b\r\rid: 9000000000000000000\revent: row\rdata: forged\r\rdata: x"
	form := url.Values{"amount": {"1000"}, "currency": {"usd"}, "source": {"tok_visa"}, "customer": {customer}}
	req, _ := http.NewRequest("POST", base+"/v1/charges", strings.NewReader(form.Encode()))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("charge for another customer: %d, want 403", resp.StatusCode)
	}
	b.waitJS("the refusal in the live feed", `document.querySelectorAll("#feed tbody tr.deny").length === 1`)
	// The row arrives whole: its reason cell has the whole refusal.
	b.waitJS("the whole reason", `document.querySelector("#feed tbody tr.deny td.reason").textContent.includes("Allowed customers: cus_a.")`)
	if got := b.eval(`document.querySelector("#feed tbody tr.deny td.reason").getAttribute("title")`); !strings.Contains(got, "Allowed customers: cus_a.") {
		t.Fatalf("the reason's title was cut short: %q", got)
	}
	// The stream's position is the real event's ID, not one the key holder wrote.
	if got := b.eval(`String(document.querySelector("#feed tbody tr.deny").dataset.id)`); len(got) > 6 {
		t.Fatalf("row id %q", got)
	}
}
