package stripesim_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/keybrake/keybrake/stripesim"
)

// TestMaxObjects: a simulator with a bound keeps about MaxObjects of each
// kind however many are created, Moved stays exact, and objects that can
// still change are kept.
func TestMaxObjects(t *testing.T) {
	const max, n = 50, 600
	limit := max + max/8 + 1 // the bound plus the trimming slack
	t.Run("Bounded", func(t *testing.T) {
		e := MustEnvWith(t, stripesim.Options{MaxObjects: max})
		auth := e.do(t, "POST", "/v1/charges", "amount=700&currency=usd&source=tok_visa&capture=false").object(t)["id"].(string)
		var captured, transferred, refunded int64
		for i := range n {
			amount := int64(100 + i)
			r := e.do(t, "POST", "/v1/charges", fmt.Sprintf("amount=%d&currency=usd&source=tok_visa", amount), "Idempotency-Key", fmt.Sprintf("idem_%d", i))
			if r.status != http.StatusOK {
				t.Fatalf("charge %d: %d", i, r.status)
			}
			captured += amount
			if i%3 == 0 {
				if r := e.do(t, "POST", "/v1/refunds", "charge="+r.object(t)["id"].(string)+"&amount=10"); r.status != http.StatusOK {
					t.Fatalf("refund %d: %d", i, r.status)
				}
				refunded += 10
			}
			if i%2 == 0 {
				if r := e.do(t, "POST", "/v1/transfers", "amount=5&currency=usd&destination=acct_1"); r.status != http.StatusOK {
					t.Fatalf("transfer %d: %d", i, r.status)
				}
				transferred += 5
			}
			if r := e.do(t, "POST", "/v1/charges", "amount=100&currency=usd&source=tok_chargeDeclined"); r.status != http.StatusPaymentRequired {
				t.Fatalf("decline %d: %d", i, r.status)
			}
		}
		for kind, got := range e.sim.Counts() {
			want := limit + 1 // +1: the authorization, never forgotten
			if kind == "owners" {
				want = 3 * want // charges, refunds and transfers
			}
			if got > want {
				t.Errorf("%s: %d kept, want at most %d", kind, got, want)
			}
		}
		m := e.sim.Moved().Total
		if m.Captured["usd"] != captured || m.Refunded["usd"] != refunded || m.Transferred["usd"] != transferred || m.Total["usd"] != captured+transferred {
			t.Fatalf("moved = %+v, want captured %d, refunded %d, transferred %d", m, captured, refunded, transferred)
		}
		// The authorization, the oldest object, is still capturable.
		if r := e.do(t, "POST", "/v1/charges/"+auth+"/capture", ""); r.status != http.StatusOK {
			t.Fatalf("capture of the kept authorization: %d", r.status)
		}
		if got := e.sim.Moved().Total.Captured["usd"]; got != captured+700 {
			t.Fatalf("captured after the capture = %d, want %d", got, captured+700)
		}
		// A recent Idempotency-Key still replays.
		r := e.do(t, "POST", "/v1/charges", fmt.Sprintf("amount=%d&currency=usd&source=tok_visa", 100+n-1), "Idempotency-Key", fmt.Sprintf("idem_%d", n-1))
		if r.status != http.StatusOK || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("recent replay: %d %q", r.status, r.header.Get("Idempotent-Replayed"))
		}
	})
	t.Run("RetiredSumsPersist", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sim.json")
		e := MustEnvWith(t, stripesim.Options{MaxObjects: 5, StatePath: path})
		for range 40 {
			e.do(t, "POST", "/v1/charges", "amount=100&currency=usd&source=tok_visa")
		}
		if err := e.sim.Close(); err != nil {
			t.Fatal(err)
		}
		again, err := stripesim.New(stripesim.Options{MaxObjects: 5, StatePath: path})
		if err != nil {
			t.Fatal(err)
		}
		if got := again.Moved().Total.Captured["usd"]; got != 4000 {
			t.Fatalf("captured after reload = %d, want 4000", got)
		}
	})
	t.Run("KeepAll", func(t *testing.T) {
		e := MustEnv(t)
		for range 3 * max {
			e.do(t, "POST", "/v1/charges", "amount=100&currency=usd&source=tok_visa")
		}
		if got := len(e.sim.GroundTruth().Charges); got != 3*max {
			t.Fatalf("%d charges kept, want all %d", got, 3*max)
		}
	})
}
