package replicas_test

import (
	"context"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/internal/kbtest"
	"github.com/keybrake/keybrake/postgres"
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
