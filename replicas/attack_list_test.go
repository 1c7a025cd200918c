package replicas_test

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
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
