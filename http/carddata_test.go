package http_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
)

// recorder keeps every request sent upstream.
type recorder struct {
	mu   sync.Mutex
	next http.RoundTripper
	seen []byte
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	r.mu.Lock()
	r.seen = append(append(append(r.seen, req.URL.String()...), '\n'), body...)
	r.mu.Unlock()
	return r.next.RoundTrip(req)
}

func (r *recorder) sent() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]byte{}, r.seen...)
}

// testPAN is the card number the card-data tests send.
const testPAN = "4000056655665556"

// holdsPAN reports whether b holds the test card number or its last eight
// digits in any spelling the tests send (plain, spaced, form- or
// percent-encoded). Eight digits, not four: ids and audit hashes are random
// hex and base62 and hold any four digits about once in a thousand events.
func holdsPAN(b []byte) bool {
	for _, s := range []string{testPAN, "55665556", "5566 5556", "5566+5556", "5566%205556"} {
		if bytes.Contains(b, []byte(s)) {
			return true
		}
	}
	return false
}

// Requests carrying raw card or bank data are refused before anything is
// stored or forwarded: the card number reaches neither the simulator, nor
// the reservations, nor the audit log, nor the database file.
func TestProxy_RefusesCardData(t *testing.T) {
	rec := &recorder{next: http.DefaultTransport}
	e := MustOpen(t, func(s *khttp.Server) { s.Transport = rec })
	id, secret := e.CreateKey(t, `{"daily_usd_cap":100}`)
	h := map[string]string{"Authorization": "Bearer " + secret}
	const pan = testPAN
	for _, tc := range []struct {
		name, method, path, body, param string
	}{
		{"ErrCardNumber", "POST", "/stripe/v1/charges", "amount=100&currency=usd&card[number]=" + pan + "&card[exp_month]=12&card[exp_year]=2030&card[cvc]=123", "card[number]"},
		{"ErrCVCOnly", "POST", "/stripe/v1/charges", "amount=100&currency=usd&source=tok_visa&card[cvc]=123", "card[cvc]"},
		{"ErrSource", "POST", "/stripe/v1/charges", "amount=100&currency=usd&source[object]=card&source[number]=" + pan, "source[number]"},
		{"ErrPaymentMethodData", "POST", "/stripe/v1/payment_intents", "amount=100&currency=usd&confirm=true&payment_method_data[type]=card&payment_method_data[card][number]=" + pan, "payment_method_data[card][number]"},
		{"ErrBankAccount", "POST", "/stripe/v1/customers/cus_1/sources", "source[object]=bank_account&source[account_number]=000123456789&source[routing_number]=110000000", "source[account_number]"},
		{"ErrPANInMetadata", "POST", "/stripe/v1/charges", "amount=100&currency=usd&source=tok_visa&metadata[note]=" + url.QueryEscape("4000 0566 5566 5556"), "metadata[note]"},
		{"ErrPANInQuery", "GET", "/stripe/v1/charges?limit=3&metadata[x]=" + pan, "", "metadata[x]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := e.Do(t, tc.method, tc.path, tc.body, h)
			var se struct {
				Error struct{ Type, Code, Param, Message string } `json:"error"`
			}
			if err := json.Unmarshal(body, &se); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 400 || se.Error.Type != "invalid_request_error" || se.Error.Param != tc.param ||
				!strings.Contains(se.Error.Message, "does not accept raw card data") || !strings.Contains(se.Error.Message, "Stripe.js") {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if holdsPAN(body) {
				t.Fatalf("the error echoes the card number: %s", body)
			}
		})
	}
	t.Run("OKToken", func(t *testing.T) {
		resp, body := e.Do(t, "POST", "/stripe/v1/charges", "amount=100&currency=usd&source=tok_visa&metadata[order]=4242424242424241", h)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	})

	if sent := rec.sent(); holdsPAN(sent) || bytes.Contains(sent, []byte("000123456789")) || bytes.Contains(sent, []byte("cvc")) {
		t.Fatalf("card data reached the upstream: %s", sent)
	}
	rs, err := e.Store.FindReservations(context.Background(), keybrake.ReservationFilter{KeyID: id})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 {
		t.Fatalf("%d reservations, want only the token charge's", len(rs))
	}
	e.Server.FlushAudit()
	_, events := e.Admin(t, "GET", "/vault/keys/"+id+"/events?limit=100", "")
	if holdsPAN(events) {
		t.Fatalf("the audit log holds the card number: %s", events)
	}
	// Whatever a reservation or an event holds, the card number is in no
	// page of the database, its WAL included.
	files, _ := filepath.Glob(filepath.Join(e.Dir, "*"))
	if len(files) == 0 {
		t.Fatal("no database files")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{pan, "000123456789"} {
			if bytes.Contains(b, []byte(s)) {
				t.Fatalf("%s holds %s", f, s)
			}
		}
	}
}
