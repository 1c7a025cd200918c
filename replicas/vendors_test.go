package replicas_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	resendgo "github.com/resend/resend-go/v3"
	twiliogo "github.com/twilio/twilio-go"
	twclient "github.com/twilio/twilio-go/client"
	api "github.com/twilio/twilio-go/rest/api/v2010"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/internal/simfault"
	"github.com/keybrake/keybrake/resend"
	"github.com/keybrake/keybrake/resendsim"
	"github.com/keybrake/keybrake/twilio"
	"github.com/keybrake/keybrake/twiliosim"
)

// vendorCluster is four in-process replicas on one PostgreSQL schema, each
// proxying /twilio and /resend to the same twiliosim and resendsim.
type vendorCluster struct {
	replicas []*Replica
	twilio   *twiliosim.Server
	resend   *resendsim.Server
}

// vendorRates prices a US SMS segment at $0.02: twiliosim bills less.
const vendorRates = "US sms=0.0200 voice=0.1000"

func mustVendorCluster(tb testing.TB) *vendorCluster {
	tb.Helper()
	dsn := MustDatabase(tb, MustServerDSN(tb))
	c := &vendorCluster{twilio: twiliosim.New(twiliosim.Options{}), resend: resendsim.New(resendsim.Options{})}
	tws, rss, sim := httptest.NewServer(c.twilio), httptest.NewServer(c.resend), MustSim(tb)
	tb.Cleanup(tws.Close)
	tb.Cleanup(rss.Close)
	rates, err := twilio.ParseRates(vendorRates)
	if err != nil {
		tb.Fatal(err)
	}
	tu, _ := url.Parse(tws.URL)
	ru, _ := url.Parse(rss.URL)
	su, _ := url.Parse(sim.URL)
	for range 4 {
		store := MustStore(tb, dsn)
		s := khttp.NewServer()
		s.Addr, s.Store, s.Upstream, s.UpstreamKey, s.AdminToken = "127.0.0.1:0", store, su, upstreamKey, adminToken
		s.Logger = slog.New(slog.DiscardHandler)
		s.Twilio = &khttp.TwilioConfig{Upstream: tu, AccountSid: twiliosim.DefaultAccountSid, Secret: twiliosim.DefaultAuthToken, Rates: rates}
		s.Resend = &khttp.ResendConfig{Upstream: ru, APIKey: resendsim.DefaultAPIKey, Pricer: resend.Pricer{PerEmail: 1000}}
		if err := s.Open(); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { s.Close() })
		c.replicas = append(c.replicas, &Replica{Server: s, Store: store})
	}
	return c
}

// toKeybrake sends every request twilio-go makes to keybrake's /twilio,
// as docs/vendors.md tells users to.
type toKeybrake struct{ base *url.URL }

func (t toKeybrake) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.URL.Scheme, r.URL.Host = t.base.Scheme, t.base.Host
	r.URL.Path = t.base.Path + r.URL.Path
	r.URL.RawPath, r.Host = "", ""
	return http.DefaultTransport.RoundTrip(r)
}

// twilioClient is twilio-go pointed at replica base with the vault key.
func twilioClient(tb testing.TB, base, secret string) *twiliogo.RestClient {
	tb.Helper()
	u, _ := url.Parse(base + "/twilio")
	c := &twclient.Client{
		Credentials: twclient.NewCredentials(twiliosim.DefaultAccountSid, twilio.AlnumVaultKey(secret)),
		HTTPClient:  &http.Client{Transport: toKeybrake{u}, Timeout: 2 * time.Minute},
	}
	c.SetAccountSid(twiliosim.DefaultAccountSid)
	return twiliogo.NewRestClientWithParams(twiliogo.ClientParams{Client: c})
}

// sendAll sends n SMS at once, the i-th through replica i%4, and counts
// the sent and the refused (429/20429); anything else fails the test.
func (c *vendorCluster) sendAll(t *testing.T, secret string, n int) (sent, refused int) {
	t.Helper()
	var clients []*twiliogo.RestClient
	for _, r := range c.replicas {
		clients = append(clients, twilioClient(t, r.URL(), secret))
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = clients[i%len(clients)].Api.CreateMessage((&api.CreateMessageParams{}).
				SetTo(fmt.Sprintf("+1415555%04d", i)).SetFrom("+14155550100").SetBody("Your code is 123456"))
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		var te *twclient.TwilioRestError
		switch {
		case err == nil:
			sent++
		case errors.As(err, &te) && te.Status == 429 && te.Code == twilio.CodeTooManyRequests:
			refused++
		default:
			t.Fatalf("send %d: %v", i, err)
		}
	}
	return sent, refused
}

// settlePrices waits until twiliosim has priced every message, then runs
// each replica's resolver so that every held message settles at its price.
func (c *vendorCluster) settlePrices(t *testing.T) {
	t.Helper()
	Eventually(t, "twiliosim priced every message", func() bool { return c.twilio.Billed().Pending == 0 })
	for _, r := range c.replicas {
		if _, err := r.Resolve(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// countsUsed returns what the key used of each count kind today.
func countsUsed(t *testing.T, s keybrake.Store, keyID string) map[string]int64 {
	t.Helper()
	used, err := s.(keybrake.CountService).CountsUsed(context.Background(), keyID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for kind, u := range used {
		out[kind] = u.Day
	}
	return out
}

// TestVendorsFourReplicasTwilioCaps sends 200 SMS at once with twilio-go,
// spread over four replicas on one database: a daily message cap and a
// daily USD cap each let through exactly what fits, twiliosim sent exactly
// that, and once Twilio prices the messages every replica reads a spend
// equal to twiliosim's bill.
func TestVendorsFourReplicasTwilioCaps(t *testing.T) {
	for name, tt := range map[string]struct {
		key  string
		want int
	}{
		"CountCap": {`{"vendor":"twilio","daily_message_cap":73}`, 73},
		"USDCap":   {`{"vendor":"twilio","daily_usd_cap":"1.30"}`, 65}, // 65 × $0.02
	} {
		t.Run(name, func(t *testing.T) {
			c := mustVendorCluster(t)
			keyID, secret := MustCreateKey(t, c.replicas[0].URL(), tt.key)
			sent, refused := c.sendAll(t, secret, 200)
			if sent != tt.want || refused != 200-tt.want {
				t.Fatalf("sent %d, refused %d; want %d and %d", sent, refused, tt.want, 200-tt.want)
			}
			if n := c.twilio.Billed().Messages; n != tt.want {
				t.Fatalf("twiliosim sent %d messages, want %d", n, tt.want)
			}
			if used := countsUsed(t, c.replicas[1].Store, keyID); used[keybrake.CountMessages] != int64(tt.want) {
				t.Fatalf("messages counted = %v, want %d", used, tt.want)
			}
			c.settlePrices(t)
			billed := c.twilio.Billed().Micros
			for i, r := range c.replicas {
				if sp := MustSpend(t, r.Store, keyID); sp.Day != billed || sp.Held != 0 || sp.Uncertain != 0 {
					t.Fatalf("replica %d: spend %+v, twiliosim billed %s", i, sp, billed)
				}
			}
			if open := MustOpenReservations(t, c.replicas[0].Store); len(open) != 0 {
				t.Fatalf("%d reservations left open", len(open))
			}
		})
	}
}

// TestVendorsFourReplicasResendBatch sends 40 batches of 3 emails at once
// with resend-go over four replicas under a daily cap of 50 emails: 16
// batches go whole, every other one is refused whole, never a part.
func TestVendorsFourReplicasResendBatch(t *testing.T) {
	c := mustVendorCluster(t)
	keyID, secret := MustCreateKey(t, c.replicas[0].URL(), `{"vendor":"resend","daily_email_cap":50}`)
	var clients []*resendgo.Client
	for _, r := range c.replicas {
		rc := resendgo.NewCustomClient(&http.Client{Timeout: 2 * time.Minute}, secret)
		rc.BaseURL, _ = url.Parse(r.URL() + "/resend/")
		clients = append(clients, rc)
	}
	const n = 40
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var batch []*resendgo.SendEmailRequest
			for j := range 3 {
				batch = append(batch, &resendgo.SendEmailRequest{From: "billing@example.com", To: []string{fmt.Sprintf("u%d_%d@example.org", i, j)}, Subject: "Invoice", Text: "hi"})
			}
			_, errs[i] = clients[i%len(clients)].Batch.Send(batch)
		}()
	}
	close(start)
	wg.Wait()
	ok := 0
	for i, err := range errs {
		var rl *resendgo.RateLimitError
		switch {
		case err == nil:
			ok++
		case errors.As(err, &rl):
		default:
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	if ok != 16 {
		t.Fatalf("%d batches sent, want 16", ok)
	}
	if got := len(c.resend.GroundTruth().Emails); got != 48 {
		t.Fatalf("resendsim sent %d emails, want 48 (16 whole batches)", got)
	}
	if used := countsUsed(t, c.replicas[2].Store, keyID); used[keybrake.CountEmails] != 48 {
		t.Fatalf("emails counted = %v, want 48", used)
	}
	if sp := MustSpend(t, c.replicas[3].Store, keyID); sp.Day != 48*1000 {
		t.Fatalf("spend = %+v, want 48 × $0.001", sp)
	}
}

// TestVendorsSIGKILLLostTwilioAnswer kills a real `keybrake serve` after
// twiliosim created its message and before it could settle (blocked on the
// reservation's row lock): the reservation is left reserved, with no sid,
// and Twilio has no idempotency to replay it. Replica B's resolver finds
// the message by To, From, body and time, and settles it at Twilio's
// price: spend equals twiliosim's bill, nothing left open.
func TestVendorsSIGKILLLostTwilioAnswer(t *testing.T) {
	dsn := MustDatabase(t, MustServerDSN(t))
	bin := MustBuild(t)
	tw := twiliosim.New(twiliosim.Options{})
	tws := httptest.NewServer(tw)
	defer tws.Close()
	serve := func(name string) *Proc {
		return MustStart(t, name, bin, []string{
			"KEYBRAKE_ADMIN_TOKEN=" + adminToken,
			"TWILIO_ACCOUNT_SID=" + twiliosim.DefaultAccountSid, "TWILIO_AUTH_TOKEN=" + twiliosim.DefaultAuthToken,
		}, "serve", "--addr", "127.0.0.1:0", "--twilio-upstream", tws.URL, "--twilio-rates", writeRates(t),
			"--db", withParam(poolDSN(dsn), "application_name", name),
			"--upstream-timeout", "3s", "--twilio-lookup-skew", "1s",
			"--resolve-interval", "100ms", "--stale-after", "4s", "--log-level", "info")
	}
	ctx := context.Background()
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	store := MustStore(t, dsn)

	a := serve("replica_a")
	keyID, secret := MustCreateKey(t, a.URL, `{"vendor":"twilio","daily_usd_cap":"1"}`)
	send := func(to string) {
		do("POST", a.URL+"/twilio/2010-04-01/Accounts/"+twiliosim.DefaultAccountSid+"/Messages.json",
			url.Values{"To": {to}, "From": {"+14155550100"}, "Body": {"Your code is 123456"}}.Encode(),
			map[string]string{"Authorization": twilio.BasicAuth(twiliosim.DefaultAccountSid, secret), "Content-Type": "application/x-www-form-urlencoded"})
	}

	// 1: held at twiliosim, then the test locks the reservation and lets
	// twiliosim create the message and answer; A blocks inside Settle.
	release, fired := make(chan struct{}), make(chan string, 4)
	if _, err := tw.AddFault(simfault.Fault{Method: "POST", Path: "*", Mode: simfault.Latency, Wait: release, Fired: fired, Count: 1}); err != nil {
		t.Fatal(err)
	}
	go send("+14155550123")
	<-fired
	var rsvID string
	if err := db.QueryRow(ctx, `SELECT id FROM reservations WHERE key_id = $1`, keyID).Scan(&rsvID); err != nil {
		t.Fatal(err)
	}
	lockConn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer lockConn.Close(ctx)
	lockTx, err := lockConn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var one int
	if err := lockTx.QueryRow(ctx, `SELECT 1 FROM reservations WHERE id = $1 FOR UPDATE`, rsvID).Scan(&one); err != nil {
		t.Fatal(err)
	}
	close(release)
	Eventually(t, "twiliosim created the message", func() bool { return len(tw.GroundTruth().Messages) == 1 })
	Eventually(t, "replica_a blocked inside Settle", func() bool {
		var n int
		db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'replica_a' AND wait_event_type = 'Lock'`).Scan(&n)
		return n > 0
	})
	a.Kill(t)
	if _, err := db.Exec(ctx, `SELECT pg_terminate_backend(pid, 60000) FROM pg_stat_activity WHERE application_name = 'replica_a'`); err != nil {
		t.Fatal(err)
	}
	lockTx.Rollback(ctx)
	if r, err := store.FindReservationByID(ctx, rsvID); err != nil || r.State != keybrake.StateReserved || r.ObjectID != "" {
		t.Fatalf("after the kill: %+v, %v; want reserved without a sid", r, err)
	}

	// B recovers it by the lookup alone.
	b := serve("replica_b")
	Eventually(t, "replica_b settled the lost message", func() bool {
		r, err := store.FindReservationByID(ctx, rsvID)
		return err == nil && r.State == keybrake.StateSettled
	})
	r, _ := store.FindReservationByID(ctx, rsvID)
	if truth := tw.GroundTruth().Messages; r.ObjectID != truth[0].Sid {
		t.Fatalf("settled against %q, twiliosim made %q", r.ObjectID, truth[0].Sid)
	}
	if sp, billed := MustSpend(t, store, keyID), tw.Billed(); sp.Day != billed.Micros || sp.Uncertain != 0 || sp.Held != 0 {
		t.Fatalf("spend %+v, twiliosim billed %+v", sp, billed)
	}
	b.Kill(t)
}

// writeRates writes vendorRates to a file for --twilio-rates.
func writeRates(t *testing.T) string {
	t.Helper()
	p := t.TempDir() + "/rates"
	if err := os.WriteFile(p, []byte(vendorRates), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
