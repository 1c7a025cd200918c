package replicas_test

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/twilio"
	"github.com/keybrake/keybrake/twiliosim"
)

// TestAttackKeyVer_ListOnStaleKey: a Twilio list is narrowed by the key's
// twilio_scope.allowed_from (twilio.Policy.CheckList), but a list is a
// read, and reads were decided on the replica's cached key. Replica B,
// whose NOTIFY was lost, went on answering a key's unfiltered
// messages.list with every message of the account (another key's one-time
// code included) after an operator had given that key allowed_from
// through A, and after A had revoked it, for up to KeyCacheMaxAge. A list
// the scope narrows now reads the key again on a store whose reports may
// be late, as a money-moving request does.
func TestAttackKeyVer_ListOnStaleKey(t *testing.T) {
	const own, other = "+14155550100", "+14155550199"
	dsn := MustDatabase(t, MustServerDSN(t))
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	deaf := newDeafProxy(t, u.Host)
	sim := MustSim(t)
	tw := twiliosim.New(twiliosim.Options{Numbers: []string{own, other}})
	tws := httptest.NewServer(tw)
	t.Cleanup(tws.Close)
	rates, err := twilio.ParseRates(vendorRates)
	if err != nil {
		t.Fatal(err)
	}
	tu, _ := url.Parse(tws.URL)
	withTwilio := func(s *Replica) {
		s.Twilio = &khttp.TwilioConfig{Upstream: tu, AccountSid: twiliosim.DefaultAccountSid, Secret: twiliosim.DefaultAuthToken, Rates: rates}
	}
	a := mustReplicaWith(t, dsn, sim, withTwilio)
	// B's clock stands still: its cached key never ages past
	// KeyCacheMaxAge, as on a replica answering within the bound.
	clock := kbtest.NewClock(time.Now())
	b := mustReplicaWith(t, viaProxy(t, dsn, deaf), sim, func(s *Replica) { withTwilio(s); s.Now = clock.Now })

	base := "/twilio/2010-04-01/Accounts/" + twiliosim.DefaultAccountSid + "/Messages.json"
	auth := func(secret string) map[string]string {
		return map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte(twiliosim.DefaultAccountSid+":"+twilio.AlnumVaultKey(secret))),
			"Content-Type": "application/x-www-form-urlencoded"}
	}
	_, sender := MustCreateKey(t, a.URL(), `{"vendor":"twilio","daily_usd_cap":"5","twilio_scope":{"allowed_from":["`+other+`"]}}`)
	if status, body := Do(t, "POST", a.URL()+base, url.Values{"To": {"+14155550123"}, "From": {other}, "Body": {"your code is 999999"}}.Encode(), auth(sender)); status != http.StatusCreated {
		t.Fatalf("another key's message: %d %s", status, body)
	}
	for _, tc := range []struct {
		name, change, body string
		want               int
	}{
		{"ScopeNarrowed", "PATCH /vault/keys/{id}", `{"twilio_scope":{"allowed_from":["` + own + `"]}}`, http.StatusForbidden},
		{"Revoked", "POST /vault/keys/{id}/revoke", "", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keyID, secret := MustCreateKey(t, a.URL(), `{"vendor":"twilio","daily_usd_cap":"5","allowed_endpoints":["messages.create","messages.list"]}`)
			if status, body := Do(t, "GET", b.URL()+base, "", auth(secret)); status != http.StatusOK {
				t.Fatalf("the list on B before the change: %d %s", status, body)
			}
			dropped := deaf.Dropped()
			method, path, _ := strings.Cut(tc.change, " ")
			if status, out := Admin(t, a.URL(), method, strings.ReplaceAll(path, "{id}", keyID), tc.body); status != http.StatusOK {
				t.Fatalf("%s on A: %d %s", tc.change, status, out)
			}
			kbtest.Eventually(t, "B's watcher to lose the change's NOTIFY", func() bool { return deaf.Dropped() > dropped })
			status, body := Do(t, "GET", b.URL()+base, "", auth(secret))
			if status != tc.want || strings.Contains(string(body), "999999") {
				t.Fatalf("after %s %s committed on A, B answered the key's unfiltered list %d %s; want keybrake's %d", tc.change, tc.body, status, body, tc.want)
			}
		})
	}
}

// TestAttackKeyVer_NarrowedWhileDeciding: the key version check caught a
// charge decided on a replica's cached key, but not one decided on a key
// read from the store (a cache miss): a request that read the key, then
// spent upstream round trips deciding (a Twilio create reads the account's
// own numbers first), reserved on the policy it had read even when an
// operator's narrowing committed in between, and forwarded a message the
// key no longer allowed. Every priced reservation now carries the version
// its request was decided on, however the key was read.
func TestAttackKeyVer_NarrowedWhileDeciding(t *testing.T) {
	const from, to = "+14155550100", "+14155550123"
	dsn := MustDatabase(t, MustServerDSN(t))
	sim := MustSim(t)
	tw := twiliosim.New(twiliosim.Options{Numbers: []string{from}})
	// The first read of the account's numbers waits until the test has
	// changed the key: the request has been decided on the key it read.
	reading, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	tws := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/IncomingPhoneNumbers") {
			once.Do(func() { close(reading); <-release })
		}
		tw.ServeHTTP(w, r)
	}))
	t.Cleanup(tws.Close)
	rates, err := twilio.ParseRates(vendorRates)
	if err != nil {
		t.Fatal(err)
	}
	tu, _ := url.Parse(tws.URL)
	a := mustReplicaWith(t, dsn, sim, func(s *Replica) {
		s.Twilio = &khttp.TwilioConfig{Upstream: tu, AccountSid: twiliosim.DefaultAccountSid, Secret: twiliosim.DefaultAuthToken, Rates: rates}
	})
	keyID, secret := MustCreateKey(t, a.URL(), `{"vendor":"twilio","daily_usd_cap":"5","allowed_endpoints":["messages.create"]}`)
	type answer struct {
		status int
		body   []byte
	}
	done := make(chan answer, 1)
	go func() {
		status, body, err := do("POST", a.URL()+"/twilio/2010-04-01/Accounts/"+twiliosim.DefaultAccountSid+"/Messages.json",
			url.Values{"To": {to}, "From": {from}, "Body": {"hello"}}.Encode(),
			map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte(twiliosim.DefaultAccountSid+":"+twilio.AlnumVaultKey(secret))),
				"Content-Type": "application/x-www-form-urlencoded"})
		if err != nil {
			status, body = 0, []byte(err.Error())
		}
		done <- answer{status, body}
	}()
	<-reading
	status, out := Admin(t, a.URL(), "PATCH", "/vault/keys/"+keyID, `{"twilio_scope":{"allowed_from":["+14155550199"]}}`)
	close(release)
	if status != http.StatusOK {
		t.Fatalf("narrowing the key: %d %s", status, out)
	}
	got := <-done
	if got.status != http.StatusForbidden {
		t.Fatalf("a create decided before the key was narrowed, reserved after: %d %s; want keybrake's 403", got.status, got.body)
	}
	if n := len(tw.GroundTruth().Messages); n != 0 {
		t.Fatalf("Twilio sent %d messages From a number the key no longer allows", n)
	}
}
