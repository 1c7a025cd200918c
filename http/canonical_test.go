package http_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/stripesim"
)

// Upstream records every request keybrake sends upstream (forwarded
// requests, lookups and resolver replays alike).
type Upstream struct {
	base http.RoundTripper
	mu   sync.Mutex
	reqs []*http.Request
}

// RoundTrip records req and sends it on.
func (u *Upstream) RoundTrip(req *http.Request) (*http.Response, error) {
	u.mu.Lock()
	u.reqs = append(u.reqs, req.Clone(context.Background()))
	u.mu.Unlock()
	return u.base.RoundTrip(req)
}

// Count is how many requests went upstream.
func (u *Upstream) Count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.reqs)
}

// Last is the last request sent upstream.
func (u *Upstream) Last(tb testing.TB) *http.Request {
	tb.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.reqs) == 0 {
		tb.Fatal("nothing went upstream")
	}
	return u.reqs[len(u.reqs)-1]
}

// MustOpenRecorded starts an Env whose upstream requests are recorded.
func MustOpenRecorded(tb testing.TB) (*Env, *Upstream) {
	tb.Helper()
	u := &Upstream{base: http.DefaultTransport.(*http.Transport).Clone()}
	e := MustOpen(tb, func(s *khttp.Server) { s.Transport = u })
	return e, u
}

// Header is one header line, sent with its name exactly as written.
type Header [2]string

// DoRaw sends a request whose header lines are sent as written: names keep
// their case and repeated names stay repeated.
func (e *Env) DoRaw(tb testing.TB, method, path, body string, lines ...Header) (*http.Response, []byte) {
	tb.Helper()
	return doURL(tb, method, e.Server.URL()+path, body, lines...)
}

// doURL sends a request to any URL with the header lines as written.
func doURL(tb testing.TB, method, u, body string, lines ...Header) (*http.Response, []byte) {
	tb.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	if body == "" {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	for _, l := range lines {
		req.Header[l[0]] = append(req.Header[l[0]], l[1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp, out
}

// DoWire writes raw bytes on a fresh connection and reads one response, for
// what Go's client refuses to send.
func (e *Env) DoWire(tb testing.TB, raw string) (*http.Response, []byte) {
	tb.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.Server.URL(), "http://"))
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, raw); err != nil {
		tb.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, out
}

// MustRefuse asserts a Stripe-shaped invalid_request_error with status,
// naming param if given, and that nothing went upstream since before.
func MustRefuse(tb testing.TB, u *Upstream, before int, resp *http.Response, body []byte, status int, param string) {
	tb.Helper()
	if resp.StatusCode != status {
		tb.Fatalf("status %d, want %d: %s", resp.StatusCode, status, body)
	}
	var v struct {
		Error struct{ Type, Message, Param string }
	}
	if err := json.Unmarshal(body, &v); err != nil || v.Error.Type != "invalid_request_error" || v.Error.Message == "" {
		tb.Fatalf("not a Stripe error: %s", body)
	}
	if param != "" && v.Error.Param != param {
		tb.Fatalf("param %q, want %q: %s", v.Error.Param, param, body)
	}
	if n := u.Count(); n != before {
		tb.Fatalf("%d requests went upstream", n-before)
	}
}

const charge = "amount=100&currency=usd&source=tok_visa"

// Headers that select the account or change how Stripe reads the body are
// taken once, with one value, or the request is refused before anything
// is forwarded.
func TestProxy_CanonicalHeaders(t *testing.T) {
	e, u := MustOpenRecorded(t)
	_, secret := e.CreateKey(t, `{"daily_usd_cap":100}`)
	auth := Header{"Authorization", "Bearer " + secret}
	form := Header{"Content-Type", "application/x-www-form-urlencoded"}
	for _, tc := range []struct {
		name   string
		method string
		body   string
		lines  []Header
		param  string
	}{
		{"ErrAccountRepeated", "POST", charge, []Header{form, {"Stripe-Account", "acct_1"}, {"Stripe-Account", "acct_2"}}, "Stripe-Account"},
		{"ErrAccountCaseVariants", "POST", charge, []Header{form, {"Stripe-Account", "acct_1"}, {"stripe-account", "acct_2"}}, "Stripe-Account"},
		{"ErrAccountUpperCase", "POST", charge, []Header{form, {"stripe-account", "acct_1"}, {"STRIPE-ACCOUNT", "acct_2"}}, "Stripe-Account"},
		{"ErrAccountCommaJoined", "POST", charge, []Header{form, {"Stripe-Account", "acct_1, acct_2"}}, "Stripe-Account"},
		{"ErrAccountEmpty", "POST", charge, []Header{form, {"Stripe-Account", ""}}, "Stripe-Account"},
		{"ErrAccountBlank", "POST", charge, []Header{form, {"Stripe-Account", " \t "}}, "Stripe-Account"},
		{"ErrAccountSpaceInside", "POST", charge, []Header{form, {"Stripe-Account", "acct_1 acct_2"}}, "Stripe-Account"},
		{"ErrAccountTabInside", "POST", charge, []Header{form, {"Stripe-Account", "acct_1\tacct_2"}}, "Stripe-Account"},
		{"ErrAccountNested", "POST", charge, []Header{form, {"Stripe-Account", "acct_1/acct_2"}}, "Stripe-Account"},
		{"ErrAccountNotAnAccount", "POST", charge, []Header{form, {"Stripe-Account", "cus_1"}}, "Stripe-Account"},
		{"ErrContextNested", "POST", charge, []Header{form, {"Stripe-Context", "acct_1/acct_2"}}, "Stripe-Context"},
		{"ErrContextSpaceInside", "POST", charge, []Header{form, {"Stripe-Context", "acct_1 /acct_2"}}, "Stripe-Context"},
		{"ErrContextOtherShape", "POST", charge, []Header{form, {"Stripe-Context", "wksp_1"}}, "Stripe-Context"},
		{"ErrContextConflict", "POST", charge, []Header{form, {"Stripe-Account", "acct_1"}, {"Stripe-Context", "acct_2"}}, "Stripe-Context"},
		{"ErrContextRepeated", "POST", charge, []Header{form, {"Stripe-Context", "acct_1"}, {"Stripe-Context", "acct_1"}}, "Stripe-Context"},
		{"ErrIdempotencyKeyRepeated", "POST", charge, []Header{form, {"Idempotency-Key", "a"}, {"Idempotency-Key", "b"}}, "Idempotency-Key"},
		{"ErrIdempotencyKeyComma", "POST", charge, []Header{form, {"Idempotency-Key", "a,b"}}, "Idempotency-Key"},
		{"ErrIdempotencyKeyQuote", "POST", charge, []Header{form, {"Idempotency-Key", "a' OR metadata['x']:'y"}}, "Idempotency-Key"},
		{"ErrVersionRepeated", "POST", charge, []Header{form, {"Stripe-Version", "2025-03-31.basil"}, {"Stripe-Version", "2020-08-27"}}, "Stripe-Version"},
		{"ErrVersionCommaJoined", "POST", charge, []Header{form, {"Stripe-Version", "2025-03-31.basil,2020-08-27"}}, "Stripe-Version"},
		{"ErrContentTypeRepeated", "POST", charge, []Header{form, form}, "Content-Type"},
		{"ErrContentTypeSuffix", "POST", charge, []Header{{"Content-Type", "application/x-www-form-urlencodedfoo"}}, "Content-Type"},
		{"ErrContentTypeJSON", "POST", `{"amount":100}`, []Header{{"Content-Type", "application/json"}}, "Content-Type"},
		{"ErrContentTypeOtherCharset", "POST", charge, []Header{{"Content-Type", "application/x-www-form-urlencoded; charset=iso-8859-1"}}, "Content-Type"},
		{"ErrContentTypeOtherParam", "POST", charge, []Header{{"Content-Type", "application/x-www-form-urlencoded; boundary=x"}}, "Content-Type"},
		{"ErrContentTypeDupParam", "POST", charge, []Header{{"Content-Type", "application/x-www-form-urlencoded; charset=utf-8; charset=latin1"}}, "Content-Type"},
		{"ErrContentEncodingGzip", "POST", "\x1f\x8b\x08\x00", []Header{form, {"Content-Encoding", "gzip"}}, "Content-Encoding"},
		{"ErrContentEncodingRepeated", "POST", charge, []Header{form, {"Content-Encoding", "identity"}, {"Content-Encoding", "gzip"}}, "Content-Encoding"},
		{"ErrGetBody", "GET", "customer=cus_other", nil, ""},
		{"ErrDeleteBody", "DELETE", "x=1", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := "/stripe/v1/charges"
			if tc.method == "DELETE" {
				path = "/stripe/v1/customers/cus_1"
			}
			before := u.Count()
			resp, body := e.DoRaw(t, tc.method, path, tc.body, append([]Header{auth}, tc.lines...)...)
			MustRefuse(t, u, before, resp, body, 400, tc.param)
		})
	}
	t.Run("ErrGetChunkedBody", func(t *testing.T) {
		before := u.Count()
		req, _ := http.NewRequest("GET", e.Server.URL()+"/stripe/v1/charges", io.MultiReader(strings.NewReader("limit=1")))
		req.Header.Set("Authorization", "Bearer "+secret)
		req.ContentLength = -1
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		MustRefuse(t, u, before, resp, body, 400, "")
	})
	t.Run("ErrPostQuery", func(t *testing.T) {
		before := u.Count()
		resp, body := e.DoRaw(t, "POST", "/stripe/v1/charges?destination=acct_2", charge, auth, form)
		MustRefuse(t, u, before, resp, body, 400, "")
	})
	for _, tc := range []struct{ name, ct string }{
		{"OKCharsetUTF8", "application/x-www-form-urlencoded; charset=utf-8"},
		{"OKCharsetUpperCase", "Application/X-WWW-Form-Urlencoded;charset=UTF-8"},
		{"OKNoContentType", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := []Header{auth}
			if tc.ct != "" {
				lines = append(lines, Header{"Content-Type", tc.ct})
			}
			resp, body := e.DoRaw(t, "POST", "/stripe/v1/charges", charge, lines...)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if ct := u.Last(t).Header.Values("Content-Type"); len(ct) != 1 || ct[0] != "application/x-www-form-urlencoded" {
				t.Fatalf("upstream Content-Type %q", ct)
			}
		})
	}
}

// What only a hand-written request can send: Go's server refuses transfer
// codings other than chunked, spaces in header names and conflicting
// lengths itself; obs-fold it accepts (joined with a space), and the
// account id check refuses. Nothing reaches the upstream.
func TestProxy_CanonicalWire(t *testing.T) {
	e, u := MustOpenRecorded(t)
	_, secret := e.CreateKey(t, `{"daily_usd_cap":100,"allowed_accounts":["acct_1"]}`)
	length := fmt.Sprintf("Content-Length: %d\r\n", len(charge))
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(charge), charge)
	for _, tc := range []struct {
		name    string
		headers string
		body    string
		status  int
		want    string
	}{
		// Go's server accepts obs-fold and joins the lines with a space;
		// keybrake's account id check refuses the result.
		{"ErrObsFold", "Stripe-Account: acct_1\r\n acct_2\r\n" + length, charge, 400, `"param": "Stripe-Account"`},
		{"ErrObsFoldTab", "Stripe-Account: acct_1\r\n\tacct_2\r\n" + length, charge, 400, `"param": "Stripe-Account"`},
		{"ErrObsFoldContext", "Stripe-Context: acct_1\r\n /acct_2\r\n" + length, charge, 400, `"param": "Stripe-Context"`},
		{"ErrTransferEncodingGzip", "Stripe-Account: acct_1\r\nTransfer-Encoding: gzip, chunked\r\n", chunked, 501, "Unsupported transfer encoding"},
		{"ErrTransferEncodingIdentity", "Stripe-Account: acct_1\r\nTransfer-Encoding: identity\r\n" + length, charge, 501, "Unsupported transfer encoding"},
		{"ErrTransferEncodingRepeated", "Stripe-Account: acct_1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", chunked, 501, "Unsupported transfer encoding"},
		{"ErrSpaceBeforeColon", "Stripe-Account : acct_2\r\nStripe-Account: acct_1\r\n" + length, charge, 400, "invalid header name"},
		{"ErrContentLengthRepeated", "Stripe-Account: acct_1\r\n" + length + "Content-Length: 1\r\n", charge, 400, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := u.Count()
			raw := "POST /stripe/v1/charges HTTP/1.1\r\nHost: keybrake\r\nConnection: close\r\nAuthorization: Bearer " + secret +
				"\r\nContent-Type: application/x-www-form-urlencoded\r\n" + tc.headers + "\r\n" + tc.body
			resp, body := e.DoWire(t, raw)
			if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.want) {
				t.Fatalf("status %d, want %d with %q: %s", resp.StatusCode, tc.status, tc.want, body)
			}
			if n := u.Count(); n != before {
				t.Fatalf("%d requests went upstream", n-before)
			}
		})
	}
	t.Run("OKChunked", func(t *testing.T) {
		raw := "POST /stripe/v1/charges HTTP/1.1\r\nHost: keybrake\r\nConnection: close\r\nAuthorization: Bearer " + secret +
			"\r\nContent-Type: application/x-www-form-urlencoded\r\nStripe-Account: acct_1\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
		resp, body := e.DoWire(t, raw)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		if te := u.Last(t).TransferEncoding; len(te) != 0 {
			t.Fatalf("upstream Transfer-Encoding %q", te)
		}
	})
}

// Stripe-Context selects the account like Stripe-Account does: the
// account scope, the fingerprint and the upstream request all see the one
// effective account, sent upstream as exactly one Stripe-Account.
func TestProxy_StripeContext(t *testing.T) {
	e, u := MustOpenRecorded(t)
	_, secret := e.CreateKey(t, `{"daily_usd_cap":100,"allowed_accounts":["acct_1"]}`)
	auth := Header{"Authorization", "Bearer " + secret}
	form := Header{"Content-Type", "application/x-www-form-urlencoded"}
	t.Run("ErrOutOfScope", func(t *testing.T) {
		// Before, Stripe-Context passed through unseen: the key's account
		// scope checked the platform (or acct_1) and Stripe acted on acct_2.
		for _, lines := range [][]Header{
			{{"Stripe-Context", "acct_2"}},
			{{"stripe-context", "acct_2"}},
		} {
			before := u.Count()
			resp, body := e.DoRaw(t, "POST", "/stripe/v1/charges", charge, append([]Header{auth, form}, lines...)...)
			if resp.StatusCode != 403 || !strings.Contains(string(body), "acct_2") {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if u.Count() != before {
				t.Fatal("an out-of-scope request went upstream")
			}
		}
	})
	for _, tc := range []struct {
		name  string
		lines []Header
	}{
		{"OKContextAlone", []Header{{"Stripe-Context", "acct_1"}}},
		{"OKContextPadded", []Header{{"Stripe-Context", "  acct_1\t"}}},
		{"OKContextEqualsAccount", []Header{{"Stripe-Account", "acct_1"}, {"Stripe-Context", "acct_1"}}},
		{"OKAccountOnly", []Header{{"STRIPE-ACCOUNT", "acct_1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.Sim.GroundTruth().Charges)
			resp, body := e.DoRaw(t, "POST", "/stripe/v1/charges", charge, append([]Header{auth, form}, tc.lines...)...)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			up := u.Last(t).Header
			if got := up.Values("Stripe-Account"); len(got) != 1 || got[0] != "acct_1" {
				t.Fatalf("upstream Stripe-Account %q", got)
			}
			if _, ok := up["Stripe-Context"]; ok {
				t.Fatalf("upstream got Stripe-Context %q", up.Values("Stripe-Context"))
			}
			gt := e.Sim.GroundTruth().Charges
			if len(gt) != before+1 || gt[len(gt)-1].Account != "acct_1" {
				t.Fatalf("charge not made on acct_1: %+v", gt[len(gt)-1])
			}
		})
	}
}

// Only the headers keybrake parsed or knows to be inert reach Stripe.
func TestProxy_UpstreamHeaders(t *testing.T) {
	e, u := MustOpenRecorded(t)
	_, secret := e.CreateKey(t, `{"daily_usd_cap":100}`)
	resp, body := e.DoRaw(t, "POST", "/stripe/v1/charges", charge,
		Header{"Authorization", "Bearer " + secret},
		Header{"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"},
		Header{"Idempotency-Key", "order-1"},
		Header{"Stripe-Version", "2025-03-31.basil"},
		Header{"User-Agent", "Stripe/v1 GoBindings/82.0.0"},
		Header{"X-Stripe-Client-User-Agent", `{"lang":"go"}`},
		Header{"Accept-Language", "fr"},
		Header{"Stripe_Account", "acct_2"},
		Header{"X-Stripe-Account", "acct_2"},
		Header{"X-Http-Method-Override", "DELETE"},
		Header{"Stripe-Livemode", "true"},
		Header{"Cookie", "session=1"},
		Header{"Accept-Encoding", "gzip"},
		Header{"X-Forwarded-For", "10.0.0.1"},
		Header{"Content-Encoding", "identity"},
	)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	got := map[string][]string{}
	for k, v := range u.Last(t).Header {
		got[k] = v
	}
	if !strings.HasPrefix(strings.Join(got["Authorization"], ""), "Bearer sk_test_") {
		t.Fatalf("upstream Authorization %q", got["Authorization"])
	}
	delete(got, "Authorization")
	want := map[string][]string{
		"Content-Type":               {"application/x-www-form-urlencoded"},
		"Content-Length":             {fmt.Sprint(len(charge) + len("&metadata%5Bkeybrake_idempotency_key%5D=order-1"))},
		"Idempotency-Key":            {"order-1"},
		"Stripe-Version":             {"2025-03-31.basil"},
		"User-Agent":                 {"Stripe/v1 GoBindings/82.0.0"},
		"X-Stripe-Client-User-Agent": {`{"lang":"go"}`},
		"Accept-Language":            {"fr"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("upstream headers\n got %v\nwant %v", got, want)
	}
	if gt := e.Sim.GroundTruth().Charges; gt[len(gt)-1].Account != "" {
		t.Fatalf("charge made on %q", gt[len(gt)-1].Account)
	}
}

// Bodies and queries another form parser could read differently from
// keybrake's are refused; encodings Stripe decodes alike are accepted.
func TestProxy_CanonicalForm(t *testing.T) {
	e, u := MustOpenRecorded(t)
	_, secret := e.CreateKey(t, `{"daily_usd_cap":100,"allowed_customers":["cus_ok"]}`)
	auth := Header{"Authorization", "Bearer " + secret}
	form := Header{"Content-Type", "application/x-www-form-urlencoded"}
	for name, body := range map[string]string{
		"ErrSemicolon":        "amount=100&currency=usd&customer=cus_ok;customer=cus_evil",
		"ErrSpaceAfterAmp":    "amount=100&currency=usd&customer=cus_ok& destination=acct_2",
		"ErrEncodedSpaceName": "amount=100&currency=usd&customer=cus_ok&%20destination=acct_2",
		"ErrPlusName":         "amount=100&currency=usd&customer=cus_ok&+destination=acct_2",
		"ErrTabName":          "amount=100&currency=usd&customer=cus_ok&destination%09=acct_2",
		"ErrEncodedDuplicate": "amount=100&currency=usd&customer=cus_ok&customer%3Dcus_evil&cust%6Fmer=cus_evil",
	} {
		t.Run(name, func(t *testing.T) {
			before := u.Count()
			resp, out := e.DoRaw(t, "POST", "/stripe/v1/charges", body, auth, form)
			MustRefuse(t, u, before, resp, out, 400, "")
		})
	}
	t.Run("ErrQuerySemicolon", func(t *testing.T) {
		before := u.Count()
		resp, out := e.DoRaw(t, "GET", "/stripe/v1/charges?customer=cus_ok;customer=cus_evil", "", auth)
		MustRefuse(t, u, before, resp, out, 400, "")
	})
	t.Run("OKQueryForwardedAsParsed", func(t *testing.T) {
		resp, out := e.DoRaw(t, "GET", "/stripe/v1/charges?customer=cus_ok&limit=3", "", auth)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, out)
		}
		if q := u.Last(t).URL.RawQuery; q != "customer=cus_ok&limit=3" {
			t.Fatalf("upstream query %q", q)
		}
	})
}

// An idempotent retry is the same request whatever the order or encoding
// of its parameters, and another request when its account or API version
// differs.
func TestProxy_FingerprintCanonical(t *testing.T) {
	e, u := MustOpenRecorded(t)
	id, secret := e.CreateKey(t, `{"daily_usd_cap":100}`)
	auth := Header{"Authorization", "Bearer " + secret}
	form := Header{"Content-Type", "application/x-www-form-urlencoded"}
	post := func(t *testing.T, key, body string, lines ...Header) (*http.Response, []byte) {
		t.Helper()
		return e.DoRaw(t, "POST", "/stripe/v1/charges", body, append([]Header{auth, form, {"Idempotency-Key", key}}, lines...)...)
	}
	first := "amount=700&currency=usd&source=tok_visa&metadata[order]=a+b&description=x%20y"
	for name, retry := range map[string]string{
		"OKReordered":     "source=tok_visa&description=x%20y&metadata[order]=a+b&currency=usd&amount=700",
		"OKEncodedName":   "amount=700&currency=usd&source=tok_visa&metadata%5Border%5D=a+b&description=x%20y",
		"OKPlusForPct20":  "amount=700&currency=usd&source=tok_visa&metadata[order]=a%20b&description=x+y",
		"OKEncodedLetter": "%61mount=700&currency=usd&source=tok_visa&metadata[order]=a+b&description=x%20y",
	} {
		t.Run(name, func(t *testing.T) {
			key := "fp-" + name
			if resp, out := post(t, key, first); resp.StatusCode != 200 {
				t.Fatalf("first: %d %s", resp.StatusCode, out)
			}
			before := len(e.Sim.GroundTruth().Charges)
			resp, out := post(t, key, retry)
			if resp.StatusCode != 200 || resp.Header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("retry: %d replayed=%q %s", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), out)
			}
			if n := len(e.Sim.GroundTruth().Charges); n != before {
				t.Fatalf("the retry made %d charges", n-before)
			}
		})
	}
	if got := e.Spend(t, id).Day; got != 4*7*keybrake.MicrosPerUSD {
		t.Fatalf("spend %s, want each charge counted once", got)
	}
	for _, tc := range []struct {
		name         string
		first, retry []Header
	}{
		{"ErrOtherAccount", []Header{{"Stripe-Account", "acct_1"}}, []Header{{"Stripe-Account", "acct_2"}}},
		{"ErrContextIsAnAccount", nil, []Header{{"Stripe-Context", "acct_2"}}},
		{"ErrOtherVersion", []Header{{"Stripe-Version", "2025-03-31.basil"}}, []Header{{"Stripe-Version", "2020-08-27"}}},
		{"ErrListOrder", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "fp-" + tc.name
			body, retry := first, first
			if tc.name == "ErrListOrder" {
				body, retry = first+"&expand[]=customer&expand[]=balance_transaction", first+"&expand[]=balance_transaction&expand[]=customer"
			}
			if resp, out := post(t, key, body, tc.first...); resp.StatusCode != 200 {
				t.Fatalf("first: %d %s", resp.StatusCode, out)
			}
			before := u.Count()
			resp, out := post(t, key, retry, tc.retry...)
			MustRefuse(t, u, before, resp, out, 400, "Idempotency-Key")
		})
	}
}

// keybrake's metadata tag, which the resolver searches by, can be neither
// overridden, unset nor crowded out by the client's metadata.
func TestProxy_MetadataTag(t *testing.T) {
	e, u := MustOpenRecorded(t)
	_, secret := e.CreateKey(t, `{"daily_usd_cap":100}`)
	h := []Header{{"Authorization", "Bearer " + secret}, {"Content-Type", "application/x-www-form-urlencoded"}, {"Idempotency-Key", "tag-1"}}
	var many, fortyNine strings.Builder
	for i := range 50 {
		fmt.Fprintf(&many, "&metadata[k%d]=v", i)
		if i < 49 {
			fmt.Fprintf(&fortyNine, "&metadata[k%d]=v", i)
		}
	}
	for _, tc := range []struct{ name, body, param string }{
		{"ErrOverride", charge + "&metadata[keybrake_idempotency_key]=other", "metadata[keybrake_idempotency_key]"},
		{"ErrOverrideEncodedName", charge + "&metadata%5Bkeybrake_idempotency_key%5D=other", "metadata[keybrake_idempotency_key]"},
		{"ErrOverridePlusValue", charge + "&metadata[keybrake_idempotency_key]=tag+1", "metadata[keybrake_idempotency_key]"},
		{"ErrUnsetTag", charge + "&metadata[keybrake_idempotency_key]=", "metadata[keybrake_idempotency_key]"},
		{"ErrTagAsMap", charge + "&metadata[keybrake_idempotency_key][x]=tag-1", "metadata[keybrake_idempotency_key]"},
		{"ErrUnsetAll", charge + "&metadata=", "metadata"},
		{"ErrMetadataList", charge + "&metadata[]=x", "metadata"},
		{"ErrFiftyKeys", charge + many.String(), "metadata"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := u.Count()
			resp, out := e.DoRaw(t, "POST", "/stripe/v1/charges", tc.body, h...)
			MustRefuse(t, u, before, resp, out, 400, tc.param)
		})
	}
	for _, tc := range []struct{ name, key, body string }{
		{"OKSameTag", "tag-2", charge + "&metadata[keybrake_idempotency_key]=tag-2"},
		{"OKFortyNineKeys", "tag-3", charge + fortyNine.String()},
		{"OKFortyNineAndTag", "tag-4", charge + fortyNine.String() + "&metadata[keybrake_idempotency_key]=tag-4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, out := e.DoRaw(t, "POST", "/stripe/v1/charges", tc.body, h[0], h[1], Header{"Idempotency-Key", tc.key})
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, out)
			}
			gt := e.Sim.GroundTruth().Charges
			if md := gt[len(gt)-1].Metadata; md["keybrake_idempotency_key"] != tc.key {
				t.Fatalf("metadata %v", md)
			}
		})
	}
}

// A revoked or expired key is refused with 401 and the refusal is audited
// on it; an unknown key has no key to audit on and is only counted.
func TestProxy_UnauthorizedAudited(t *testing.T) {
	e, u := MustOpenRecorded(t)
	revokedID, revoked := e.CreateKey(t, `{"daily_usd_cap":10}`)
	if resp, out := e.Admin(t, "POST", "/vault/keys/"+revokedID+"/revoke", ""); resp.StatusCode != 200 {
		t.Fatalf("revoke: %d %s", resp.StatusCode, out)
	}
	expiredID, expired := e.CreateKey(t, `{"daily_usd_cap":10,"expires_at":"2026-11-29T13:00:00Z"}`)
	e.Clock.Advance(2 * 60 * 60 * 1e9)
	for _, tc := range []struct{ name, id, secret, reason string }{
		{"ErrRevoked", revokedID, revoked, "revoked"},
		{"ErrExpired", expiredID, expired, "expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := u.Count()
			resp, out := e.DoRaw(t, "POST", "/stripe/v1/charges", charge, Header{"Authorization", "Bearer " + tc.secret})
			MustRefuse(t, u, before, resp, out, 401, "")
			e.Server.FlushAudit()
			events, _, err := e.Store.FindEvents(context.Background(), keybrake.EventFilter{KeyID: tc.id, Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if len(events) != 1 || events[0].Decision != keybrake.DecisionDeny || events[0].Reason != tc.reason || events[0].Path != "/stripe/v1/charges" {
				t.Fatalf("events %+v", events)
			}
		})
	}
	t.Run("ErrUnknownCounted", func(t *testing.T) {
		before := u.Count()
		resp, out := e.DoRaw(t, "POST", "/stripe/v1/charges", charge, Header{"Authorization", "Bearer vault_key_doesnotexist000000000000000000"})
		MustRefuse(t, u, before, resp, out, 401, "")
		mresp, err := e.Metrics()
		if err != nil {
			t.Fatal(err)
		}
		m, _ := io.ReadAll(mresp.Body)
		mresp.Body.Close()
		// Two audited (revoked, expired) and one unknown: all counted.
		if !strings.Contains(string(m), `keybrake_requests_total{decision="unauthorized",operation="unknown"} 3`) {
			t.Fatalf("metrics lack the unauthorized count:\n%s", grepLines(string(m), "keybrake_requests_total"))
		}
	})
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The effective account of a Stripe-Context request is the one the price
// lookups and the resolver's replay use: the intent is found on acct_1, and
// a charge whose answer was lost is replayed on acct_1 and counted once.
func TestProxy_StripeContextDownstream(t *testing.T) {
	e, u := MustOpenRecorded(t)
	id, secret := e.CreateKey(t, `{"daily_usd_cap":100,"allowed_accounts":["acct_1"]}`)
	h := []Header{{"Authorization", "Bearer " + secret}, {"Content-Type", "application/x-www-form-urlencoded"}, {"Stripe-Context", "acct_1"}}
	t.Run("OKLookupOnContextAccount", func(t *testing.T) {
		// An intent keybrake holds nothing on (made outside keybrake) is
		// priced by looking it up, on the effective account.
		params := &stripego.PaymentIntentCreateParams{Amount: stripego.Int64(1200), Currency: stripego.String("usd"), PaymentMethod: stripego.String("pm_card_visa")}
		params.SetStripeAccount("acct_1")
		pi, err := e.Direct().V1PaymentIntents.Create(context.Background(), params)
		if err != nil {
			t.Fatal(err)
		}
		before := u.Count()
		resp, out := e.DoRaw(t, "POST", "/stripe/v1/payment_intents/"+pi.ID+"/confirm", "", h...)
		if resp.StatusCode != 200 {
			t.Fatalf("confirm: %d %s", resp.StatusCode, out)
		}
		u.mu.Lock()
		lookup := u.reqs[before]
		u.mu.Unlock()
		if lookup.Method != "GET" || lookup.Header.Get("Stripe-Account") != "acct_1" {
			t.Fatalf("lookup %s %s on %q", lookup.Method, lookup.URL.Path, lookup.Header.Get("Stripe-Account"))
		}
		if got := e.Spend(t, id).Day; got != 12*keybrake.MicrosPerUSD {
			t.Fatalf("spend %s, want 12.00", got)
		}
	})
	t.Run("OKReplayOnContextAccount", func(t *testing.T) {
		if _, err := e.Sim.AddFault(stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultFailAfter, Count: 1}); err != nil {
			t.Fatal(err)
		}
		resp, out := e.DoRaw(t, "POST", "/stripe/v1/charges", "amount=300&currency=usd&source=tok_visa", h...)
		if resp.StatusCode != 500 {
			t.Fatalf("status %d: %s", resp.StatusCode, out)
		}
		before := u.Count()
		e.MustResolve(t)
		if replay := u.Last(t); u.Count() == before || replay.Header.Get("Stripe-Account") != "acct_1" || replay.Header.Get("Stripe-Context") != "" {
			t.Fatalf("replay on %q", replay.Header)
		}
		var n int
		for _, c := range e.Sim.GroundTruth().Charges {
			if c.Amount == 300 && c.Account == "acct_1" {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d charges of 300 on acct_1, want 1", n)
		}
		if got := e.Spend(t, id).Day; got != 15*keybrake.MicrosPerUSD {
			t.Fatalf("spend %s, want 15.00", got)
		}
	})
}

// A request whose Idempotency-Key another vault key already used is
// answered by Stripe with that request's saved answer; keybrake does not
// hand it over, releases this request's reservation, and says the earlier
// request may have moved money: "nothing was charged, retry with a new
// key" (as it said) made a billing worker given a new vault key after a
// lost answer charge its customer twice.
func TestProxy_ForeignReplayMayHaveCharged(t *testing.T) {
	e, _ := MustOpenRecorded(t)
	_, first := e.CreateKey(t, `{"daily_usd_cap":100}`)
	second, secret := e.CreateKey(t, `{"daily_usd_cap":100}`)
	body := "amount=4200&currency=usd&source=tok_visa"
	post := func(secret string) (*http.Response, []byte) {
		return e.DoRaw(t, "POST", "/stripe/v1/charges", body, Header{"Authorization", "Bearer " + secret},
			Header{"Content-Type", "application/x-www-form-urlencoded"}, Header{"Idempotency-Key", "evt-42"})
	}
	if resp, out := post(first); resp.StatusCode != 200 {
		t.Fatalf("first key: %d %s", resp.StatusCode, out)
	}
	resp, out := post(secret)
	var got struct {
		Error struct{ Type, Code, Param, Message string }
	}
	if err := json.Unmarshal(out, &got); err != nil || resp.StatusCode != 400 || got.Error.Type != "idempotency_error" || got.Error.Param != "Idempotency-Key" {
		t.Fatalf("second key: %d %s", resp.StatusCode, out)
	}
	if strings.Contains(got.Error.Message, "Nothing was charged") || !strings.Contains(got.Error.Message, "may have moved money") {
		t.Fatalf("message: %s", got.Error.Message)
	}
	if n := len(e.Sim.GroundTruth().Charges); n != 1 {
		t.Fatalf("%d charges, want the first key's alone", n)
	}
	if s := e.Spend(t, second).Day; s != 0 {
		t.Fatalf("second key spent %s, want its reservation released", s)
	}
}

// A bank debit (a charge on a bank account token) is answered pending:
// money on its way, counted in full like a captured charge.
func TestProxy_BankDebitPendingCounted(t *testing.T) {
	e, _ := MustOpenRecorded(t)
	id, secret := e.CreateKey(t, `{"daily_usd_cap":100}`)
	resp, out := e.DoRaw(t, "POST", "/stripe/v1/charges", "amount=4200&currency=usd&source=btok_us_verified",
		Header{"Authorization", "Bearer " + secret}, Header{"Content-Type", "application/x-www-form-urlencoded"})
	if resp.StatusCode != 200 || !strings.Contains(string(out), `"status": "pending"`) && !strings.Contains(string(out), `"status":"pending"`) {
		t.Fatalf("bank debit: %d %s", resp.StatusCode, out)
	}
	if got := e.Spend(t, id).Day; got != 42*keybrake.MicrosPerUSD {
		t.Fatalf("spend %s, want $42.00", got)
	}
}
