package http_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/stripesim"
)

// Every fault of the simulator leaves the key's spend equal to the ground
// truth once the resolver has run: no charge lost from the books, none
// counted twice.
func TestProxy_FaultsSettleExactly(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fault  stripesim.Fault
		status int // what the client sees
	}{
		{"FailBefore", stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultFailBefore, Count: 1}, 500},
		{"FailAfter", stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultFailAfter, Count: 1}, 500},
		{"CutAfter", stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultCutAfter, Count: 1}, 502},
		{"Timeout", stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultLatency, Latency: 2 * time.Second, Count: 1}, 502},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := MustOpen(t, func(s *khttp.Server) { s.UpstreamTimeout = 300 * time.Millisecond })
			id, secret := e.CreateKey(t, `{"daily_usd_cap":100}`)
			if _, err := e.Sim.AddFault(tc.fault); err != nil {
				t.Fatal(err)
			}
			_, err := e.Stripe(secret).V1Charges.Create(context.Background(), chargeParams(1500, "usd"))
			StripeErr(t, err, tc.status)

			// Until resolved, the amount stays counted (uncertain), never freed.
			sp := e.Spend(t, id)
			if sp.Day != 15*keybrake.MicrosPerUSD {
				t.Fatalf("before resolving: spend = %s, want 15.00 still counted", sp.Day)
			}
			e.MustResolve(t)

			n, cents := e.SucceededCents("usd")
			if n != 1 {
				t.Fatalf("upstream has %d charges, want exactly 1", n)
			}
			sp = e.Spend(t, id)
			if sp.Day != keybrake.Micros(cents)*10_000 || sp.Uncertain != 0 {
				t.Fatalf("after resolving: spend = %s uncertain %s, ground truth %d cents", sp.Day, sp.Uncertain, cents)
			}
		})
	}
}

// A client retrying with the same Idempotency-Key after a cut connection
// gets Stripe's saved answer, is not counted twice, and settles the
// uncertain reservation itself.
func TestProxy_RetryAfterCutCountsOnce(t *testing.T) {
	e := MustOpen(t)
	id, secret := e.CreateKey(t, `{"daily_usd_cap":100}`)
	if _, err := e.Sim.AddFault(stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultCutAfter, Count: 1}); err != nil {
		t.Fatal(err)
	}
	body := "amount=2500&currency=usd&source=tok_visa"
	h := map[string]string{"Authorization": "Bearer " + secret, "Idempotency-Key": "order-42"}
	if resp, b := e.Do(t, "POST", "/stripe/v1/charges", body, h); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("first: %d %s", resp.StatusCode, b)
	}
	resp, b := e.Do(t, "POST", "/stripe/v1/charges", body, h)
	if resp.StatusCode != 200 || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d replayed=%q %s", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), b)
	}
	sp := e.Spend(t, id)
	if sp.Day != 25*keybrake.MicrosPerUSD || sp.Uncertain != 0 {
		t.Fatalf("spend = %s uncertain = %s, want 25.00 settled", sp.Day, sp.Uncertain)
	}
	if n, _ := e.SucceededCents("usd"); n != 1 {
		t.Fatalf("%d charges upstream", n)
	}
}

func TestProxy_Replay(t *testing.T) {
	e := MustOpen(t)
	id, secret := e.CreateKey(t, `{"daily_usd_cap":100}`)
	h := map[string]string{"Authorization": "Bearer " + secret, "Idempotency-Key": "invoice-7"}
	for i := 0; i < 3; i++ {
		resp, b := e.Do(t, "POST", "/stripe/v1/charges", "amount=1000&currency=usd&source=tok_visa", h)
		if resp.StatusCode != 200 {
			t.Fatalf("attempt %d: %d %s", i, resp.StatusCode, b)
		}
	}
	if got := e.Spend(t, id).Day; got != 10*keybrake.MicrosPerUSD {
		t.Fatalf("spend = %s, want 10.00 counted once", got)
	}
	t.Run("ErrSameKeyOtherParams", func(t *testing.T) {
		resp, b := e.Do(t, "POST", "/stripe/v1/charges", "amount=9000&currency=usd&source=tok_visa", h)
		if resp.StatusCode != 400 {
			t.Fatalf("status = %d %s", resp.StatusCode, b)
		}
		if got := e.Spend(t, id).Day; got != 10*keybrake.MicrosPerUSD {
			t.Fatalf("spend = %s", got)
		}
	})
	if n, _ := e.SucceededCents("usd"); n != 1 {
		t.Fatalf("%d charges upstream", n)
	}
}

func TestProxy_DeclineReleases(t *testing.T) {
	e := MustOpen(t)
	id, secret := e.CreateKey(t, `{"daily_usd_cap":10}`)
	sc := e.Stripe(secret)
	p := chargeParams(1000, "usd")
	p.Source.Token = stripego.String("tok_chargeDeclined")
	_, err := sc.V1Charges.Create(context.Background(), p)
	se := StripeErr(t, err, http.StatusPaymentRequired)
	if se.Type != stripego.ErrorTypeCard {
		t.Fatalf("type = %s", se.Type)
	}
	if got := e.Spend(t, id).Day; got != 0 {
		t.Fatalf("spend after decline = %s, want 0", got)
	}
	// The whole cap is still there.
	if _, err := sc.V1Charges.Create(context.Background(), chargeParams(1000, "usd")); err != nil {
		t.Fatal(err)
	}
}

// The daily window rolls over at local midnight in the key's zone.
func TestProxy_MidnightRolloverInZone(t *testing.T) {
	e := MustOpen(t)
	tokyo, _ := time.LoadLocation("Asia/Tokyo")
	e.Clock.Set(time.Date(2026, 11, 29, 23, 59, 0, 0, tokyo))
	_, secret := e.CreateKey(t, `{"daily_usd_cap":10,"monthly_usd_cap":15,"timezone":"Asia/Tokyo"}`)
	sc := e.Stripe(secret)
	ctx := context.Background()
	if _, err := sc.V1Charges.Create(ctx, chargeParams(1000, "usd")); err != nil {
		t.Fatal(err)
	}
	_, err := sc.V1Charges.Create(ctx, chargeParams(100, "usd"))
	se := StripeErr(t, err, 429)
	if want := "2026-11-30T00:00:00+09:00"; !contains(se.Msg, want) {
		t.Fatalf("message %q lacks reset %s", se.Msg, want)
	}
	e.Clock.Set(time.Date(2026, 11, 30, 0, 0, 1, 0, tokyo)) // 15:00:01 UTC on the 29th: still the 29th in UTC
	if _, err := sc.V1Charges.Create(ctx, chargeParams(500, "usd")); err != nil {
		t.Fatalf("after local midnight: %v", err)
	}
	// The monthly cap still counts both days.
	_, err = sc.V1Charges.Create(ctx, chargeParams(100, "usd"))
	se = StripeErr(t, err, 429)
	if !contains(se.Msg, "monthly") {
		t.Fatalf("message %q, want the monthly window", se.Msg)
	}
	e.Clock.Set(time.Date(2026, 12, 1, 0, 0, 0, 0, tokyo))
	if _, err := sc.V1Charges.Create(ctx, chargeParams(100, "usd")); err != nil {
		t.Fatalf("new month: %v", err)
	}
}

func contains(s, sub string) bool { return len(sub) == 0 || indexOf(s, sub) >= 0 }

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// A reservation released after an answer Stripe does not save (a 429 rate
// limit, a 400 before processing) is reserved anew when the client retries
// under the same Idempotency-Key: the retry runs anew at Stripe, so it must
// count, and once. A replayed decline (402, saved) is not counted at all.
func TestProxy_RetryAfterUnsavedAnswer(t *testing.T) {
	e := MustOpen(t)
	id, secret := e.CreateKey(t, `{"daily_usd_cap":15}`)
	h := map[string]string{"Authorization": "Bearer " + secret, "Idempotency-Key": "retry-after-429"}
	if _, err := e.Sim.AddFault(stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultFailBefore, Status: 429, Count: 1}); err != nil {
		t.Fatal(err)
	}
	body := "amount=1000&currency=usd&source=tok_visa"
	if resp, b := e.Do(t, "POST", "/stripe/v1/charges", body, h); resp.StatusCode != 429 {
		t.Fatalf("first: %d %s", resp.StatusCode, b)
	}
	if got := e.Spend(t, id).Day; got != 0 {
		t.Fatalf("after Stripe's 429: spend = %s, want 0", got)
	}
	if resp, b := e.Do(t, "POST", "/stripe/v1/charges", body, h); resp.StatusCode != 200 {
		t.Fatalf("retry: %d %s", resp.StatusCode, b)
	}
	if got := e.Spend(t, id).Day; got != 10*keybrake.MicrosPerUSD {
		t.Fatalf("after the retry: spend = %s, want 10.00", got)
	}
	// A third send is a real replay: Stripe saved the retry's answer.
	resp, _ := e.Do(t, "POST", "/stripe/v1/charges", body, h)
	if resp.StatusCode != 200 || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %q", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
	}
	if n, _ := e.SucceededCents("usd"); n != 1 {
		t.Fatalf("%d charges upstream, want 1", n)
	}
	t.Run("ErrRetryOverCap", func(t *testing.T) {
		h := map[string]string{"Authorization": "Bearer " + secret, "Idempotency-Key": "retry-over-cap"}
		small := "amount=500&currency=usd&source=tok_visa"
		e.Sim.AddFault(stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultFailBefore, Status: 429, Count: 1})
		if resp, b := e.Do(t, "POST", "/stripe/v1/charges", small, h); resp.StatusCode != 429 || resp.Header.Get("Keybrake-Window") != "" {
			t.Fatalf("Stripe's 429: %d %s", resp.StatusCode, b)
		}
		// Meanwhile another request spends what is left of the day.
		other := map[string]string{"Authorization": "Bearer " + secret}
		if resp, b := e.Do(t, "POST", "/stripe/v1/charges", small, other); resp.StatusCode != 200 {
			t.Fatalf("other: %d %s", resp.StatusCode, b)
		}
		if resp, b := e.Do(t, "POST", "/stripe/v1/charges", small, h); resp.StatusCode != 429 || resp.Header.Get("Keybrake-Window") != "daily" {
			t.Fatalf("retry over the cap: %d %s", resp.StatusCode, b)
		}
		if n, _ := e.SucceededCents("usd"); n != 2 {
			t.Fatalf("%d charges upstream, want 2", n)
		}
	})
	t.Run("OKDeclineReplayed", func(t *testing.T) {
		id, secret := e.CreateKey(t, `{"daily_usd_cap":15}`)
		h := map[string]string{"Authorization": "Bearer " + secret, "Idempotency-Key": "declined-once"}
		for i := 0; i < 2; i++ {
			if resp, b := e.Do(t, "POST", "/stripe/v1/charges", "amount=400&currency=usd&source=tok_chargeDeclined", h); resp.StatusCode != 402 {
				t.Fatalf("attempt %d: %d %s", i, resp.StatusCode, b)
			}
		}
		if got := e.Spend(t, id).Day; got != 0 {
			t.Fatalf("spend = %s, want 0: a declined charge counts nothing, replayed or not", got)
		}
	})
}
