package http_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	stripego "github.com/stripe/stripe-go/v82"

	khttp "github.com/keybrake/keybrake/http"
)

// A vault key allowed to read payment intents received the client_secret
// of intents made outside keybrake: a browser with the publishable key
// confirms such an intent without keybrake, so money moved that no cap of
// the key counted. keybrake now nulls the secret of every confirmable
// intent the key does not hold, however the answer carries it (retrieve,
// list, search, expand[]), and keeps the secret of intents the key made
// (held in full) and of intents no browser can confirm any more.
func TestAttackRedteam_ForeignIntentSecret(t *testing.T) {
	up := &intentLists{}
	e := MustOpen(t, up.option(t))
	_, secret := e.CreateKey(t, `{"total_usd_cap":100,"allowed_endpoints":["*"]}`)
	ctx := t.Context()
	direct, sc := e.Direct(), e.Stripe(secret)

	foreign, err := direct.V1PaymentIntents.Create(ctx, &stripego.PaymentIntentCreateParams{Amount: stripego.Int64(5000), Currency: stripego.String("usd")})
	if err != nil || foreign.Status != stripego.PaymentIntentStatusRequiresPaymentMethod || foreign.ClientSecret == "" {
		t.Fatalf("foreign intent: %v %+v", err, foreign)
	}
	// A declined attempt leaves the intent confirmable, with a charge.
	declined, err := direct.V1PaymentIntents.Create(ctx, &stripego.PaymentIntentCreateParams{Amount: stripego.Int64(3000), Currency: stripego.String("usd")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.V1PaymentIntents.Confirm(ctx, declined.ID, &stripego.PaymentIntentConfirmParams{PaymentMethod: stripego.String("pm_card_chargeDeclined")}); err == nil {
		t.Fatal("a declined card confirmed")
	}
	declined, err = direct.V1PaymentIntents.Retrieve(ctx, declined.ID, nil)
	if err != nil || declined.Status != stripego.PaymentIntentStatusRequiresPaymentMethod || declined.LatestCharge == nil {
		t.Fatalf("declined intent: %v %+v", err, declined)
	}
	succeeded, err := direct.V1PaymentIntents.Create(ctx, &stripego.PaymentIntentCreateParams{Amount: stripego.Int64(2000), Currency: stripego.String("usd"),
		PaymentMethod: stripego.String("pm_card_visa"), Confirm: stripego.Bool(true)})
	if err != nil || succeeded.Status != stripego.PaymentIntentStatusSucceeded {
		t.Fatalf("succeeded intent: %v %+v", err, succeeded)
	}
	own, err := sc.V1PaymentIntents.Create(ctx, &stripego.PaymentIntentCreateParams{Amount: stripego.Int64(1000), Currency: stripego.String("usd")})
	if err != nil || own.ClientSecret == "" {
		t.Fatalf("the key's own intent lost its secret when created: %v %+v", err, own)
	}
	up.add(foreign.ID, declined.ID, succeeded.ID, own.ID)
	want := map[string]string{foreign.ID: "", declined.ID: "", succeeded.ID: succeeded.ClientSecret, own.ID: own.ClientSecret}
	leaks := []string{foreign.ClientSecret, declined.ClientSecret}

	t.Run("Retrieve", func(t *testing.T) {
		for id, cs := range want {
			pi, err := sc.V1PaymentIntents.Retrieve(ctx, id, nil)
			if err != nil || pi.ClientSecret != cs {
				t.Fatalf("retrieve %s: %v, client_secret %q, want %q", id, err, pi.ClientSecret, cs)
			}
		}
		for _, id := range []string{foreign.ID, declined.ID} {
			resp, body := e.Do(t, "GET", "/v1/payment_intents/"+id, "", map[string]string{"Authorization": "Bearer " + secret})
			m := mustJSON(t, body)
			if v, ok := m["client_secret"]; resp.StatusCode != 200 || !ok || v != nil {
				t.Fatalf("raw retrieve %s: %d client_secret=%v (present %v)", id, resp.StatusCode, v, ok)
			}
			if resp.ContentLength != int64(len(body)) {
				t.Fatalf("Content-Length %d for %d bytes", resp.ContentLength, len(body))
			}
		}
	})
	t.Run("List", func(t *testing.T) {
		got := map[string]string{}
		for pi, err := range sc.V1PaymentIntents.List(ctx, &stripego.PaymentIntentListParams{}) {
			if err != nil {
				t.Fatal(err)
			}
			got[pi.ID] = pi.ClientSecret
		}
		wantSecrets(t, got, want)
	})
	t.Run("Search", func(t *testing.T) {
		got := map[string]string{}
		for pi, err := range sc.V1PaymentIntents.Search(ctx, &stripego.PaymentIntentSearchParams{SearchParams: stripego.SearchParams{Query: "status:'requires_payment_method'"}}) {
			if err != nil {
				t.Fatal(err)
			}
			got[pi.ID] = pi.ClientSecret
		}
		wantSecrets(t, got, want)
	})
	t.Run("ChargeExpandsIntent", func(t *testing.T) {
		p := &stripego.ChargeRetrieveParams{}
		p.AddExpand("payment_intent")
		ch, err := sc.V1Charges.Retrieve(ctx, declined.LatestCharge.ID, p)
		if err != nil || ch.PaymentIntent == nil || ch.PaymentIntent.ID != declined.ID || ch.PaymentIntent.Status != stripego.PaymentIntentStatusRequiresPaymentMethod {
			t.Fatalf("charge with its intent expanded: %v %+v", err, ch)
		}
		if ch.PaymentIntent.ClientSecret != "" {
			t.Fatalf("a foreign intent's secret came back in an expanded charge")
		}
	})
	t.Run("AnotherKeysIntent", func(t *testing.T) {
		// Held by the first key, counted under its caps; another key could
		// confirm it past its own.
		_, other := e.CreateKey(t, `{"total_usd_cap":100,"allowed_endpoints":["*"]}`)
		pi, err := e.Stripe(other).V1PaymentIntents.Retrieve(ctx, own.ID, nil)
		if err != nil || pi.ClientSecret != "" {
			t.Fatalf("another key read the intent's secret: %v %q", err, pi.ClientSecret)
		}
	})
	t.Run("UnreadableAnswerRefused", func(t *testing.T) {
		up.truncate(true)
		defer up.truncate(false)
		resp, body := e.Do(t, "GET", "/v1/payment_intents/"+foreign.ID, "", map[string]string{"Authorization": "Bearer " + secret})
		if resp.StatusCode != http.StatusBadGateway || bytes.Contains(body, []byte(foreign.ClientSecret)) {
			t.Fatalf("a cut answer with a foreign secret: %d %s", resp.StatusCode, body)
		}
		if typ, _ := mustJSON(t, body)["error"].(map[string]any)["type"].(string); typ != "api_error" {
			t.Fatalf("refusal not Stripe-shaped: %s", body)
		}
		// A cut answer with no intent's secret is passed as it is.
		resp, body = e.Do(t, "GET", "/v1/charges/"+declined.LatestCharge.ID, "", map[string]string{"Authorization": "Bearer " + secret})
		if resp.StatusCode != 200 || json.Valid(body) {
			t.Fatalf("a cut answer without a secret: %d %s", resp.StatusCode, body)
		}
	})
	t.Run("TooLargeAnswerRefused", func(t *testing.T) {
		// Read whole to be checked, an answer above the proxy's limit was
		// cut there; it is refused instead.
		resp, body := e.Do(t, "GET", "/v1/customers/cus_huge", "", map[string]string{"Authorization": "Bearer " + secret})
		if resp.StatusCode != http.StatusBadGateway || len(body) > 4096 {
			t.Fatalf("a 9 MiB answer: %d, %d bytes", resp.StatusCode, len(body))
		}
	})
	t.Run("RawAnswersCarryNoForeignSecret", func(t *testing.T) {
		for _, path := range []string{"/v1/payment_intents", "/v1/payment_intents/search?query=status%3A%27requires_payment_method%27",
			"/v1/payment_intents/" + foreign.ID, "/v1/charges/" + declined.LatestCharge.ID + "?expand[]=payment_intent"} {
			resp, body := e.Do(t, "GET", path, "", map[string]string{"Authorization": "Bearer " + secret})
			if resp.StatusCode != 200 {
				t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
			}
			for _, leak := range leaks {
				if bytes.Contains(body, []byte(leak)) {
					t.Fatalf("GET %s passed a foreign intent's client_secret", path)
				}
			}
		}
	})
}

// An answer with no payment intent secret in it is passed byte for byte:
// the check is a scan, and nothing is parsed or re-encoded.
func TestAttackRedteam_ForeignIntentSecretLeavesOtherAnswers(t *testing.T) {
	e := MustOpen(t)
	_, secret := e.CreateKey(t, `{"total_usd_cap":100,"allowed_endpoints":["*"]}`)
	direct := e.Direct()
	cus, err := direct.V1Customers.Create(t.Context(), &stripego.CustomerCreateParams{Email: stripego.String("a<b>&c@example.com"), Description: stripego.String("client_secret")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.V1Charges.Create(t.Context(), &stripego.ChargeCreateParams{Amount: stripego.Int64(500), Currency: stripego.String("usd"),
		Source: &stripego.PaymentSourceSourceParams{Token: stripego.String("tok_visa")}}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/customers/" + cus.ID, "/v1/charges"} {
		_, via := e.Do(t, "GET", path, "", map[string]string{"Authorization": "Bearer " + secret})
		_, upstream := doDirect(t, e, path)
		if !bytes.Equal(via, upstream) {
			t.Fatalf("GET %s changed on the way:\n%s\nupstream:\n%s", path, via, upstream)
		}
	}
}

func wantSecrets(tb testing.TB, got, want map[string]string) {
	tb.Helper()
	for id, cs := range want {
		if s, ok := got[id]; !ok || s != cs {
			tb.Errorf("%s: client_secret %q (listed %v), want %q", id, s, ok, cs)
		}
	}
}

func mustJSON(tb testing.TB, b []byte) map[string]any {
	tb.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		tb.Fatalf("%v: %s", err, b)
	}
	return m
}

// doDirect sends GET path to the simulator with the real secret.
func doDirect(tb testing.TB, e *Env, path string) (*http.Response, []byte) {
	tb.Helper()
	req, _ := http.NewRequest("GET", e.SimURL+path, nil)
	req.Header.Set("Authorization", "Bearer sk_test_upstream_secret_do_not_leak")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp, b
}

// intentLists stands in front of the simulator as keybrake's upstream and
// answers what the simulator lacks, in Stripe's shapes and from the
// simulator's own answers: the payment intent list and search (the intents
// added), and a charge with expand[]=payment_intent. Everything else goes
// to the simulator.
type intentLists struct {
	mu  sync.Mutex
	ids []string
	cut bool // cut retrieve answers in half
	sim *url.URL
}

func (l *intentLists) truncate(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = on
}

func (l *intentLists) add(ids ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ids = append(l.ids, ids...)
}

func (l *intentLists) option(tb testing.TB) Option {
	return func(s *khttp.Server) {
		l.sim = s.Upstream
		srv := httptest.NewServer(l)
		tb.Cleanup(srv.Close)
		s.Upstream = mustURL(tb, srv.URL)
	}
}

func (l *intentLists) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	cut := l.cut
	l.mu.Unlock()
	switch {
	case r.URL.Path == "/v1/customers/cus_huge":
		w.Header().Set("Content-Type", "application/json")
		writeJSON(w, map[string]any{"object": "customer", "id": "cus_huge", "description": strings.Repeat("x", 9<<20)})
	case cut && r.Method == "GET" && (strings.HasPrefix(r.URL.Path, "/v1/payment_intents/pi_") || strings.HasPrefix(r.URL.Path, "/v1/charges/ch_")):
		b, _ := json.Marshal(l.get(r, r.URL.Path))
		w.Header().Set("Content-Type", "application/json")
		w.Write(b[:len(b)-len(b)/4])
	case r.Method == "GET" && (r.URL.Path == "/v1/payment_intents" || r.URL.Path == "/v1/payment_intents/search"):
		l.mu.Lock()
		ids := append([]string(nil), l.ids...)
		l.mu.Unlock()
		data := []any{}
		for _, id := range ids {
			data = append(data, l.get(r, "/v1/payment_intents/"+id))
		}
		kind := "list"
		if strings.HasSuffix(r.URL.Path, "/search") {
			kind = "search_result"
		}
		writeJSON(w, map[string]any{"object": kind, "data": data, "has_more": false, "url": r.URL.Path})
	case r.Method == "GET" && strings.HasPrefix(r.URL.Path, "/v1/charges/ch_") && expands(r.URL.Query(), "payment_intent"):
		ch := l.get(r, r.URL.Path)
		if id, ok := ch["payment_intent"].(string); ok {
			ch["payment_intent"] = l.get(r, "/v1/payment_intents/"+id)
		}
		writeJSON(w, ch)
	default:
		httputil.NewSingleHostReverseProxy(l.sim).ServeHTTP(w, r)
	}
}

// get retrieves path from the simulator with r's credentials.
func (l *intentLists) get(r *http.Request, path string) map[string]any {
	req, _ := http.NewRequest("GET", l.sim.String()+path, nil)
	req.Header.Set("Authorization", r.Header.Get("Authorization"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return map[string]any{"error": err.Error()}
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return map[string]any{"error": err.Error()}
	}
	return m
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// expands reports whether q asks to expand field, as expand[]= or as
// stripe-go's expand[0]=.
func expands(q url.Values, field string) bool {
	for k, vs := range q {
		if strings.HasPrefix(k, "expand[") && len(vs) == 1 && vs[0] == field {
			return true
		}
	}
	return false
}
