package http_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripesim"
)

// An uncapped key forwarded an amount in a currency with no exchange rate
// untracked: with no cap there is nothing to count it against. But the
// key's guards count its reservations too, and an untracked request makes
// none, so a key limited to one charge a day by a velocity limit (or
// guarded against duplicates, or by a breaker) made as many gbp charges as
// it liked. A guarded key must refuse an amount it cannot count.
func TestAttackRedteam_UntrackedCurrencySkipsGuards(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"allowed_endpoints":["*"],"guards":{"velocity":[{"name":"one_a_day","per":"key","operations":["charges.create"],"limit":1,"window_seconds":86400}]}}`)
		a.must(t, 200, "POST", "/v1/charges", "amount=5000&currency=usd&source=tok_visa")
		for range 3 {
			a.call(t, "POST", "/v1/charges", "amount=5000&currency=gbp&source=tok_visa")
		}
		if n := len(e.Sim.GroundTruth().Charges); n != 1 {
			t.Fatalf("a key limited to one charge a day made %d", n)
		}
	})
}

// A key's approval policy names operations that wait for a person whatever
// they move. A capture of an authorization the key already held was
// settled against the hold (nothing to raise) and went upstream without
// the approval step: a key whose policy names payment_intents.capture and
// charges.capture captured both at once. Nothing else can capture an
// authorization without the secret key, so the approval was the only gate.
func TestAttackRedteam_ApprovedOperationOnHeldObject(t *testing.T) {
	e := MustOpen(t)
	keyID, secret := e.CreateKey(t, `{"total_usd_cap":100,"allowed_endpoints":["*"],"approval":{"operations":["payment_intents.capture","charges.capture"]}}`)
	sc := e.Stripe(secret)
	ctx := t.Context()
	p := &stripego.PaymentIntentCreateParams{Amount: stripego.Int64(2000), Currency: stripego.String("usd"),
		PaymentMethod: stripego.String("pm_card_visa"), Confirm: stripego.Bool(true), CaptureMethod: stripego.String("manual")}
	pi, err := sc.V1PaymentIntents.Create(ctx, p)
	if err != nil || pi.Status != stripego.PaymentIntentStatusRequiresCapture {
		t.Fatalf("authorize: %v %+v", err, pi)
	}
	ch, err := sc.V1Charges.Create(ctx, &stripego.ChargeCreateParams{Amount: stripego.Int64(1000), Currency: stripego.String("usd"),
		Source: &stripego.PaymentSourceSourceParams{Token: stripego.String("tok_visa")}, Capture: stripego.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	capturePI := func() error {
		cp := &stripego.PaymentIntentCaptureParams{}
		cp.SetIdempotencyKey("capture-pi")
		_, err := sc.V1PaymentIntents.Capture(ctx, pi.ID, cp)
		return err
	}
	captureCharge := func() error {
		cp := &stripego.ChargeCaptureParams{}
		cp.SetIdempotencyKey("capture-ch")
		_, err := sc.V1Charges.Capture(ctx, ch.ID, cp)
		return err
	}
	var ids []string
	for _, capture := range []func() error{capturePI, captureCharge} {
		se := StripeErr(t, capture(), http.StatusPaymentRequired)
		if se.Code != "keybrake_approval_required" {
			t.Fatalf("capture without approval: %+v", se)
		}
		i := strings.Index(se.Msg, "/console/approvals/apr_")
		ids = append(ids, strings.TrimRight(strings.Fields(se.Msg[i+len("/console/approvals/"):])[0], ".,"))
	}
	if n, _ := capturedCents(e); n != 0 {
		t.Fatalf("%d captures went upstream while waiting for approval", n)
	}
	for _, id := range ids {
		if resp, out := e.Admin(t, "POST", "/vault/approvals/"+id+"/approve", ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("approve %s: %d %s", id, resp.StatusCode, out)
		}
	}
	for _, capture := range []func() error{capturePI, captureCharge} {
		if err := capture(); err != nil {
			t.Fatalf("approved capture: %v", err)
		}
	}
	if n, cents := capturedCents(e); n != 2 || cents != 3000 || e.Spend(t, keyID).Total != 30*keybrake.MicrosPerUSD {
		t.Fatalf("after approval: %d captures, %d cents, %+v", n, cents, e.Spend(t, keyID))
	}
	for _, id := range ids {
		if _, out := e.Admin(t, "GET", "/vault/approvals/"+id, ""); !strings.Contains(string(out), `"state": "used"`) {
			t.Fatalf("approval after the capture: %s", out)
		}
	}
}

// capturedCents is the ground truth of captured charges: how many, and
// their captured cents.
func capturedCents(e *Env) (n int, cents int64) {
	for _, c := range e.Sim.GroundTruth().Charges {
		if c.Captured {
			n++
			cents += c.AmountCaptured
		}
	}
	return n, cents
}

// An uncapped key tracks its spend (the budget view, drift, a cap an
// operator adds later). Before pricing, keybrake looked the currency up in
// the rate table as sent, and "USD" (which Stripe lower-cases) has no entry:
// the charge went upstream untracked, as if its currency had no rate. A
// cap set afterwards then started from an undercounted day.
func TestAttackRedteam_UpperCaseCurrencyUntracked(t *testing.T) {
	e := MustOpen(t)
	a := newAttacker(t, e, `{"allowed_endpoints":["*"]}`)
	for _, cur := range []string{"usd", "USD", "Usd", "EUR"} {
		a.must(t, 200, "POST", "/v1/charges", "amount=5000&currency="+cur+"&source=tok_visa")
	}
	// 3 × $50 and 50 eur at $1.08.
	if got, want := e.Spend(t, a.keyID).Total, keybrake.Micros(150+54)*keybrake.MicrosPerUSD; got != want {
		t.Fatalf("counted %s for $204.00 charged", got)
	}
}

// A payment intent created with confirm=true and a declined card is
// answered 402, and the reservation was released as for any refusal. But
// the intent exists: the error carries it (error.payment_intent), client
// secret included, in requires_payment_method, and the browser confirms it
// with another card and the publishable key, never passing keybrake. On a
// $10 key, each declined create was $10 confirmed and never counted.
func TestAttackRedteam_DeclinedIntentConfirmedInBrowser(t *testing.T) {
	declined := "amount=1000&currency=usd&payment_method=pm_card_chargeDeclined&confirm=true"
	t.Run("Answered", func(t *testing.T) {
		eachStore(t, func(t *testing.T, e *Env) {
			a := newAttacker(t, e, `{"total_usd_cap":10,"allowed_endpoints":["*"]}`)
			for range 3 {
				if status, v := a.call(t, "POST", "/v1/payment_intents", declined); status == http.StatusPaymentRequired {
					a.browserConfirm(t, leftIntent(t, v))
				}
			}
			a.wantMoneyComplete(t, 1000)
		})
	})
	t.Run("Resolved", func(t *testing.T) {
		eachStore(t, func(t *testing.T, e *Env) {
			a := newAttacker(t, e, `{"total_usd_cap":10,"allowed_endpoints":["*"]}`)
			for range 3 {
				e.Sim.AddFault(stripesim.Fault{Method: "POST", Path: "/v1/payment_intents", Mode: stripesim.FaultCutAfter, Count: 1})
				if status, _ := a.call(t, "POST", "/v1/payment_intents", declined); status != http.StatusBadGateway {
					continue
				}
				e.MustResolve(t)
				pis := e.Sim.GroundTruth().PaymentIntents
				pi := pis[len(pis)-1]
				a.browserConfirm(t, map[string]any{"id": pi.ID, "client_secret": pi.ClientSecret})
			}
			a.wantMoneyComplete(t, 1000)
		})
	})
}

// leftIntent returns the payment intent a Stripe error answer carries.
func leftIntent(t *testing.T, v map[string]any) map[string]any {
	t.Helper()
	e, _ := v["error"].(map[string]any)
	pi, _ := e["payment_intent"].(map[string]any)
	if id(pi) == "" {
		t.Fatalf("the decline carries no payment intent: %v", v)
	}
	return pi
}

// "operations: these operations need approval whatever their amount"
// (docs/approvals.md). The approval step ran only when reserving, and an
// unpriced operation (allowed by allow_unpriced) is never reserved: a key
// whose policy names payment_links.create made payment links at once.
func TestAttackRedteam_ApprovalOfUnpricedOperation(t *testing.T) {
	e := MustOpen(t)
	_, secret := e.CreateKey(t, `{"total_usd_cap":100,"allowed_endpoints":["*"],"allow_unpriced":true,"approval":{"operations":["payment_links.create"]}}`)
	a := &attacker{e: e, secret: secret}
	price := a.must(t, 200, "POST", "/v1/prices", "unit_amount=5000&currency=usd&product_data[name]=x")
	link := "line_items[0][price]=" + id(price) + "&line_items[0][quantity]=1"
	idem := Header{"Idempotency-Key", "link-1"}
	v := a.must(t, http.StatusPaymentRequired, "POST", "/v1/payment_links", link, idem)
	if n := len(e.Sim.GroundTruth().PaymentLinks); n != 0 {
		t.Fatalf("%d payment links made while waiting for approval", n)
	}
	apr, _ := v["error"].(map[string]any)["keybrake"].(map[string]any)["approval_id"].(string)
	if resp, out := e.Admin(t, "POST", "/vault/approvals/"+apr+"/approve", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("approve: %d %s", resp.StatusCode, out)
	}
	a.must(t, 200, "POST", "/v1/payment_links", link, idem)
	a.must(t, 200, "POST", "/v1/payment_links", link, idem) // a replay
	a.must(t, http.StatusPaymentRequired, "POST", "/v1/payment_links", link, Header{"Idempotency-Key", "link-2"})
	if n := len(e.Sim.GroundTruth().PaymentLinks); n != 1 {
		t.Fatalf("%d payment links for one approval", n)
	}
	// Past Stripe's idempotency window the approved key would make a new
	// link: the approval no longer covers it.
	e.Clock.Advance(24 * time.Hour)
	e.Sim.Advance(24 * time.Hour)
	a.must(t, http.StatusBadRequest, "POST", "/v1/payment_links", link, idem)
	if n := len(e.Sim.GroundTruth().PaymentLinks); n != 1 {
		t.Fatalf("%d payment links for one approval, a day later", n)
	}
}

// refunds.create, charges.refund and charges.refunds.create are one
// operation under three names (the last two are Stripe's legacy paths, on
// /v1/charges, which a "*" or "/v1/charges" allowlist covers). A policy
// naming refunds.create (approval, field rules, velocity limits) did not
// apply to the others: the README's own approval example let every
// refund through unapproved by POST /v1/charges/{id}/refund.
func TestAttackRedteam_OperationAliases(t *testing.T) {
	e := MustOpen(t)
	for _, tt := range []struct {
		policy string
		status int
	}{
		{`"approval":{"operations":["refunds.create"]}`, http.StatusPaymentRequired},
		{`"guards":{"rules":[{"name":"small_refunds","operations":["refunds.create"],"expr":"has(amount) && amount <= 100"}]}`, http.StatusForbidden},
	} {
		keyID, secret := e.CreateKey(t, `{"total_usd_cap":100,"allowed_endpoints":["*"],`+tt.policy+`}`)
		a := &attacker{e: e, keyID: keyID, secret: secret}
		ch := a.must(t, 200, "POST", "/v1/charges", "amount=5000&currency=usd&source=tok_visa")
		for i, path := range []string{"/v1/charges/" + id(ch) + "/refund", "/v1/charges/" + id(ch) + "/refunds"} {
			if status, v := a.call(t, "POST", path, "amount=5000", Header{"Idempotency-Key", fmt.Sprint("refund-", i)}); status != tt.status {
				t.Errorf("%s under %s: %d %v, want %d", path, tt.policy, status, v, tt.status)
			}
		}
	}
	keyID, _ := e.CreateKey(t, `{"total_usd_cap":100,"guards":{"velocity":[{"name":"one_refund","per":"key","operations":["refunds.create"],"limit":1,"window_seconds":3600}]}}`)
	if _, out := e.Admin(t, "GET", "/vault/keys/"+keyID, ""); !strings.Contains(string(out), `"charges.refunds.create"`) {
		t.Fatalf("the velocity limit does not name refunds.create's aliases: %s", out)
	}
}

// A child key is never wider than its parent, checked when it is minted.
// An admin who then narrows the parent (takes payment intents away, limits
// it to eur) left the child as wide as the parent had been: the child kept
// confirming usd payment intents the parent itself could no longer make.
func TestAttackRedteam_ChildOfNarrowedParent(t *testing.T) {
	e := MustOpen(t)
	parentID, parentSecret := e.CreateKey(t, `{"total_usd_cap":50,"allowed_endpoints":["*"],"mint":true}`)
	status, v := mint(t, e, "/vault/keys/self/children", parentSecret, `{"total_usd_cap":10}`)
	if status != http.StatusCreated {
		t.Fatalf("mint: %d %v", status, v)
	}
	childID, _ := v["id"].(string)
	child := &attacker{e: e, keyID: childID, secret: v["vault_key"].(string)}
	intent := "amount=500&currency=usd&payment_method=pm_card_visa&confirm=true"
	child.must(t, 200, "POST", "/v1/payment_intents", intent)
	if resp, out := e.Admin(t, "PATCH", "/vault/keys/"+parentID, `{"allowed_endpoints":["charges.create"],"allowed_currencies":["eur"]}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("narrow the parent: %d %s", resp.StatusCode, out)
	}
	child.must(t, http.StatusForbidden, "POST", "/v1/payment_intents", intent)
	child.must(t, http.StatusForbidden, "POST", "/v1/charges", "amount=500&currency=usd&source=tok_visa")
	if n := len(e.Sim.GroundTruth().PaymentIntents); n != 1 {
		t.Fatalf("%d intents: the child moved money its narrowed parent may not", n)
	}
	// Narrowed to match, the child works again within the parent's policy.
	if resp, out := e.Admin(t, "PATCH", "/vault/keys/"+childID, `{"allowed_endpoints":["charges.create"],"allowed_currencies":["eur"]}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("narrow the child: %d %s", resp.StatusCode, out)
	}
	child.must(t, 200, "POST", "/v1/charges", "amount=400&currency=eur&source=tok_visa")
}
