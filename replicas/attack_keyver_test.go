package replicas_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/postgres"
	"github.com/keybrake/keybrake/twilio"
	"github.com/keybrake/keybrake/twiliosim"
)

// keyReadCounter is a replica's PostgreSQL store that counts the key reads
// by secret (the key cache's misses and fresh reads) and the reservations
// found stale: what a request cost in key reads, and what refused it.
type keyReadCounter struct {
	*postgres.Store
	reads, stale atomic.Int64
}

func (c *keyReadCounter) FindKeyBySecretHash(ctx context.Context, hash string) (*keybrake.Key, error) {
	c.reads.Add(1)
	return c.Store.FindKeyBySecretHash(ctx, hash)
}

func (c *keyReadCounter) Reserve(ctx context.Context, args keybrake.ReserveArgs) (keybrake.ReserveResult, error) {
	res, err := c.Store.Reserve(ctx, args)
	if res.Stale {
		c.stale.Add(1)
	}
	return res, err
}

// TestAttackReplicas_NarrowedChargeCaughtByKeyVersion is
// TestAttackReplicas_NarrowedPolicyOnStaleReplica's charge with its cost
// counted. Replica B no longer reads the key again before a charge: a
// charge on the key B cached reads no key at all, and the charge B decided
// on its cached key after an operator took charges.create away through A
// (B's NOTIFY lost) is refused by the version check of the reservation
// itself (reserving nothing), then decided again on the key read fresh and
// refused, with one key read in all.
func TestAttackReplicas_NarrowedChargeCaughtByKeyVersion(t *testing.T) {
	dsn := MustDatabase(t, MustServerDSN(t))
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	deaf := newDeafProxy(t, u.Host)
	sim := MustSim(t)
	a := MustReplica(t, dsn, sim)
	clock := kbtest.NewClock(time.Now())
	var counter *keyReadCounter
	b := mustReplicaWith(t, viaProxy(t, dsn, deaf), sim, func(s *Replica) {
		s.Now = clock.Now
		counter = &keyReadCounter{Store: s.Store}
		s.Server.Store = counter
	})

	keyID, secret := MustCreateKey(t, a.URL(), `{"label":"narrowed","daily_usd_cap":1000,"allowed_endpoints":["charges.create","refunds.create"]}`)
	auth := "Bearer " + secret
	if status, body := Do(t, "GET", b.URL()+"/v1/keybrake/key", "", map[string]string{"Authorization": auth}); status != http.StatusOK {
		t.Fatalf("own key on B: %d %s", status, body)
	}
	charge := func(idem string) (int, []byte) {
		return Do(t, "POST", b.URL()+"/v1/charges", "amount=5000&currency=usd&source=tok_visa",
			map[string]string{"Authorization": auth, "Idempotency-Key": idem})
	}

	counter.reads.Store(0)
	if status, body := charge("kv-before"); status != http.StatusOK {
		t.Fatalf("charge on B before the change: %d %s", status, body)
	}
	if n := counter.reads.Load(); n != 0 {
		t.Fatalf("a charge on B's cached, unchanged key read the key %d times; want 0", n)
	}

	dropped := deaf.Dropped()
	if status, out := Admin(t, a.URL(), "PATCH", "/vault/keys/"+keyID, `{"allowed_endpoints":["refunds.create"]}`); status != http.StatusOK {
		t.Fatalf("narrowing on A: %d %s", status, out)
	}
	kbtest.Eventually(t, "B's watcher to lose the change's NOTIFY", func() bool { return deaf.Dropped() > dropped })

	counter.reads.Store(0)
	status, body := charge("kv-after")
	if status != http.StatusForbidden {
		t.Fatalf("after charges.create was taken away on A, B answered a $50.00 charge %d %s; want keybrake's 403", status, body)
	}
	if n := counter.stale.Load(); n != 1 {
		t.Fatalf("%d reservations were found stale; want 1: the version check, not a read before deciding, caught the narrowed key", n)
	}
	if n := counter.reads.Load(); n != 1 {
		t.Fatalf("the refused charge read the key %d times; want 1 (after the stale reservation)", n)
	}
	rs, err := a.Store.FindReservations(context.Background(), keybrake.ReservationFilter{KeyID: keyID})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].IdempotencyKey != "kv-before" {
		t.Fatalf("the key has %d reservations; want only the charge before the change", len(rs))
	}
}

// keyChanger is a replica's PostgreSQL store that, while on, has another
// pool (another replica's store) update the key row just before each
// reservation checked against a key version: a key that changes between
// every decision and its reservation, deterministically, with no sleep.
type keyChanger struct {
	*postgres.Store
	other          *postgres.Store
	on             atomic.Bool
	changes, stale atomic.Int64
}

func (c *keyChanger) Reserve(ctx context.Context, args keybrake.ReserveArgs) (keybrake.ReserveResult, error) {
	if c.on.Load() && args.KeyVersion != "" {
		label := fmt.Sprintf("changed-%d", c.changes.Add(1))
		if _, err := c.other.UpdateKey(ctx, args.Reservation.KeyID, keybrake.KeyUpdate{Label: &label}, time.Now()); err != nil {
			return keybrake.ReserveResult{}, err
		}
	}
	res, err := c.Store.Reserve(ctx, args)
	if res.Stale {
		c.stale.Add(1)
	}
	return res, err
}

// TestAttackKeyVer_StaleTwiceRefusedNothingForwarded: a key another
// replica changes between each decision and its reservation (here: after
// the cached key's decision, and again after the fresh key's) is refused
// with a retryable 503 in Stripe's shape, after exactly two stale
// reservations: nothing forwarded to Stripe, nothing reserved or counted,
// one audit event. The same Idempotency-Key, retried once the key stops
// changing, charges once.
func TestAttackKeyVer_StaleTwiceRefusedNothingForwarded(t *testing.T) {
	dsn := MustDatabase(t, MustServerDSN(t))
	sim := MustSim(t)
	a := MustReplica(t, dsn, sim)
	var changer *keyChanger
	b := mustReplicaWith(t, dsn, sim, func(s *Replica) {
		changer = &keyChanger{Store: s.Store, other: a.Store}
		s.Server.Store = changer
	})
	keyID, secret := MustCreateKey(t, a.URL(), `{"label":"churning","daily_usd_cap":1000,"allowed_endpoints":["charges.create"]}`)
	auth := map[string]string{"Authorization": "Bearer " + secret, "Idempotency-Key": "kv-churn"}
	if status, body := Do(t, "GET", b.URL()+"/v1/keybrake/key", "", map[string]string{"Authorization": auth["Authorization"]}); status != http.StatusOK {
		t.Fatalf("own key on B: %d %s", status, body)
	}

	changer.on.Store(true)
	status, body := Do(t, "POST", b.URL()+"/v1/charges", "amount=5000&currency=usd&source=tok_visa", auth)
	changer.on.Store(false)
	if status != http.StatusServiceUnavailable || StripeErrorType(body) != "api_error" {
		t.Fatalf("a charge on a key changed before each of its reservations: %d %s; want Stripe's 503 api_error", status, body)
	}
	if n := changer.stale.Load(); n != 2 {
		t.Fatalf("%d stale reservations; want 2 (the cached key's, then the fresh key's)", n)
	}
	if n := len(sim.GroundTruth().Charges); n != 0 {
		t.Fatalf("Stripe has %d charges after the 503; want none", n)
	}
	if rs, err := a.Store.FindReservations(context.Background(), keybrake.ReservationFilter{KeyID: keyID}); err != nil || len(rs) != 0 {
		t.Fatalf("the key has %d reservations (%v) after the 503; want none", len(rs), err)
	}
	if sp := MustSpend(t, a.Store, keyID); sp.Day != 0 || sp.Total != 0 {
		t.Fatalf("the key spent %+v after the 503; want nothing", sp)
	}
	b.FlushAudit()
	evs, _, err := a.Store.FindEvents(context.Background(), keybrake.EventFilter{KeyID: keyID, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	denies := 0
	for _, e := range evs {
		if e.Decision == keybrake.DecisionDeny {
			denies++
		}
	}
	if denies != 1 || len(evs) != 1 {
		t.Fatalf("%d events, %d deny, for the refused charge; want one deny", len(evs), denies)
	}

	if status, body := Do(t, "POST", b.URL()+"/v1/charges", "amount=5000&currency=usd&source=tok_visa", auth); status != http.StatusOK {
		t.Fatalf("the retry once the key stopped changing: %d %s", status, body)
	}
	if n := len(sim.GroundTruth().Charges); n != 1 {
		t.Fatalf("Stripe has %d charges after the retry; want 1", n)
	}
}

// A Twilio create is priced when parsed, so a replica decided it on its
// cached key and left the key's version to its reservation; but a create
// To one of the account's own numbers is made unpriced by the vendor's
// Decide (Twilio bills it again as inbound and runs that number's webhook,
// which may <Dial> anywhere), and an unpriced request reserves nothing:
// nothing checked the version, and nothing read the key again. Replica B,
// whose NOTIFY was lost, forwarded such a message for a key whose
// allow_unpriced an operator had taken away through A, and for a key A had
// revoked (unpriced: no cap counts it; allow_unpriced and revocation are
// its only brakes). Before the key version check, B read the key again
// for every create. A request the vendor makes unpriced on a cached key
// now reads the key again, and is decided again when it moved.
func TestAttackKeyVer_OwnNumberCreateOnStaleKey(t *testing.T) {
	const own = "+14155550199"
	dsn := MustDatabase(t, MustServerDSN(t))
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	deaf := newDeafProxy(t, u.Host)
	sim := MustSim(t)
	tw := twiliosim.New(twiliosim.Options{Numbers: []string{"+14155550100", own}})
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

	send := func(secret string) (int, []byte) {
		return Do(t, "POST", b.URL()+"/twilio/2010-04-01/Accounts/"+twiliosim.DefaultAccountSid+"/Messages.json",
			url.Values{"To": {own}, "From": {"+14155550100"}, "Body": {"forward this"}}.Encode(),
			map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte(twiliosim.DefaultAccountSid+":"+twilio.AlnumVaultKey(secret))),
				"Content-Type": "application/x-www-form-urlencoded"})
	}
	for _, tc := range []struct {
		name, change, body string
		want               int
	}{
		{"UnpricedTakenAway", "PATCH /vault/keys/{id}", `{"allow_unpriced":false}`, http.StatusForbidden},
		{"Revoked", "POST /vault/keys/{id}/revoke", "", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keyID, secret := MustCreateKey(t, a.URL(), `{"vendor":"twilio","daily_usd_cap":"5","allow_unpriced":true}`)
			if status, body := send(secret); status != http.StatusCreated {
				t.Fatalf("a message to the account's own number on B before the change: %d %s", status, body)
			}
			sent := len(tw.GroundTruth().Messages)
			dropped := deaf.Dropped()
			method, path, _ := strings.Cut(tc.change, " ")
			if status, out := Admin(t, a.URL(), method, strings.ReplaceAll(path, "{id}", keyID), tc.body); status != http.StatusOK {
				t.Fatalf("%s on A: %d %s", tc.change, status, out)
			}
			kbtest.Eventually(t, "B's watcher to lose the change's NOTIFY", func() bool { return deaf.Dropped() > dropped })
			if status, body := send(secret); status != tc.want {
				t.Fatalf("after %s %s committed on A, B answered a message to the account's own number %d %s; want keybrake's %d", tc.change, tc.body, status, body, tc.want)
			}
			if n := len(tw.GroundTruth().Messages); n != sent {
				t.Fatalf("Twilio sent %d messages after the change; want none", n-sent)
			}
		})
	}
}
