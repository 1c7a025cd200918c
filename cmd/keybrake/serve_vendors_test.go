package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	main "github.com/keybrake/keybrake/cmd/keybrake"
)

// Each vendor route says whether its own upstream is a simulator: a real
// Stripe secret does not make the Twilio simulator look real.
func TestServe_VendorUpstreamMarked(t *testing.T) {
	m, _ := MustServe(t, map[string]string{"STRIPE_SECRET_KEY": "sk_test_notused"})
	for path, want := range map[string]string{
		"/twilio/2010-04-01/Accounts/AC00000000000000000000000000000001/Messages.json": "simulator",
		"/resend/emails":       "simulator",
		"/stripe/v1/customers": "",
	} {
		resp, err := http.Get(m.HTTP.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Keybrake-Upstream"); got != want {
			t.Errorf("%s: Keybrake-Upstream = %q, want %q", path, got, want)
		}
	}
}

// The real credentials go only where the operator points them, and never
// in clear text across a network.
func TestServe_VendorUpstreamValidated(t *testing.T) {
	creds := map[string]string{"TWILIO_ACCOUNT_SID": "AC0123456789abcdef0123456789abcdef", "TWILIO_AUTH_TOKEN": "tok", "RESEND_API_KEY": "re_real"}
	for name, tt := range map[string]struct {
		args []string
		ok   bool
	}{
		"OKHTTPS":             {[]string{"--twilio-upstream", "https://api.twilio.com", "--resend-upstream", "https://api.resend.com"}, true},
		"OKLoopbackSimulator": {[]string{"--twilio-upstream", "http://127.0.0.1:9", "--resend-upstream", "http://localhost:9"}, true},
		"ErrTwilioPlainHTTP":  {[]string{"--twilio-upstream", "http://api.twilio.example"}, false},
		"ErrResendPlainHTTP":  {[]string{"--resend-upstream", "http://10.0.0.5"}, false},
		"ErrResendScheme":     {[]string{"--resend-upstream", "ftp://api.resend.com"}, false},
		"ErrUserinfo":         {[]string{"--twilio-upstream", "https://x@api.twilio.com"}, false},
		"ErrQuery":            {[]string{"--resend-upstream", "https://api.resend.com?to=evil"}, false},
	} {
		t.Run(name, func(t *testing.T) {
			env, _ := testEnv(creds)
			m := main.NewServeMain(env)
			args := append([]string{"--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "k.db")}, tt.args...)
			if err := m.ParseFlags(args); err != nil {
				t.Fatal(err)
			}
			err := m.Run(context.Background())
			if err == nil {
				m.Close()
			}
			if (err == nil) != tt.ok || (err != nil && !strings.Contains(err.Error(), "upstream")) {
				t.Fatalf("Run = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

// TestAttackResend_DefaultRatePerRecipient: Resend bills every to, cc and
// bcc address as one email, but serve's default rates reserved $0.001 per
// email and nothing per recipient: one send to 50 addresses reserved
// $0.001 and moved $0.05 of quota, past a $0.01 cap.
func TestAttackResend_DefaultRatePerRecipient(t *testing.T) {
	m, _ := MustServe(t, map[string]string{})
	base := m.HTTP.URL()
	do := func(auth, method, path, body string) (int, []byte) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+auth)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	status, body := do(m.HTTP.AdminToken, "POST", "/vault/keys", `{"vendor":"resend","daily_usd_cap":"0.01"}`)
	var key struct {
		VaultKey string `json:"vault_key"`
	}
	if json.Unmarshal(body, &key); status != 201 || key.VaultKey == "" {
		t.Fatalf("create: %d %s", status, body)
	}
	var to []string
	for i := range 50 {
		to = append(to, fmt.Sprintf(`"r%d@example.com"`, i))
	}
	status, body = do(key.VaultKey, "POST", "/resend/emails", `{"from":"billing@example.com","to":[`+strings.Join(to, ",")+`],"subject":"s","text":"t"}`)
	if status != 429 {
		t.Fatalf("50 recipients under a $0.01 cap at Resend's default rate: %d %s", status, body)
	}
}
