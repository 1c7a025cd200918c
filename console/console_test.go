package console_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/keybrake/keybrake/console"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/stripesim"
)

// MustConsole starts the simulator and keybrake with the console, on the
// clock now, and returns the server.
func MustConsole(tb testing.TB, now func() time.Time) *khttp.Server {
	tb.Helper()
	_, simURL := kbtest.Simulator(tb, stripesim.Options{})
	return kbtest.Proxy(tb, simURL, func(s *khttp.Server) {
		if now != nil {
			s.Now = now
		}
		s.Console = &console.Console{Store: s.Store, Admin: s, AdminToken: kbtest.AdminToken, Now: s.Now,
			FlushAudit: s.FlushAudit, Logger: kbtest.Logger(), PollInterval: 50 * time.Millisecond}
	})
}

// client is a browser-like client: a cookie jar, no redirects followed,
// and the console's Origin on every request.
type client struct {
	tb   testing.TB
	base string
	hc   *http.Client
}

func newClient(tb testing.TB, base string) *client {
	jar, _ := cookiejar.New(nil)
	return &client{tb: tb, base: base, hc: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (c *client) do(method, path string, form url.Values, mod func(*http.Request)) (*http.Response, string) {
	c.tb.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.tb.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("Origin", c.base)
	if mod != nil {
		mod(req)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// signIn signs in and returns the session's CSRF token.
func (c *client) signIn() string {
	c.tb.Helper()
	return c.signInWith(kbtest.AdminToken)
}

// signInWith signs in with an admin token and returns the CSRF token.
func (c *client) signInWith(token string) string {
	c.tb.Helper()
	resp, _ := c.do("POST", "/console/signin", url.Values{"token": {token}}, nil)
	if resp.StatusCode != http.StatusSeeOther {
		c.tb.Fatalf("sign in: %d", resp.StatusCode)
	}
	_, page := c.do("GET", "/console/keys/new", nil, nil)
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(page)
	if m == nil {
		c.tb.Fatalf("no CSRF token in the page")
	}
	return m[1]
}

var consolePaths = []string{"/console/", "/console/keys", "/console/keys/new", "/console/events", "/console/alerts", "/console/stream", "/console/events/stream"}

func TestSignIn(t *testing.T) {
	clock := kbtest.NewClock(time.Now().UTC())
	s := MustConsole(t, clock.Now)
	id, _ := kbtest.VaultKey(t, s.URL(), `{"label":"secret-label-xyz","daily_usd_cap":25}`)

	t.Run("NoAdminDataWithoutSession", func(t *testing.T) {
		c := newClient(t, s.URL())
		for _, p := range append(consolePaths, "/console/keys/"+id, "/console/keys/"+id+"/stream") {
			resp, body := c.do("GET", p, nil, nil)
			if resp.StatusCode != http.StatusSeeOther && resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET %s without a session: %d", p, resp.StatusCode)
			}
			if (!strings.Contains(p, id) && strings.Contains(body, id)) || strings.Contains(body, "secret-label-xyz") {
				t.Errorf("GET %s without a session shows the key", p)
			}
		}
		for _, p := range []string{"/console/keys", "/console/keys/" + id, "/console/keys/" + id + "/revoke", "/console/signout"} {
			if resp, _ := c.do("POST", p, url.Values{"label": {"x"}}, nil); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("POST %s without a session: %d, want 401", p, resp.StatusCode)
			}
		}
	})

	t.Run("WrongToken", func(t *testing.T) {
		c := newClient(t, s.URL())
		resp, _ := c.do("POST", "/console/signin", url.Values{"token": {kbtest.AdminToken + "x"}}, nil)
		if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
			t.Fatalf("wrong token: %d, cookies %v", resp.StatusCode, resp.Cookies())
		}
	})

	t.Run("CookieFlags", func(t *testing.T) {
		c := newClient(t, s.URL())
		resp, _ := c.do("POST", "/console/signin", url.Values{"token": {kbtest.AdminToken}}, nil)
		cks := resp.Cookies()
		if len(cks) != 1 {
			t.Fatalf("cookies = %v", cks)
		}
		ck := cks[0]
		if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/console" || ck.Secure {
			t.Fatalf("cookie = %+v: want HttpOnly, SameSite=Strict, Path=/console, not Secure over plain HTTP", ck)
		}
		if strings.Contains(ck.Value, kbtest.AdminToken) {
			t.Fatal("the cookie carries the admin token")
		}
		if loc := resp.Header.Get("Location"); strings.Contains(loc, kbtest.AdminToken) {
			t.Fatalf("redirect %q carries the token", loc)
		}
	})

	t.Run("SecureOverTLS", func(t *testing.T) {
		h, _ := s.Handler()
		ts := httptest.NewTLSServer(h)
		defer ts.Close()
		hc := ts.Client()
		hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		req, _ := http.NewRequest("POST", ts.URL+"/console/signin", strings.NewReader("token="+kbtest.AdminToken))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", ts.URL)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if cks := resp.Cookies(); len(cks) != 1 || !cks[0].Secure {
			t.Fatalf("cookie over TLS = %v, want Secure", cks)
		}
	})

	t.Run("TokenNeverInPages", func(t *testing.T) {
		c := newClient(t, s.URL())
		c.signIn()
		for _, p := range []string{"/console/", "/console/keys", "/console/keys/new", "/console/events", "/console/alerts", "/console/keys/" + id} {
			resp, body := c.do("GET", p, nil, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %d", p, resp.StatusCode)
			}
			if strings.Contains(body, kbtest.AdminToken) {
				t.Fatalf("GET %s shows the admin token", p)
			}
		}
	})

	t.Run("SessionExpires", func(t *testing.T) {
		c := newClient(t, s.URL())
		c.signIn()
		clock.Advance(console.DefaultSessionTTL - time.Second)
		if resp, _ := c.do("GET", "/console/keys", nil, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("before expiry: %d", resp.StatusCode)
		}
		clock.Advance(time.Second)
		if resp, _ := c.do("GET", "/console/keys", nil, nil); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("after expiry: %d, want 303 to sign-in", resp.StatusCode)
		}
	})

	t.Run("SignOutEndsSession", func(t *testing.T) {
		c := newClient(t, s.URL())
		csrf := c.signIn()
		u, _ := url.Parse(s.URL() + "/console/")
		old := c.hc.Jar.Cookies(u)
		if resp, _ := c.do("POST", "/console/signout", url.Values{"csrf": {csrf}}, nil); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("sign out: %d", resp.StatusCode)
		}
		c.hc.Jar.SetCookies(u, old) // a stolen copy of the cookie is dead too
		if resp, _ := c.do("GET", "/console/keys", nil, nil); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("after sign-out: %d, want 303", resp.StatusCode)
		}
	})

	t.Run("OpenRedirect", func(t *testing.T) {
		c := newClient(t, s.URL())
		for _, next := range []string{"//evil.example/", "https://evil.example/console/", "/\\evil.example", "/vault/keys"} {
			resp, _ := c.do("POST", "/console/signin", url.Values{"token": {kbtest.AdminToken}, "next": {next}}, nil)
			if loc := resp.Header.Get("Location"); loc != "/console/" {
				t.Errorf("next=%q redirects to %q", next, loc)
			}
		}
	})
}

func TestCSRF(t *testing.T) {
	s := MustConsole(t, nil)
	id, _ := kbtest.VaultKey(t, s.URL(), `{"label":"before","daily_usd_cap":25}`)
	c := newClient(t, s.URL())
	csrf := c.signIn()
	edit := func(f url.Values, mod func(*http.Request)) int {
		resp, _ := c.do("POST", "/console/keys/"+id, f, mod)
		return resp.StatusCode
	}
	form := func(csrf string) url.Values {
		return url.Values{"csrf": {csrf}, "label": {"after"}, "daily_usd_cap": {"30"}, "allowed_endpoints": {"charges.create"}}
	}
	for _, tc := range []struct {
		name string
		form url.Values
		mod  func(*http.Request)
	}{
		{"NoToken", form(""), nil},
		{"WrongToken", form(strings.Repeat("0", 64)), nil},
		{"OtherOrigin", form(csrf), func(r *http.Request) { r.Header.Set("Origin", "http://evil.example") }},
		{"NoOrigin", form(csrf), func(r *http.Request) { r.Header.Del("Origin") }},
		{"OtherReferer", form(csrf), func(r *http.Request) { r.Header.Del("Origin"); r.Header.Set("Referer", "http://evil.example/x") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code := edit(tc.form, tc.mod); code != http.StatusForbidden {
				t.Fatalf("status %d, want 403", code)
			}
		})
	}
	t.Run("RevokeNeedsToken", func(t *testing.T) {
		if resp, _ := c.do("POST", "/console/keys/"+id+"/revoke", url.Values{"confirm": {id}}, nil); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("revoke without CSRF: %d", resp.StatusCode)
		}
	})
	t.Run("NothingChanged", func(t *testing.T) {
		_, body := c.do("GET", "/console/keys/"+id, nil, nil)
		if !strings.Contains(body, ">before <") || strings.Contains(body, "revoked") {
			t.Fatal("a refused request changed the key")
		}
	})
	t.Run("OK", func(t *testing.T) {
		if code := edit(form(csrf), nil); code != http.StatusSeeOther {
			t.Fatalf("status %d, want 303", code)
		}
		_, body := c.do("GET", "/console/keys/"+id, nil, nil)
		if !strings.Contains(body, ">after <") || !strings.Contains(body, "$30.00") {
			t.Fatal("the edit did not apply")
		}
	})
	t.Run("ValidationNextToField", func(t *testing.T) {
		f := form(csrf)
		f.Set("daily_usd_cap", "12.3456789")
		resp, body := c.do("POST", "/console/keys/"+id, f, nil)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `id="e-daily_usd_cap"`) || !strings.Contains(body, "more than 6 decimal places") {
			t.Fatalf("status %d; want the admin API's message by the daily cap", resp.StatusCode)
		}
	})
}

func TestHeaders(t *testing.T) {
	s := MustConsole(t, nil)
	id, _ := kbtest.VaultKey(t, s.URL(), `{"label":"h"}`)
	c := newClient(t, s.URL())
	check := func(t *testing.T, p string, resp *http.Response) {
		t.Helper()
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("%s: Content-Security-Policy %q", p, csp)
		}
		if resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: framing or sniffing headers missing", p)
		}
	}
	for _, p := range []string{"/console/signin", "/console/", "/console/static/app.js"} {
		resp, _ := c.do("GET", p, nil, nil)
		check(t, p, resp)
	}
	c.signIn()
	for _, p := range append(consolePaths[:5], "/console/keys/"+id, "/console/nope") {
		resp, body := c.do("GET", p, nil, nil)
		check(t, p, resp)
		if strings.Contains(body, "<script>") || regexp.MustCompile(`\son[a-z]+=`).MatchString(body) {
			t.Errorf("%s has an inline script or handler", p)
		}
		if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
			t.Errorf("%s: Cache-Control %q", p, cc)
		}
	}
}

func TestHostileLabelEscaped(t *testing.T) {
	s := MustConsole(t, nil)
	id, _ := kbtest.VaultKey(t, s.URL(), `{"label":"<script>alert(1)</script><img src=x onerror=alert(2)>"}`)
	c := newClient(t, s.URL())
	c.signIn()
	for _, p := range []string{"/console/keys", "/console/keys/" + id, "/console/events"} {
		_, body := c.do("GET", p, nil, nil)
		if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") {
			t.Fatalf("%s renders the label as HTML", p)
		}
	}
}

// TestShutdownEndsStreams: a graceful shutdown does not wait for a browser
// that keeps a live feed open.
func TestShutdownEndsStreams(t *testing.T) {
	s := MustConsole(t, nil)
	c := newClient(t, s.URL())
	c.signIn()
	req, _ := http.NewRequest("GET", s.URL()+"/console/stream", nil)
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the open stream")
	}
}
