package http_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/sqlite"
	"github.com/keybrake/keybrake/stripesim"
)

// settleAfterAnswer is the Option serve uses by default.
func settleAfterAnswer(s *khttp.Server) { s.SettleAfterAnswer = true }

// mustFlush waits for the settlements the proxy queued after answering.
func (e *Env) mustFlush(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.Store.(keybrake.LaterSettler).FlushSettlements(ctx); err != nil {
		tb.Fatal(err)
	}
}

func (e *Env) reservationOf(tb testing.TB, keyID, idem string) *keybrake.Reservation {
	tb.Helper()
	rs, err := e.Store.FindReservations(context.Background(), keybrake.ReservationFilter{KeyID: keyID})
	if err != nil {
		tb.Fatal(err)
	}
	for _, r := range rs {
		if r.IdempotencyKey == idem {
			return r
		}
	}
	tb.Fatalf("no reservation for %s", idem)
	return nil
}

// TestSettleAfterAnswer: with SettleAfterAnswer a success is answered
// before its settlement commits, and counts in full until it does; every
// other outcome is settled before the answer.
func TestSettleAfterAnswer(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		e := MustOpen(t, settleAfterAnswer)
		id, secret := e.CreateKey(t, `{"total_usd_cap":10}`)
		h := map[string]string{"Authorization": "Bearer " + secret, "Idempotency-Key": "later-1"}
		resp, b := e.Do(t, "POST", "/stripe/v1/charges", "amount=400&currency=usd&source=tok_visa", h)
		if resp.StatusCode != 200 || resp.Header.Get("Keybrake-Reservation") == "" {
			t.Fatalf("charge: %d %s", resp.StatusCode, b)
		}
		e.mustFlush(t)
		r := e.reservationOf(t, id, "later-1")
		if r.State != keybrake.StateSettled || r.SettledMicros != 4_000_000 || r.ObjectID == "" || r.ID != resp.Header.Get("Keybrake-Reservation") {
			t.Fatalf("reservation = %+v", r)
		}
		if sp := e.Spend(t, id); sp.Total != 4_000_000 {
			t.Fatalf("spend = %+v", sp)
		}
		// A replay answers from Stripe's saved response and counts nothing more.
		if resp, b := e.Do(t, "POST", "/stripe/v1/charges", "amount=400&currency=usd&source=tok_visa", h); resp.StatusCode != 200 {
			t.Fatalf("replay: %d %s", resp.StatusCode, b)
		}
		e.mustFlush(t)
		if sp := e.Spend(t, id); sp.Total != 4_000_000 {
			t.Fatalf("spend after replay = %+v", sp)
		}
	})
	t.Run("CountedInFullUntilSettled", func(t *testing.T) {
		// The charge is held upstream; meanwhile another connection takes
		// SQLite's write lock, so the settlement cannot commit. The client
		// still gets its answer, and the reservation counts in full.
		e := MustOpen(t, settleAfterAnswer)
		id, secret := e.CreateKey(t, `{"total_usd_cap":10}`)
		fault, err := e.Sim.AddFault(stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultLatency, Latency: time.Second, Count: 1})
		if err != nil {
			t.Fatal(err)
		}
		type answer struct {
			status int
			body   []byte
		}
		answered := make(chan answer, 1)
		go func() {
			resp, b := e.Do(t, "POST", "/stripe/v1/charges", "amount=300&currency=usd&source=tok_visa",
				map[string]string{"Authorization": "Bearer " + secret, "Idempotency-Key": "later-held"})
			answered <- answer{resp.StatusCode, b}
		}()
		waitFired(t, e.Sim, fault)
		db, err := sqlite.OpenDB(filepath.Join(e.Dir, "keybrake.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		conn, err := db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
			t.Fatal(err)
		}
		a := <-answered
		if a.status != 200 {
			t.Fatalf("charge: %d %s", a.status, a.body)
		}
		if r := e.reservationOf(t, id, "later-held"); r.State != keybrake.StateReserved || r.Micros != 3_000_000 {
			t.Fatalf("reservation before the settlement commits = %+v, want reserved", r)
		}
		if sp := e.Spend(t, id); sp.Total != 3_000_000 {
			t.Fatalf("spend before the settlement commits = %+v, want the reservation in full", sp)
		}
		if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
			t.Fatal(err)
		}
		e.mustFlush(t)
		if r := e.reservationOf(t, id, "later-held"); r.State != keybrake.StateSettled {
			t.Fatalf("reservation = %+v, want settled", r)
		}
	})
	t.Run("ReleasedBeforeAnswer", func(t *testing.T) {
		// A decline is released before the answer: a retry under the same
		// key must find it released.
		e := MustOpen(t, settleAfterAnswer)
		id, secret := e.CreateKey(t, `{"total_usd_cap":10}`)
		h := map[string]string{"Authorization": "Bearer " + secret, "Idempotency-Key": "declined"}
		if resp, b := e.Do(t, "POST", "/stripe/v1/charges", "amount=400&currency=usd&source=tok_chargeDeclined", h); resp.StatusCode != 402 {
			t.Fatalf("decline: %d %s", resp.StatusCode, b)
		}
		if r := e.reservationOf(t, id, "declined"); r.State != keybrake.StateReleased {
			t.Fatalf("reservation = %+v, want released at the answer", r)
		}
	})
}

// waitFired waits until the simulator's fault has fired.
func waitFired(tb testing.TB, sim *stripesim.Server, id string) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, f := range sim.Faults() {
			if f.ID == id && f.Fired > 0 {
				return
			}
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
	tb.Fatalf("fault %s never fired", id)
}
