package http_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/keybrake/keybrake/stripesim"
)

// TestAttackLifecycle_OwnSuspensionUndoneByParentResume: an operator
// suspended a parent key (an incident), found the child key at fault and
// suspended it too (200, "suspended"), then resumed the parent. The child
// had been suspended by the parent's cascade, so the operator's own
// suspension of it changed nothing: it stayed marked suspended_by the
// parent, and the parent's resume resumed it with the rest. Its holder
// charged $5.00 after the operator's suspension, which no one lifted.
// A suspension of a key that only its ancestor's cascade had suspended now
// makes the suspension the key's own (and of its descendants the cascade
// took), so only resuming it by hand lifts it.
func TestAttackLifecycle_OwnSuspensionUndoneByParentResume(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		parentID, parentSecret := e.CreateKey(t, `{"total_usd_cap":100,"allowed_endpoints":["charges.create","/v1/keys"],"mint":true}`)
		status, v := mint(t, e, "/vault/keys/self/children", parentSecret, `{"total_usd_cap":50,"mint":true}`)
		if status != http.StatusCreated {
			t.Fatalf("mint: %d %v", status, v)
		}
		child := &attacker{e: e, keyID: v["id"].(string), secret: v["vault_key"].(string)}
		status, v = mint(t, e, "/vault/keys/self/children", child.secret, `{"total_usd_cap":20}`)
		if status != http.StatusCreated {
			t.Fatalf("mint a grandchild: %d %v", status, v)
		}
		grand := &attacker{e: e, keyID: v["id"].(string), secret: v["vault_key"].(string)}
		charge := "amount=500&currency=usd&source=tok_visa"
		child.must(t, http.StatusOK, "POST", "/v1/charges", charge)

		admin := func(path string) {
			t.Helper()
			if resp, out := e.Admin(t, "POST", path, ""); resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: %d %s", path, resp.StatusCode, out)
			}
		}
		admin("/vault/keys/" + parentID + "/suspend") // the incident: everything under the parent stops
		admin("/vault/keys/" + child.keyID + "/suspend")
		admin("/vault/keys/" + parentID + "/resume") // the parent is cleared; the child is not
		before := len(e.Sim.GroundTruth().Charges)
		if status, v := child.call(t, "POST", "/v1/charges", charge); status != http.StatusForbidden && status != http.StatusUnauthorized {
			t.Errorf("the suspended child's charge after its parent resumed: %d %v, want 403", status, v)
		}
		if status, v := grand.call(t, "POST", "/v1/charges", charge); status != http.StatusForbidden && status != http.StatusUnauthorized {
			t.Errorf("the suspended child's child charged after the root resumed: %d %v, want 403", status, v)
		}
		if n := len(e.Sim.GroundTruth().Charges) - before; n != 0 {
			t.Fatalf("%d charges by keys an operator suspended and never resumed", n)
		}
		// Resuming the child by hand lifts its suspension, and its child's.
		admin("/vault/keys/" + child.keyID + "/resume")
		child.must(t, http.StatusOK, "POST", "/v1/charges", charge)
		grand.must(t, http.StatusOK, "POST", "/v1/charges", charge)
	})
}

// TestAttackApproval_UsedApprovalOutlivesItsTTL: an approval lives
// ttl_seconds (here one minute, what the approver saw as "Expires"), and
// the first approved retry marks it used. When Stripe refused that retry
// before acting on it (a 429 rate limit, which the key holder can reach
// with free reads; Stripe saves no answer), its reservation was released
// and the used approval covered the same request forever: two hours after
// the approval expired, the holder's retry was reserved anew and charged
// $50.00. A used approval now covers a request forwarded anew only until
// it expires; past it only a replay of what Stripe did (or saved) goes
// through, and the rest must be asked for again.
func TestAttackApproval_UsedApprovalOutlivesItsTTL(t *testing.T) {
	e := MustOpen(t)
	a := newAttacker(t, e, `{"total_usd_cap":1000,"allowed_endpoints":["charges.create"],"approval":{"above_usd":10,"ttl_seconds":60}}`)
	idem := Header{"Idempotency-Key", "charge-50"}
	charge := "amount=5000&currency=usd&source=tok_visa"
	v := a.must(t, http.StatusPaymentRequired, "POST", "/v1/charges", charge, idem)
	apr, _ := v["error"].(map[string]any)["keybrake"].(map[string]any)["approval_id"].(string)
	if resp, out := e.Admin(t, "POST", "/vault/approvals/"+apr+"/approve", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("approve %s: %d %s", apr, resp.StatusCode, out)
	}
	if _, err := e.Sim.AddFault(stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultFailBefore, Status: 429, Count: 1}); err != nil {
		t.Fatal(err)
	}
	a.must(t, http.StatusTooManyRequests, "POST", "/v1/charges", charge, idem)
	e.Clock.Set(e.Clock.Now().Add(2 * time.Hour))
	if status, v := a.call(t, "POST", "/v1/charges", charge, idem); status == http.StatusOK {
		t.Errorf("a charge two hours after its one-minute approval expired: %d %v", status, v)
	}
	if cents := e.movedCents(); cents != 0 {
		t.Fatalf("%d cents moved past an expired approval", cents)
	}
	// Asked again under a new key, it waits for a person again.
	a.must(t, http.StatusPaymentRequired, "POST", "/v1/charges", charge, Header{"Idempotency-Key", "charge-50-again"})
}

// TestAttackApproval_UnpricedUsedApprovalOutlivesItsTTL: an unpriced
// operation's approval is marked used when its retry is forwarded, with no
// reservation, and covered retries for 23 hours after it was asked for,
// whatever its ttl_seconds, as replays of what Stripe saved. A retry that
// Stripe refused before acting (a 429) saved nothing, so two hours after
// a one-minute approval expired the holder's retry made the payment link,
// uncounted. A used unpriced approval now covers retries only until it
// expires.
func TestAttackApproval_UnpricedUsedApprovalOutlivesItsTTL(t *testing.T) {
	e := MustOpen(t)
	_, secret := e.CreateKey(t, `{"total_usd_cap":100,"allowed_endpoints":["*"],"allow_unpriced":true,"approval":{"operations":["payment_links.create"],"ttl_seconds":60}}`)
	a := &attacker{e: e, secret: secret}
	price := a.must(t, 200, "POST", "/v1/prices", "unit_amount=5000&currency=usd&product_data[name]=x")
	link := "line_items[0][price]=" + id(price) + "&line_items[0][quantity]=1"
	idem := Header{"Idempotency-Key", "link-1"}
	v := a.must(t, http.StatusPaymentRequired, "POST", "/v1/payment_links", link, idem)
	apr, _ := v["error"].(map[string]any)["keybrake"].(map[string]any)["approval_id"].(string)
	if resp, out := e.Admin(t, "POST", "/vault/approvals/"+apr+"/approve", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("approve: %d %s", resp.StatusCode, out)
	}
	if _, err := e.Sim.AddFault(stripesim.Fault{Method: "POST", Path: "/v1/payment_links", Mode: stripesim.FaultFailBefore, Status: 429, Count: 1}); err != nil {
		t.Fatal(err)
	}
	a.must(t, http.StatusTooManyRequests, "POST", "/v1/payment_links", link, idem)
	e.Clock.Advance(2 * time.Hour)
	e.Sim.Advance(2 * time.Hour)
	if status, v := a.call(t, "POST", "/v1/payment_links", link, idem); status == http.StatusOK {
		t.Errorf("a payment link two hours after its one-minute approval expired: %d %v", status, v)
	}
	if n := len(e.Sim.GroundTruth().PaymentLinks); n != 0 {
		t.Fatalf("%d payment links made past an expired approval", n)
	}
}

// TestAttackApproval_UsedCaptureApprovalOutlivesItsTTL: on an object the
// key holds, an operation the policy names (a capture) waits for a person
// with nothing to raise, and its approval is marked used before the
// capture is forwarded. Stripe refused the approved capture before acting
// (a 429), and two hours after the one-minute approval expired the
// holder's retry captured $50.00. The money was counted (the hold), but
// not approved: the person approved a capture before the expiry shown.
func TestAttackApproval_UsedCaptureApprovalOutlivesItsTTL(t *testing.T) {
	e := MustOpen(t)
	a := newAttacker(t, e, `{"total_usd_cap":1000,"allowed_endpoints":["*"],"approval":{"operations":["payment_intents.capture"],"ttl_seconds":60}}`)
	pi := a.must(t, 200, "POST", "/v1/payment_intents", "amount=5000&currency=usd&payment_method=pm_card_visa&confirm=true&capture_method=manual")
	capture := "/v1/payment_intents/" + id(pi) + "/capture"
	idem := Header{"Idempotency-Key", "capture-1"}
	v := a.must(t, http.StatusPaymentRequired, "POST", capture, "", idem)
	apr, _ := v["error"].(map[string]any)["keybrake"].(map[string]any)["approval_id"].(string)
	if resp, out := e.Admin(t, "POST", "/vault/approvals/"+apr+"/approve", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("approve: %d %s", resp.StatusCode, out)
	}
	if _, err := e.Sim.AddFault(stripesim.Fault{Method: "POST", Path: capture, Mode: stripesim.FaultFailBefore, Status: 429, Count: 1}); err != nil {
		t.Fatal(err)
	}
	a.must(t, http.StatusTooManyRequests, "POST", capture, "", idem)
	e.Clock.Advance(2 * time.Hour)
	e.Sim.Advance(2 * time.Hour)
	if status, v := a.call(t, "POST", capture, "", idem); status == http.StatusOK {
		t.Errorf("a capture two hours after its one-minute approval expired: %d %v", status, v["status"])
	}
	if cents := e.movedCents(); cents != 0 {
		t.Fatalf("%d cents captured past an expired approval", cents)
	}
}
