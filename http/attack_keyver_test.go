package http_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"sync"
	"testing"

	api "github.com/twilio/twilio-go/rest/api/v2010"

	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/twilio"
	"github.com/keybrake/keybrake/twiliosim"
)

// TestAttackKeyVer_NarrowedWhileDecidingSQLite: PostgreSQL refuses a
// reservation decided on a key an operator changed meanwhile (Key.Version,
// ReserveResult.Stale; replicas/TestAttackKeyVer_NarrowedWhileDeciding),
// but SQLite kept no key versions: a Twilio create that read the key, then
// read the account's own numbers upstream, reserved and was sent From a
// number the operator had just taken out of the key's allowed_from. SQLite
// keys now carry a version (migration 0033), which its reserve compares in
// the writer's transaction; the proxy decides again on the narrowed key.
func TestAttackKeyVer_NarrowedWhileDecidingSQLite(t *testing.T) {
	const from = "+14155550100"
	// The first read of the account's numbers waits until the test has
	// narrowed the key: the create has been decided on the key it read.
	reading, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e := mustOpenVendorsSim(t, twiliosim.Options{Numbers: []string{from}}, func(s *khttp.Server) {
		up := httputil.NewSingleHostReverseProxy(s.Twilio.Upstream)
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.Contains(r.URL.Path, "/IncomingPhoneNumbers") {
				once.Do(func() { close(reading); <-release })
			}
			up.ServeHTTP(w, r)
		}))
		t.Cleanup(ts.Close)
		s.Twilio.Upstream = mustURL(t, ts.URL)
	})
	keyID, secret := e.CreateKey(t, `{"vendor":"twilio","daily_usd_cap":"5","allowed_endpoints":["messages.create"]}`)
	done := make(chan error, 1)
	go func() {
		_, err := e.TwilioClient(t, secret).Api.CreateMessage((&api.CreateMessageParams{}).SetTo("+14155550123").SetFrom(from).SetBody("hello"))
		done <- err
	}()
	<-reading
	resp, out := e.Admin(t, "PATCH", "/vault/keys/"+keyID, `{"twilio_scope":{"allowed_from":["+14155550199"]}}`)
	close(release)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("narrowing the key: %d %s", resp.StatusCode, out)
	}
	twilioErr(t, <-done, 403, twilio.CodeForbidden)
	if n := len(e.Twilio.GroundTruth().Messages); n != 0 {
		t.Fatalf("Twilio sent %d messages From a number the key no longer allows", n)
	}
	if sp := e.Spend(t, keyID); sp.Day != 0 {
		t.Fatalf("the refused create left %d micros reserved", sp.Day)
	}
}
