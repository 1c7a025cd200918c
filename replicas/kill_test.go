package replicas_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripesim"
)

// TestSIGKILL runs real `keybrake serve` processes, two at a time, on one
// database in front of a standalone `keybrake stripesim`, and kills replica
// A with SIGKILL at each point of a money-moving request while replica B
// keeps serving. Nothing is stranded: B's resolver (or A's, restarted)
// leases every interrupted reservation once stale and settles it by
// idempotent replay, and for every key the settled spend equals the
// simulator's ground truth exactly.
//
// The windows are made exact without hooks in keybrake: the test holds a
// row lock (SELECT … FOR UPDATE), the key's so that A blocks inside Reserve,
// the reservation's so that A blocks inside Settle (before answering with
// --sync-settle, after answering by default), and simulator faults hold A's request upstream. After the SIGKILL
// the test terminates A's orphaned backends, as the server itself would once
// it noticed the dead client, so that a statement A had sent but the server
// had not run yet never runs.
func TestSIGKILL(t *testing.T) {
	dsn := MustDatabase(t, MustServerDSN(t))
	bin := MustBuild(t)
	sim := SimProc{MustStart(t, "stripesim", bin, nil, "stripesim", "--addr", "127.0.0.1:0")}
	serve := func(name string, flags ...string) *Proc {
		return MustStart(t, name, bin, []string{
			"STRIPE_SECRET_KEY=sk_test_sigkill_upstream",
			"KEYBRAKE_ADMIN_TOKEN=" + adminToken,
		}, append([]string{"serve", "--addr", "127.0.0.1:0", "--upstream", sim.URL,
			"--db", withParam(poolDSN(dsn), "application_name", name),
			"--resolve-interval", "100ms", "--stale-after", "4s", "--log-level", "info"}, flags...)...)
	}
	ctx := context.Background()
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	store := MustStore(t, dsn)

	b := serve("replica_b")
	a := serve("replica_a1")
	keyID, secret := MustCreateKey(t, a.URL, `{"label":"killed","total_usd_cap":1000}`)
	bgKeyID, bgSecret := MustCreateKey(t, b.URL, `{"label":"background","total_usd_cap":1000000}`)

	// Background traffic on B until B is killed, on a key of its own, as
	// confirmed payment intents, so that the faults on /v1/charges below
	// only ever hold A's requests.
	var bKilled atomic.Bool
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		tick := time.NewTicker(20 * time.Millisecond) // pace, not synchronisation
		defer tick.Stop()
		for i := 0; ; i++ {
			<-tick.C
			status, body, err := do("POST", b.URL+"/v1/payment_intents",
				fmt.Sprintf("amount=%d&currency=usd&payment_method=pm_card_visa&confirm=true", 100+i%50),
				map[string]string{"Authorization": "Bearer " + bgSecret, "Idempotency-Key": fmt.Sprintf("bg_%d", i)})
			if bKilled.Load() {
				return
			}
			if err != nil || status != http.StatusOK {
				t.Errorf("background payment intent %d on B: %d %s %v", i, status, body, err)
				return
			}
		}
	}()

	// lockRow takes a row lock in a transaction of the test's own, on a
	// connection of its own (in a transaction pg_stat_activity would show
	// one frozen snapshot); the returned func releases it.
	lockRow := func(t testing.TB, sql string, args ...any) func() {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := tx.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return func() {
			tx.Rollback(ctx)
			conn.Close(ctx)
		}
	}
	// waitBlocked waits until the replica's connection waits for a lock.
	waitBlocked := func(t testing.TB, app string) {
		Eventually(t, app+" blocked on a row lock", func() bool {
			var n int
			if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n > 0
		})
	}
	// kill SIGKILLs the replica and ends its orphaned backends, waiting
	// until they are gone.
	kill := func(t testing.TB, p *Proc) {
		p.Kill(t)
		if _, err := db.Exec(ctx, `SELECT pg_terminate_backend(pid, 60000) FROM pg_stat_activity WHERE application_name = $1`, p.Name); err != nil {
			t.Fatal(err)
		}
		Eventually(t, p.Name+"'s backends gone", func() bool {
			var n int
			if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, p.Name).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n == 0
		})
	}
	// charge sends a charge to A in the background; A dies under it.
	charge := func(p *Proc, cents int64, idem string) <-chan error {
		errc := make(chan error, 1)
		go func() {
			_, _, err := Charge(p.URL, secret, cents, idem)
			errc <- err
		}()
		return errc
	}
	reservation := func(t testing.TB, idem string) *keybrake.Reservation {
		rs, err := store.FindReservations(ctx, keybrake.ReservationFilter{KeyID: keyID})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.IdempotencyKey == idem {
				return r
			}
		}
		return nil
	}
	charged := func(t testing.TB, idem string) int {
		n := 0
		for _, c := range sim.GroundTruth(t).Charges {
			if c.Metadata["keybrake_idempotency_key"] == idem {
				n++
			}
		}
		return n
	}

	// settled waits until the reservation of idem is settled.
	settled := func(t testing.TB, idem string) {
		Eventually(t, idem+" settled", func() bool {
			r := reservation(t, idem)
			return r != nil && r.State == keybrake.StateSettled
		})
	}

	t.Run("BeforeReserving", func(t *testing.T) {
		// A blocks inside Reserve, on the key row, before anything is
		// recorded.
		unlock := lockRow(t, `SELECT 1 FROM keys WHERE id = $1 FOR UPDATE`, keyID)
		errc := charge(a, 300, "kill_before_reserve")
		waitBlocked(t, a.Name)
		kill(t, a)
		unlock()
		if err := <-errc; err == nil {
			t.Fatal("the client got an answer from a killed replica")
		}
		if r := reservation(t, "kill_before_reserve"); r != nil {
			t.Fatalf("a reservation was recorded: %+v", r)
		}
	})

	a = serve("replica_a2")
	t.Run("AfterReservingBeforeForwarding", func(t *testing.T) {
		// A has reserved and its request is held upstream; killing A makes
		// the simulator fail it without processing, so the upstream never
		// acts on it: to the store and the upstream, A died before
		// forwarding. B's resolver replays it once stale, and that replay
		// is what charges.
		id := sim.AddFault(t, stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultFailBefore, Latency: time.Minute, Count: 1})
		errc := charge(a, 500, "kill_after_reserve")
		sim.WaitFired(t, id, 1)
		if r := reservation(t, "kill_after_reserve"); r == nil || r.State != keybrake.StateReserved {
			t.Fatalf("reservation = %+v, want reserved", r)
		}
		kill(t, a)
		if err := <-errc; err == nil {
			t.Fatal("the client got an answer from a killed replica")
		}
		settled(t, "kill_after_reserve")
		if n := charged(t, "kill_after_reserve"); n != 1 {
			t.Fatalf("%d charges upstream, want 1 (the resolver's replay)", n)
		}
	})

	a = serve("replica_a3")
	t.Run("AfterAnsweringBeforeSettling", func(t *testing.T) {
		// serve answers a success before its settlement commits (one commit
		// on the request path). The charge succeeds upstream, A answers the
		// client while its settlement waits for the reservation's row lock,
		// and A is killed: the reservation was counted in full all along,
		// and B's resolver settles it once stale, by idempotent replay,
		// without a second charge.
		before := MustSpend(t, store, keyID).Total
		id := sim.AddFault(t, stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultLatency, Latency: 1500 * time.Millisecond, Count: 1})
		answered := make(chan int, 1)
		go func() {
			status, _, err := Charge(a.URL, secret, 600, "kill_after_answer")
			if err != nil {
				status = 0
			}
			answered <- status
		}()
		sim.WaitFired(t, id, 1)
		unlock := lockRow(t, `SELECT 1 FROM reservations WHERE key_id = $1 AND idempotency_key = $2 FOR UPDATE`, keyID, "kill_after_answer")
		if status := <-answered; status != http.StatusOK {
			t.Fatalf("the client got %d, want 200 before the settlement commits", status)
		}
		waitBlocked(t, a.Name)
		if r := reservation(t, "kill_after_answer"); r == nil || r.State != keybrake.StateReserved {
			t.Fatalf("reservation = %+v, want reserved: the window was missed", r)
		}
		if got := MustSpend(t, store, keyID).Total; got != before+CentsMicros(600) {
			t.Fatalf("spend while the settlement waits = %s, want %s: the reservation in full", got, before+CentsMicros(600))
		}
		kill(t, a)
		unlock()
		settled(t, "kill_after_answer")
		if n := charged(t, "kill_after_answer"); n != 1 {
			t.Fatalf("%d charges upstream, want 1", n)
		}
		if got := MustSpend(t, store, keyID).Total; got != before+CentsMicros(600) {
			t.Fatalf("spend after the resolver = %s, want %s", got, before+CentsMicros(600))
		}
	})

	// --sync-settle settles before answering: killed while it waits to
	// settle, A never answers.
	a = serve("replica_a4", "--sync-settle")
	t.Run("AfterUpstreamBeforeSettling", func(t *testing.T) {
		// The charge succeeds upstream and A, with the answer in hand, waits
		// for the reservation's row lock to settle; then A, and B with it (at whatever
		// point of its own traffic), are killed. Nobody is left: the
		// replica started afterwards settles it.
		id := sim.AddFault(t, stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultLatency, Latency: 1500 * time.Millisecond, Count: 1})
		errc := charge(a, 700, "kill_after_upstream")
		sim.WaitFired(t, id, 1)
		unlock := lockRow(t, `SELECT 1 FROM reservations WHERE key_id = $1 AND idempotency_key = $2 FOR UPDATE`, keyID, "kill_after_upstream")
		Eventually(t, "the charge upstream", func() bool { return charged(t, "kill_after_upstream") == 1 })
		waitBlocked(t, a.Name)
		bKilled.Store(true)
		kill(t, a)
		kill(t, b)
		unlock()
		if err := <-errc; err == nil {
			t.Fatal("the client got an answer from a killed replica")
		}
		if r := reservation(t, "kill_after_upstream"); r == nil || r.State != keybrake.StateReserved {
			t.Fatalf("reservation = %+v, want reserved: the window was missed", r)
		}
		bg.Wait()
		c := serve("replica_c")
		settled(t, "kill_after_upstream")
		// More traffic through the new replica, on both keys.
		for i := range 5 {
			if status, body, err := Charge(c.URL, secret, 100, fmt.Sprintf("after_%d", i)); err != nil || status != http.StatusOK {
				t.Fatalf("charge on the new replica: %d %s %v", status, body, err)
			}
		}
	})
	bKilled.Store(true)
	bg.Wait()

	// Nothing stranded, nothing uncertain, and every key's spend is the
	// ground truth to the cent.
	Eventually(t, "every reservation resolved", func() bool { return len(MustOpenReservations(t, store)) == 0 })
	truth := sim.GroundTruth(t)
	bySource := map[string]int64{} // object ID → cents that succeeded upstream
	for _, ch := range truth.Charges {
		if ch.Status == "succeeded" && ch.PaymentIntent == "" {
			bySource[ch.ID] = ch.Amount
		}
	}
	for _, pi := range truth.PaymentIntents {
		if pi.Status == "succeeded" {
			bySource[pi.ID] = pi.Amount
		}
	}
	accounted := map[string]bool{}
	for _, k := range []string{keyID, bgKeyID} {
		rs, err := store.FindReservations(ctx, keybrake.ReservationFilter{KeyID: k})
		if err != nil {
			t.Fatal(err)
		}
		var settledMicros, truthMicros keybrake.Micros
		for _, r := range rs {
			if r.State != keybrake.StateSettled {
				continue
			}
			cents, ok := bySource[r.ObjectID]
			if !ok || accounted[r.ObjectID] {
				t.Fatalf("reservation %s (%s) settled for %q, which is not a distinct upstream success", r.ID, r.IdempotencyKey, r.ObjectID)
			}
			accounted[r.ObjectID] = true
			settledMicros += r.SettledMicros
			truthMicros += CentsMicros(cents)
		}
		sp := MustSpend(t, store, k)
		if sp.Total != settledMicros || sp.Total != truthMicros || sp.Uncertain != 0 {
			t.Fatalf("key %s: spend %+v, settled reservations %s, ground truth %s; want all equal, nothing uncertain", k, sp, settledMicros, truthMicros)
		}
		t.Logf("key %s: %d reservations, spend $%s = ground truth", k, len(rs), sp.Total)
	}
	for id := range bySource {
		if !accounted[id] {
			t.Fatalf("upstream success %s is counted by no reservation", id)
		}
	}
	if n := charged(t, "kill_before_reserve"); n != 0 {
		t.Fatalf("the charge killed before reserving reached the upstream %d times", n)
	}
}
