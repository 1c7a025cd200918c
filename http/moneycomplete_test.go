package http_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/internal/kbtest"
)

// The money-complete suite: an attacker holding a vault key tries every way
// we know to move money past the key's caps. Each case runs on SQLite and on
// PostgreSQL, and each ends by checking the invariant against the
// simulator's ground truth: what moved never exceeds the cap, and what
// keybrake counts is never below what moved.

// eachStore runs fn on an Env backed by SQLite and on one backed by
// PostgreSQL (skipped without a test server unless required).
func eachStore(t *testing.T, fn func(t *testing.T, e *Env)) {
	t.Run("SQLite", func(t *testing.T) { fn(t, MustOpen(t)) })
	t.Run("PostgreSQL", func(t *testing.T) {
		store := kbtest.Postgres(t)
		fn(t, MustOpen(t, func(s *khttp.Server) { s.Store = store }))
	})
}

// attacker speaks to keybrake with a vault key, and to the simulator as a
// browser would, with the publishable key and a client secret.
type attacker struct {
	e      *Env
	keyID  string
	secret string
}

func newAttacker(t *testing.T, e *Env, policy string) *attacker {
	t.Helper()
	id, secret := e.CreateKey(t, policy)
	return &attacker{e: e, keyID: id, secret: secret}
}

// call sends a form request through keybrake and returns the status and the
// decoded answer.
func (a *attacker) call(t *testing.T, method, path, body string, headers ...Header) (int, map[string]any) {
	t.Helper()
	h := append([]Header{{"Authorization", "Bearer " + a.secret}}, headers...)
	if method == "POST" {
		h = append(h, Header{"Content-Type", "application/x-www-form-urlencoded"})
	}
	resp, out := a.e.DoRaw(t, method, "/stripe"+path, body, h...)
	var v map[string]any
	_ = json.Unmarshal(out, &v)
	return resp.StatusCode, v
}

// must is call that fails the test unless the status is want.
func (a *attacker) must(t *testing.T, want int, method, path, body string, headers ...Header) map[string]any {
	t.Helper()
	status, v := a.call(t, method, path, body, headers...)
	if status != want {
		t.Fatalf("%s %s %q: status %d, want %d: %v", method, path, body, status, want, v)
	}
	return v
}

// browserConfirm confirms an intent directly at the simulator with the
// publishable key and its client secret, bypassing keybrake entirely.
func (a *attacker) browserConfirm(t *testing.T, pi map[string]any) int {
	t.Helper()
	id, _ := pi["id"].(string)
	cs, _ := pi["client_secret"].(string)
	form := url.Values{"client_secret": {cs}, "payment_method": {"pm_card_visa"}}.Encode()
	req, err := http.NewRequest("POST", a.e.SimURL+"/v1/payment_intents/"+id+"/confirm", strings.NewReader(form))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer pk_test_attacker")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		// A fault the script armed may cut the browser's request too.
		t.Logf("browser confirm %s: %v", id, err)
		return 0
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Logf("browser confirm %s: %d %s", id, resp.StatusCode, out)
	}
	return resp.StatusCode
}

// movedCents is the ground truth: USD cents captured, transferred or paid
// out at the simulator, by anyone.
func (e *Env) movedCents() int64 {
	return e.Sim.Moved().Total.Total["usd"]
}

// wantMoneyComplete checks the invariant for a key capped at capCents in
// USD: what moved stays within the cap, and keybrake counts at least what
// moved.
func (a *attacker) wantMoneyComplete(t *testing.T, capCents int64) {
	t.Helper()
	moved := a.e.movedCents()
	counted := a.e.Spend(t, a.keyID).Total
	if moved > capCents {
		t.Fatalf("moved %d cents past the cap of %d cents", moved, capCents)
	}
	if counted < keybrake.Micros(moved)*10000 {
		t.Fatalf("keybrake counts %s but %d cents moved", counted, moved)
	}
}

func id(v map[string]any) string { s, _ := v["id"].(string); return s }

// Class 1: the amount cannot change between pricing and execution.
func TestMoneyComplete_AmountRaceOnIntent(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":5,"allowed_endpoints":["*"]}`)
		pi := a.must(t, 200, "POST", "/v1/payment_intents", "amount=500&currency=usd&payment_method=pm_card_visa")
		// Raising the held intent past the cap is refused before Stripe sees it.
		v := a.must(t, 429, "POST", "/v1/payment_intents/"+id(pi), "amount=400000")
		if msg := fmt.Sprint(v["error"]); !strings.Contains(msg, "keybrake_spend_cap_exceeded") {
			t.Fatalf("refusal %v", msg)
		}
		// Racing updates against a confirm: every request is serialised on
		// the object or refused with lock_timeout; none moves more.
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(2)
			go func() {
				defer wg.Done()
				a.call(t, "POST", "/v1/payment_intents/"+id(pi), "amount=400000")
			}()
			go func() {
				defer wg.Done()
				a.call(t, "POST", "/v1/payment_intents/"+id(pi)+"/confirm", "")
			}()
		}
		wg.Wait()
		a.wantMoneyComplete(t, 500)
		got, _ := e.Sim.GroundTruth().PaymentIntents, 0
		for _, p := range got {
			if p.ID == id(pi) && p.Amount != 500 {
				t.Fatalf("intent amount became %d upstream", p.Amount)
			}
		}
	})
}

// An intent made outside keybrake is held at the new amount when a vault key
// raises it, so the raise is refused over the cap.
func TestMoneyComplete_RaiseIntentMadeOutside(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":5,"allowed_endpoints":["*"]}`)
		status, pi := directPost(t, e, "/v1/payment_intents", "amount=500&currency=usd&payment_method=pm_card_visa")
		if status != 200 {
			t.Fatalf("direct create: %d", status)
		}
		a.must(t, 429, "POST", "/v1/payment_intents/"+id(pi), "amount=400000")
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi)+"/confirm", "")
		a.wantMoneyComplete(t, 500)
	})
}

// Class 2: an intent created through keybrake without confirm is held, so a
// browser confirming it with its client secret moves counted money only.
func TestMoneyComplete_ClientSecretConfirm(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":10,"allowed_endpoints":["*"]}`)
		a.must(t, 429, "POST", "/v1/payment_intents", "amount=2000&currency=usd&payment_method=pm_card_visa")
		pi := a.must(t, 200, "POST", "/v1/payment_intents", "amount=1000&currency=usd&payment_method=pm_card_visa")
		if got := a.e.Spend(t, a.keyID); got.Held != 10*keybrake.MicrosPerUSD {
			t.Fatalf("held %s, want 10.00", got.Held)
		}
		a.must(t, 429, "POST", "/v1/payment_intents", "amount=100&currency=usd")
		if status := a.browserConfirm(t, pi); status != 200 {
			t.Fatalf("browser confirm: %d", status)
		}
		a.wantMoneyComplete(t, 1000)
	})
}

// Authorize, then capture, counts once; the uncaptured rest is released.
func TestMoneyComplete_AuthorizeThenCapture(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":25,"allowed_endpoints":["*"]}`)
		ch := a.must(t, 200, "POST", "/v1/charges", "amount=1500&currency=usd&source=tok_visa&capture=false")
		if got := a.e.Spend(t, a.keyID); got.Total != 15*keybrake.MicrosPerUSD || got.Held != 15*keybrake.MicrosPerUSD {
			t.Fatalf("after authorizing: %+v, want 15.00 held", got)
		}
		a.must(t, 200, "POST", "/v1/charges/"+id(ch)+"/capture", "")
		if got := a.e.Spend(t, a.keyID); got.Total != 15*keybrake.MicrosPerUSD || got.Held != 0 {
			t.Fatalf("after capture: %+v, want 15.00 settled once", got)
		}
		// Manual capture of an intent: a partial capture releases the rest.
		pi := a.must(t, 200, "POST", "/v1/payment_intents", "amount=1000&currency=usd&payment_method=pm_card_visa&confirm=true&capture_method=manual")
		a.must(t, 429, "POST", "/v1/payment_intents/"+id(pi)+"/increment_authorization", "amount=1100")
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi)+"/capture", "amount_to_capture=400")
		if got := a.e.Spend(t, a.keyID); got.Total != 19*keybrake.MicrosPerUSD {
			t.Fatalf("after partial capture: %s, want 19.00", got.Total)
		}
		a.wantMoneyComplete(t, 2500)
	})
}

// Incrementing an authorization reserves the difference first.
func TestMoneyComplete_IncrementAuthorization(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":25,"allowed_endpoints":["*"]}`)
		pi := a.must(t, 200, "POST", "/v1/payment_intents", "amount=1500&currency=usd&payment_method=pm_card_visa&confirm=true&capture_method=manual")
		a.must(t, 429, "POST", "/v1/payment_intents/"+id(pi)+"/increment_authorization", "amount=3000")
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi)+"/increment_authorization", "amount=2000")
		if got := a.e.Spend(t, a.keyID); got.Held != 20*keybrake.MicrosPerUSD {
			t.Fatalf("held %s, want 20.00", got.Held)
		}
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi)+"/capture", "")
		a.wantMoneyComplete(t, 2500)
	})
}

// Canceling releases; an expired hold is canceled upstream and released.
func TestMoneyComplete_CancelAndExpiry(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":30,"allowed_endpoints":["*"]}`)
		pi := a.must(t, 200, "POST", "/v1/payment_intents", "amount=2000&currency=usd&payment_method=pm_card_visa")
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi)+"/cancel", "")
		if got := a.e.Spend(t, a.keyID); got.Total != 0 {
			t.Fatalf("after cancel: %s, want 0", got.Total)
		}
		left := a.must(t, 200, "POST", "/v1/payment_intents", "amount=2500&currency=usd&payment_method=pm_card_visa")
		auth := a.must(t, 200, "POST", "/v1/charges", "amount=500&currency=usd&source=tok_visa&capture=false")
		a.must(t, 429, "POST", "/v1/charges", "amount=100&currency=usd&source=tok_visa")

		e.Clock.Advance(e.Server.HoldTTL + time.Minute)
		n, err := e.Server.SweepHolds(context.Background())
		if err != nil || n != 2 {
			t.Fatalf("SweepHolds = %d, %v; want 2", n, err)
		}
		if got := a.e.Spend(t, a.keyID); got.Total != 0 {
			t.Fatalf("after the sweep: %+v, want nothing counted", got)
		}
		for _, p := range e.Sim.GroundTruth().PaymentIntents {
			if p.ID == id(left) && p.Status != "canceled" {
				t.Fatalf("expired intent is %s upstream, want canceled", p.Status)
			}
		}
		// The swept objects are no longer payable: their money is free again.
		if status := a.browserConfirm(t, left); status == 200 {
			t.Fatal("a swept intent could still be confirmed")
		}
		_ = auth
		a.must(t, 200, "POST", "/v1/charges", "amount=3000&currency=usd&source=tok_visa")
		a.wantMoneyComplete(t, 3000)
	})
}

// An upstream amount above what keybrake reserved is an alarm, and counts
// in full.
func TestMoneyComplete_AlarmAboveReservation(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"]}`)
		pi := a.must(t, 200, "POST", "/v1/payment_intents", "amount=500&currency=usd&payment_method=pm_card_visa")
		// Somebody with the real key raises it outside keybrake.
		if status, _ := directPost(t, e, "/v1/payment_intents/"+id(pi), "amount=5000"); status != 200 {
			t.Fatalf("direct update: %d", status)
		}
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi)+"/confirm", "")
		if got := a.e.Spend(t, a.keyID).Total; got != 50*keybrake.MicrosPerUSD {
			t.Fatalf("counted %s, want the 50.00 that moved", got)
		}
		e.Server.FlushAudit()
		events, _, err := e.Store.FindEvents(context.Background(), keybrake.EventFilter{KeyID: a.keyID, Limit: 50})
		if err != nil {
			t.Fatal(err)
		}
		alarmed := false
		for _, ev := range events {
			alarmed = alarmed || strings.Contains(ev.Reason, "ALARM")
		}
		if !alarmed {
			t.Fatal("no ALARM in the audit log")
		}
		a.wantMoneyComplete(t, 10000)
	})
}

// Invoices that would collect by themselves are not free.
func TestMoneyComplete_SelfCollectingInvoices(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":10,"allowed_endpoints":["*"]}`)
		_, cus := directPost(t, e, "/v1/customers", "invoice_settings[default_payment_method]=pm_card_visa")
		a.must(t, 403, "POST", "/v1/invoiceitems", "customer="+id(cus)+"&amount=500000&currency=usd")
		a.must(t, 403, "POST", "/v1/invoices", "customer="+id(cus)+"&auto_advance=true")
		a.must(t, 403, "POST", "/v1/invoices", "customer="+id(cus))
		a.must(t, 403, "POST", "/v1/invoices", "customer="+id(cus)+"&auto_advance=false")
		inv := a.must(t, 200, "POST", "/v1/invoices", "customer="+id(cus)+"&auto_advance=false&pending_invoice_items_behavior=exclude")
		a.must(t, 403, "POST", "/v1/invoices/"+id(inv), "auto_advance=true")
		a.must(t, 403, "POST", "/v1/invoices/"+id(inv)+"/add_lines", "lines[0][amount]=500000")
		a.must(t, 403, "POST", "/v1/invoices/"+id(inv)+"/finalize", "")
		a.must(t, 403, "POST", "/v1/invoices/"+id(inv)+"/pay", "")
		e.Sim.Advance(3 * time.Hour)
		a.wantMoneyComplete(t, 1000)
	})
}

// Class 4: scope holes.
func TestMoneyComplete_CustomerScope(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		_, mine := directPost(t, e, "/v1/customers", "source=tok_visa")
		_, other := directPost(t, e, "/v1/customers", "source=tok_visa")
		a := newAttacker(t, e, fmt.Sprintf(`{"total_usd_cap":100,"allowed_endpoints":["*"],"allowed_customers":[%q]}`, id(mine)))
		a.must(t, 403, "POST", "/v1/payment_intents", "amount=500&currency=usd&payment_method=pm_card_visa")
		_, theirs := directPost(t, e, "/v1/charges", "amount=900&currency=usd&customer="+id(other))
		a.must(t, 403, "POST", "/v1/refunds", "charge="+id(theirs))
		a.must(t, 403, "POST", "/v1/charges/"+id(theirs)+"/refunds", "")
		_, outside := directPost(t, e, "/v1/payment_intents", "amount=700&currency=usd&payment_method=pm_card_visa")
		a.must(t, 403, "POST", "/v1/payment_intents/"+id(outside)+"/confirm", "")
		_, otherPI := directPost(t, e, "/v1/payment_intents", "amount=700&currency=usd&payment_method=pm_card_visa&customer="+id(other))
		a.must(t, 403, "POST", "/v1/payment_intents/"+id(otherPI)+"/confirm", "")
		// The allowed customer still works end to end.
		ch := a.must(t, 200, "POST", "/v1/charges", "amount=500&currency=usd&customer="+id(mine))
		a.must(t, 200, "POST", "/v1/refunds", "charge="+id(ch))
	})
}

func TestMoneyComplete_AccountScope(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"],"allowed_accounts":["acct_1"]}`)
		// The account in the path is checked, and payout destinations are not free.
		a.must(t, 403, "POST", "/v1/accounts/acct_2", "metadata[a]=b", Header{"Stripe-Account", "acct_1"})
		a.must(t, 403, "POST", "/v1/accounts/acct_1", "external_account=btok_1", Header{"Stripe-Account", "acct_1"})
		a.must(t, 403, "POST", "/v1/accounts/acct_1/external_accounts", "external_account=btok_1", Header{"Stripe-Account", "acct_1"})
		// Stripe-Context selects the account too, and cannot contradict Stripe-Account.
		a.must(t, 403, "POST", "/v1/charges", "amount=100&currency=usd&source=tok_visa", Header{"Stripe-Context", "acct_2"})
		a.must(t, 400, "POST", "/v1/charges", "amount=100&currency=usd&source=tok_visa", Header{"Stripe-Context", "acct_2"}, Header{"Stripe-Account", "acct_1"})
		a.must(t, 400, "POST", "/v1/charges", "amount=100&currency=usd&source=tok_visa", Header{"Stripe-Account", "acct_1"}, Header{"Stripe-Account", "acct_2"})
		if n := len(e.Sim.GroundTruth().Charges); n != 0 {
			t.Fatalf("%d charges reached the simulator", n)
		}
	})
}

// directPost sends a form request straight to the simulator with the real
// secret: somebody acting outside keybrake.
func directPost(t *testing.T, e *Env, path, body string) (int, map[string]any) {
	t.Helper()
	resp, out := doURL(t, "POST", e.SimURL+path, body,
		Header{"Authorization", "Bearer sk_test_upstream_secret_do_not_leak"},
		Header{"Content-Type", "application/x-www-form-urlencoded"})
	var v map[string]any
	_ = json.Unmarshal(out, &v)
	return resp.StatusCode, v
}

// Stripe scopes Idempotency-Keys by its secret, which every vault key
// shares: a key reused by another vault key gets Stripe's saved answer to
// the first. keybrake neither counts it nor hands the other client's object
// over.
func TestMoneyComplete_IdempotencyKeyAcrossVaultKeys(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":50,"allowed_endpoints":["*"]}`)
		b := newAttacker(t, e, `{"total_usd_cap":50,"allowed_endpoints":["*"]}`)
		ch := a.must(t, 200, "POST", "/v1/charges", "amount=1500&currency=usd&source=tok_visa", Header{"Idempotency-Key", "order-42"})
		v := b.must(t, 400, "POST", "/v1/charges", "amount=1500&currency=usd&source=tok_visa", Header{"Idempotency-Key", "order-42"})
		if strings.Contains(fmt.Sprint(v), id(ch)) {
			t.Fatalf("key B received key A's charge: %v", v)
		}
		if got := e.Spend(t, b.keyID).Total; got != 0 {
			t.Fatalf("key B counts %s for a charge it did not make", got)
		}
		// A's own retry is still a replay, counted once.
		if again := a.must(t, 200, "POST", "/v1/charges", "amount=1500&currency=usd&source=tok_visa", Header{"Idempotency-Key", "order-42"}); id(again) != id(ch) {
			t.Fatalf("A's retry got %s, want its own %s", id(again), id(ch))
		}
		if got := e.Spend(t, a.keyID).Total; got != 15*keybrake.MicrosPerUSD {
			t.Fatalf("key A counts %s, want 15.00", got)
		}
		a.wantMoneyComplete(t, 5000)
	})
}
