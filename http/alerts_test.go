package http_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/sqlite"
)

// MustWebhook starts a receiver and registers it through the admin API as
// an endpoint for every key; it returns the receiver with its secret.
func MustWebhook(t *testing.T, e *Env, format string) *kbtest.Webhook {
	t.Helper()
	hook := kbtest.NewWebhook(t, "", e.Clock.Now)
	resp, out := e.Admin(t, "POST", "/vault/alerts/endpoints", fmt.Sprintf(`{"url":%q,"format":%q}`, hook.URL, format))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create endpoint: %d %s", resp.StatusCode, out)
	}
	var v struct {
		ID     string `json:"id"`
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal(out, &v); err != nil || !strings.HasPrefix(v.Secret, "whsec_") {
		t.Fatalf("endpoint = %s, %v", out, err)
	}
	hook.Secret = v.Secret
	return hook
}

// secondReplica opens another server on e's store, as another process
// would.
func secondReplica(t *testing.T, e *Env, store keybrake.Store) *khttp.Server {
	t.Helper()
	b := khttp.NewServer()
	b.Addr, b.Store, b.Upstream, b.UpstreamKey = "127.0.0.1:0", store, e.Server.Upstream, e.Server.UpstreamKey
	b.AdminToken, b.Now, b.Rates, b.Simulated, b.Logger = adminToken, e.Clock.Now, e.Server.Rates, true, e.Server.Logger
	if err := b.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// thresholdAlerts returns keyID's threshold alerts by percent.
func thresholdAlerts(t *testing.T, store keybrake.Store, keyID string) map[int]*keybrake.Alert {
	t.Helper()
	as, err := store.FindAlerts(context.Background(), keybrake.AlertFilter{KeyID: keyID, Kind: keybrake.AlertThreshold})
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]*keybrake.Alert{}
	for _, a := range as {
		if out[a.Percent] != nil {
			t.Fatalf("threshold %d fired twice: %s and %s", a.Percent, out[a.Percent].AlertKey, a.AlertKey)
		}
		out[a.Percent] = a
	}
	return out
}

func TestAlerts_ThresholdsAcrossReplicasFireOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		b := secondReplica(t, e, e.Server.Store)
		hook := MustWebhook(t, e, keybrake.FormatKeybrake)
		keyID, secret := e.CreateKey(t, `{"daily_usd_cap":100}`)
		replicas := []string{e.Server.URL(), b.URL()}
		var wg sync.WaitGroup
		for i := 0; i < 50; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sc := StripeClient(replicas[i%2], secret, 0)
				_, _ = sc.V1Charges.Create(context.Background(), chargeParams(250, "usd"))
			}()
		}
		wg.Wait()
		if sp := e.Spend(t, keyID); sp.Day != 100*keybrake.MicrosPerUSD {
			t.Fatalf("spent %s, want the whole $100.00 cap", sp.Day)
		}
		alerts := thresholdAlerts(t, e.Server.Store, keyID)
		if len(alerts) != 3 || alerts[50] == nil || alerts[80] == nil || alerts[100] == nil {
			t.Fatalf("threshold alerts = %v, want 50, 80 and 100 once each", alerts)
		}
		// Both replicas' senders run at once; leases keep them apart.
		for i := 0; i < 5 && len(hook.Acked()) < 3; i++ {
			var sw sync.WaitGroup
			for _, s := range []*khttp.Server{e.Server, b} {
				sw.Add(1)
				go func() {
					defer sw.Done()
					if err := s.SendAlerts(context.Background()); err != nil {
						t.Error(err)
					}
				}()
			}
			sw.Wait()
		}
		acked := hook.Acked()
		for p, a := range alerts {
			if acked[a.ID] != 1 {
				t.Fatalf("the %d%% alert was acknowledged %d times, want 1", p, acked[a.ID])
			}
		}
		if hook.BadSignatures() != 0 {
			t.Fatalf("%d bad signatures", hook.BadSignatures())
		}
	})
}

func TestAlerts_EightyPercentBeforeTheFirstRefusal(t *testing.T) {
	e := MustOpen(t)
	hook := MustWebhook(t, e, keybrake.FormatSlack)
	keyID, secret := e.CreateKey(t, `{"daily_usd_cap":10}`)
	sc := e.Stripe(secret)
	for i := 1; ; i++ {
		_, err := sc.V1Charges.Create(context.Background(), chargeParams(100, "usd"))
		if err != nil {
			StripeErr(t, err, http.StatusTooManyRequests)
			if i != 11 {
				t.Fatalf("refused at charge %d, want 11", i)
			}
			break
		}
		if err := e.Server.SendAlerts(context.Background()); err != nil {
			t.Fatal(err)
		}
		if i == 8 {
			a := thresholdAlerts(t, e.Store, keyID)[80]
			if a == nil || hook.Acked()[a.ID] != 1 {
				t.Fatalf("after $8.00 of $10.00 the 80%% alert was not delivered (%v, %v)", a, hook.Acked())
			}
			var body struct{ Text string }
			if err := json.Unmarshal(hook.Body(a.ID), &body); err != nil || !strings.Contains(body.Text, "reached 80% of its daily cap: $8.00 of $10.00") {
				t.Fatalf("slack body = %s, %v", hook.Body(a.ID), err)
			}
		}
	}
}

func TestAlerts_RestartBetweenCommitAndDelivery(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		hook := MustWebhook(t, e, keybrake.FormatKeybrake)
		keyID, secret := e.CreateKey(t, `{"total_usd_cap":20}`)
		if _, err := e.Stripe(secret).V1Charges.Create(context.Background(), chargeParams(1700, "usd")); err != nil {
			t.Fatal(err)
		}
		// The spend and its alerts are committed; the replica dies before
		// its sender ran.
		e.Server.Close()
		store := e.Server.Store
		if _, ok := store.(*sqlite.Store); ok {
			var err error
			if store, err = sqlite.Open(filepath.Join(e.Dir, "keybrake.db")); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { store.Close() })
		}
		b := secondReplica(t, e, store)
		if err := b.SendAlerts(context.Background()); err != nil {
			t.Fatal(err)
		}
		alerts := thresholdAlerts(t, store, keyID)
		acked := hook.Acked()
		if len(alerts) != 2 || acked[alerts[50].ID] != 1 || acked[alerts[80].ID] != 1 {
			t.Fatalf("after the restart: alerts %v, acknowledged %v", alerts, acked)
		}
	})
}

func TestAlertsAdmin(t *testing.T) {
	e := MustOpen(t)
	keyID, _ := e.CreateKey(t, `{"daily_usd_cap":10}`)

	t.Run("ErrUnauthorized", func(t *testing.T) {
		for _, p := range []string{"/vault/alerts", "/vault/alerts/rules", "/vault/alerts/endpoints", "/vault/alerts/deliveries"} {
			resp, _ := e.Do(t, "GET", p, "", map[string]string{"Authorization": "Bearer wrong"})
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("GET %s without the token: %d", p, resp.StatusCode)
			}
		}
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		for _, c := range []struct{ path, body, param string }{
			{"/vault/alerts/rules", `{"kind":"threshold","percent":0}`, "percent"},
			{"/vault/alerts/rules", `{"kind":"threshold","percent":"80"}`, "percent"},
			{"/vault/alerts/rules", `{"kind":"threshold","percent":80.5}`, "percent"},
			{"/vault/alerts/rules", `{"kind":"threshold","percent":80,"colour":"red"}`, "colour"},
			{"/vault/alerts/rules", `{"kind":"threshold","percent":80,"window":"weekly"}`, "window"},
			{"/vault/alerts/rules", `{"kind":"nope"}`, "kind"},
			{"/vault/alerts/rules", `{"kind":"expiring","hours":null}`, "hours"},
			{"/vault/alerts/rules", `{"kind":"threshold","percent":80,"key_id":"../x"}`, "key_id"},
			{"/vault/alerts/rules", `{"kind":"threshold","percent":80,"percent":90}`, "percent"},
			{"/vault/alerts/endpoints", `{"url":"ftp://127.0.0.1/x"}`, "url"},
			{"/vault/alerts/endpoints", `{"url":"http://user:pw@127.0.0.1/x"}`, "url"},
			{"/vault/alerts/endpoints", `{"url":"/relative"}`, "url"},
			{"/vault/alerts/endpoints", `{"url":"http://127.0.0.1/x","format":"teams"}`, "format"},
			{"/vault/alerts/endpoints", `{"url":"http://127.0.0.1/x","secret":"mine"}`, "secret"},
		} {
			resp, out := e.Admin(t, "POST", c.path, c.body)
			var v struct{ Error struct{ Param string } }
			_ = json.Unmarshal(out, &v)
			if resp.StatusCode != http.StatusBadRequest || v.Error.Param != c.param {
				t.Fatalf("POST %s %s: %d %s, want 400 naming %s", c.path, c.body, resp.StatusCode, out, c.param)
			}
		}
		resp, _ := e.Admin(t, "POST", "/vault/alerts/rules", `{"kind":"threshold","percent":80,"key_id":"vk_missing"}`)
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("rule for a missing key: %d", resp.StatusCode)
		}
	})
	t.Run("RulesOK", func(t *testing.T) {
		resp, out := e.Admin(t, "POST", "/vault/alerts/rules", fmt.Sprintf(`{"key_id":%q,"kind":"threshold","window":"daily","percent":90}`, keyID))
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("create rule: %d %s", resp.StatusCode, out)
		}
		var rule struct {
			ID      string
			Enabled bool
			Default bool
		}
		_ = json.Unmarshal(out, &rule)
		if !rule.Enabled || rule.Default {
			t.Fatalf("rule = %s", out)
		}
		if resp, out = e.Admin(t, "PATCH", "/vault/alerts/rules/"+rule.ID, `{"percent":95}`); resp.StatusCode != 200 || !strings.Contains(string(out), `"percent": 95`) {
			t.Fatalf("patch rule: %d %s", resp.StatusCode, out)
		}
		if resp, _ = e.Admin(t, "PATCH", "/vault/alerts/rules/"+rule.ID, `{"kind":"expiring"}`); resp.StatusCode != 400 {
			t.Fatalf("patching the kind: %d", resp.StatusCode)
		}
		if resp, out = e.Admin(t, "GET", "/vault/alerts/rules?key_id="+keyID, ""); !strings.Contains(string(out), rule.ID) || strings.Contains(string(out), "alr_default") {
			t.Fatalf("key's rules: %d %s", resp.StatusCode, out)
		}
		if _, out = e.Admin(t, "GET", "/vault/alerts/rules", ""); !strings.Contains(string(out), "alr_default_threshold_80") {
			t.Fatalf("all rules lack the defaults: %s", out)
		}
		if resp, _ = e.Admin(t, "DELETE", "/vault/alerts/rules/"+rule.ID, ""); resp.StatusCode != 200 {
			t.Fatalf("delete rule: %d", resp.StatusCode)
		}
		if resp, _ = e.Admin(t, "GET", "/vault/alerts/rules/"+rule.ID, ""); resp.StatusCode != 404 {
			t.Fatalf("deleted rule: %d", resp.StatusCode)
		}
	})
	t.Run("TestAlertAndDeliveryLog", func(t *testing.T) {
		hook := kbtest.NewWebhook(t, "", e.Clock.Now)
		hook.Behave = func(n int) int {
			if n == 1 {
				return http.StatusBadGateway
			}
			return http.StatusOK
		}
		_, out := e.Admin(t, "POST", "/vault/alerts/endpoints", fmt.Sprintf(`{"url":%q}`, hook.URL))
		var ep struct{ ID, Secret string }
		_ = json.Unmarshal(out, &ep)
		hook.Secret = ep.Secret
		for _, p := range []string{"/vault/alerts/endpoints", "/vault/alerts/endpoints/" + ep.ID} {
			if _, out := e.Admin(t, "GET", p, ""); strings.Contains(string(out), ep.Secret) || strings.Contains(string(out), "secret") {
				t.Fatalf("GET %s shows the secret: %s", p, out)
			}
		}
		resp, out := e.Admin(t, "POST", "/vault/alerts/endpoints/"+ep.ID+"/test", "")
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("test alert: %d %s", resp.StatusCode, out)
		}
		var test struct {
			Alert      struct{ ID string }
			Deliveries []struct {
				ID         string
				EndpointID string `json:"endpoint_id"`
			}
		}
		_ = json.Unmarshal(out, &test)
		if len(test.Deliveries) != 1 || test.Deliveries[0].EndpointID != ep.ID {
			t.Fatalf("test alert deliveries = %s", out)
		}
		for i := 0; i < 3; i++ {
			if err := e.Server.SendAlerts(context.Background()); err != nil {
				t.Fatal(err)
			}
			e.Clock.Advance(alertRetryGap)
		}
		if hook.Acked()[test.Alert.ID] != 1 {
			t.Fatalf("test alert acknowledged %d times", hook.Acked()[test.Alert.ID])
		}
		resp, out = e.Admin(t, "GET", "/vault/alerts/deliveries/"+test.Deliveries[0].ID, "")
		var d struct {
			State      string
			Attempts   int
			AttemptLog []struct {
				Status int
				Error  string
			} `json:"attempt_log"`
		}
		_ = json.Unmarshal(out, &d)
		if resp.StatusCode != 200 || d.State != "delivered" || d.Attempts != 2 || len(d.AttemptLog) != 2 || d.AttemptLog[0].Status != 502 || d.AttemptLog[0].Error != "HTTP 502" {
			t.Fatalf("delivery = %d %s", resp.StatusCode, out)
		}
		if resp, out = e.Admin(t, "GET", "/vault/alerts/deliveries?endpoint_id="+ep.ID+"&state=delivered", ""); !strings.Contains(string(out), test.Deliveries[0].ID) {
			t.Fatalf("delivery log: %d %s", resp.StatusCode, out)
		}
		if resp, _ = e.Admin(t, "GET", "/vault/alerts/deliveries?colour=red", ""); resp.StatusCode != 400 {
			t.Fatalf("unknown filter: %d", resp.StatusCode)
		}
		if resp, _ = e.Admin(t, "PATCH", "/vault/alerts/endpoints/"+ep.ID, `{"enabled":false}`); resp.StatusCode != 200 {
			t.Fatalf("disable endpoint: %d", resp.StatusCode)
		}
		if resp, _ = e.Admin(t, "POST", "/vault/alerts/endpoints/"+ep.ID+"/test", ""); resp.StatusCode != http.StatusConflict {
			t.Fatalf("testing a disabled endpoint: %d", resp.StatusCode)
		}
		if resp, _ = e.Admin(t, "DELETE", "/vault/alerts/endpoints/"+ep.ID, ""); resp.StatusCode != 200 {
			t.Fatalf("delete endpoint: %d", resp.StatusCode)
		}
	})
}

func TestAlerts_Metrics(t *testing.T) {
	e := MustOpen(t, func(s *khttp.Server) { s.KeyMetrics, s.KeyMetricsMax = true, 2 })
	MustWebhook(t, e, keybrake.FormatKeybrake)
	var ids []string
	for i := 0; i < 3; i++ {
		id, secret := e.CreateKey(t, `{"daily_usd_cap":10}`)
		ids = append(ids, id)
		if _, err := e.Stripe(secret).V1Charges.Create(context.Background(), chargeParams(600, "usd")); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Server.SendAlerts(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, out := e.Do(t, "GET", "/metrics", "", map[string]string{"Authorization": "Bearer " + adminToken})
	m := string(out)
	for _, want := range []string{
		`keybrake_alerts_fired_total{kind="threshold"} 3`,
		`keybrake_alert_deliveries_total{outcome="delivered"} 3`,
		`keybrake_key_metrics_truncated 1`,
	} {
		if !strings.Contains(m, want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}
	sort.Strings(ids)
	n := strings.Count(m, `keybrake_key_remaining_usd_micros{key_id=`)
	if n != 2 || !strings.Contains(m, `window="daily"} 4e+06`) {
		t.Fatalf("%d remaining gauges, want 2 (the bound), each $4.00:\n%s", n, m)
	}
}

// alertRetryGap is more than the first retry's backoff.
const alertRetryGap = 31 * time.Second

// TestAttackAlert_SlackMarkupFromKeyHolder: a Slack-format alert put text
// the key holder chose (the label of a child key it minted itself, a
// refusal's detail) into the message as Slack markup, so a label
// "<https://console.attacker.example/…|Approve>" showed the approver, next
// to the genuine links, a link to a look-alike console asking for the
// admin token. Slack's control characters & < > in that text are now
// escaped, as Slack's formatting reference asks.
func TestAttackAlert_SlackMarkupFromKeyHolder(t *testing.T) {
	e := MustOpen(t)
	hook := MustWebhook(t, e, keybrake.FormatSlack)
	_, parent := e.CreateKey(t, `{"label":"agent","total_usd_cap":100,"mint":true,"approval":{"above_usd":1}}`)
	status, v := mint(t, e, "/vault/keys/self/children", parent, `{"label":"<https://console.attacker.example/approve|Approve: charges.create $5.00> <!channel>","total_usd_cap":10}`)
	if status != http.StatusCreated {
		t.Fatalf("mint: %d %v", status, v)
	}
	child, _ := v["vault_key"].(string)
	resp, out := e.Do(t, "POST", "/v1/charges", "amount=500&currency=usd&source=tok_visa",
		map[string]string{"Authorization": "Bearer " + child, "Content-Type": "application/x-www-form-urlencoded", "Idempotency-Key": "ask-1"})
	if resp.StatusCode != http.StatusPaymentRequired {
		t.Fatalf("charge: %d %s", resp.StatusCode, out)
	}
	body := slackApprovalAlert(t, e, hook)
	if strings.Contains(body.Text, "<https://console.attacker") || strings.Contains(body.Text, "<!channel>") ||
		!strings.Contains(body.Text, "&lt;https://console.attacker.example/approve|Approve: charges.create $5.00&gt;") {
		t.Fatalf("the child's label is Slack markup in the alert: %s", body.Text)
	}
}

// slackApprovalAlert sends e's alerts and returns the Slack body hook got
// for its one approval alert.
func slackApprovalAlert(t *testing.T, e *Env, hook *kbtest.Webhook) (body struct{ Text string }) {
	t.Helper()
	if err := e.Server.SendAlerts(context.Background()); err != nil {
		t.Fatal(err)
	}
	as, err := e.Store.FindAlerts(context.Background(), keybrake.AlertFilter{Kind: keybrake.AlertApproval})
	if err != nil || len(as) != 1 {
		t.Fatalf("approval alerts: %v, %v", as, err)
	}
	if err := json.Unmarshal(hook.Body(as[0].ID), &body); err != nil {
		t.Fatalf("slack body %s: %v", hook.Body(as[0].ID), err)
	}
	return body
}

// TestAttackAlert_UnpricedApprovalAsZero: the approval_required alert of
// an operation keybrake does not price said "topups.create of $0.00": an
// amount keybrake never knew, read by the approver as nothing moving. It
// now says the request is not priced.
func TestAttackAlert_UnpricedApprovalAsZero(t *testing.T) {
	e := MustOpen(t)
	hook := MustWebhook(t, e, keybrake.FormatSlack)
	_, secret := e.CreateKey(t, `{"allowed_endpoints":["*"],"allow_unpriced":true,"approval":{"operations":["topups.create"]}}`)
	resp, out := e.Do(t, "POST", "/v1/topups", "amount=5000000&currency=usd",
		map[string]string{"Authorization": "Bearer " + secret, "Content-Type": "application/x-www-form-urlencoded", "Idempotency-Key": "topup-1"})
	if resp.StatusCode != http.StatusPaymentRequired {
		t.Fatalf("top-up: %d %s", resp.StatusCode, out)
	}
	body := slackApprovalAlert(t, e, hook)
	if strings.Contains(body.Text, "$0") || !strings.Contains(body.Text, "not priced") {
		t.Fatalf("the unpriced approval's alert: %s", body.Text)
	}
	// The signed link's confirmation page says so too.
	_, link, ok := strings.Cut(body.Text, "\nApprove: ")
	link, _, _ = strings.Cut(link, "\n")
	if !ok {
		t.Fatalf("no signed link in %s", body.Text)
	}
	lresp, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(lresp.Body)
	lresp.Body.Close()
	if lresp.StatusCode != http.StatusOK || strings.Contains(string(page), "($0") || !strings.Contains(string(page), "not priced") {
		t.Fatalf("the link's page: %d %s", lresp.StatusCode, page)
	}
}
