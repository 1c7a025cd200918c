package http_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/storetest"
)

// mint asks path for a child with body under bearer and returns the status
// and the decoded answer.
func mint(t *testing.T, e *Env, path, bearer, body string) (int, map[string]any) {
	t.Helper()
	resp, out := e.Do(t, "POST", path, body, map[string]string{"Authorization": "Bearer " + bearer, "Content-Type": "application/json"})
	var v map[string]any
	json.Unmarshal(out, &v)
	return resp.StatusCode, v
}

func TestMintChild(t *testing.T) {
	e := MustOpen(t)
	parentID, parentSecret := e.CreateKey(t, `{"label":"billing","monthly_usd_cap":500,"total_usd_cap":1000,"mint":true,"allowed_endpoints":["charges.create","/v1/refunds"]}`)
	_, plainSecret := e.CreateKey(t, `{"label":"no mint","total_usd_cap":100}`)

	t.Run("OK", func(t *testing.T) {
		status, v := mint(t, e, "/vault/keys/self/children", parentSecret, `{"label":"period 2026-11","total_usd_cap":200}`)
		if status != http.StatusCreated || v["parent_id"] != parentID || v["vault_key"] == nil || v["escrow_reservation_id"] == nil {
			t.Fatalf("self mint: %d %v", status, v)
		}
		// Defaults: the parent's scope and the end of the month it caps.
		if v["expires_at"] != "2026-12-01T00:00:00Z" || v["monthly_usd_cap"] == nil {
			t.Fatalf("child defaults: %v", v)
		}
		child := v["vault_key"].(string)
		sc := e.Stripe(child)
		if _, err := sc.V1Charges.Create(context.Background(), chargeParams(150_00, "usd")); err != nil {
			t.Fatal(err)
		}
		_, err := sc.V1Charges.Create(context.Background(), chargeParams(51_00, "usd"))
		if se := StripeErr(t, err, http.StatusTooManyRequests); se.Code != "keybrake_spend_cap_exceeded" {
			t.Fatalf("child past its escrow: %+v", se)
		}
		if sp := e.Spend(t, parentID); sp.Month != storetest.USD(200) {
			t.Fatalf("parent counts %+v; want the $200 escrow, not the child's spend on top", sp)
		}
		if _, err := sc.V1Payouts.Create(context.Background(), &stripego.PayoutCreateParams{Amount: stripego.Int64(100), Currency: stripego.String("usd")}); err == nil {
			t.Fatal("child called an operation its parent may not")
		}
	})
	t.Run("Admin", func(t *testing.T) {
		resp, out := e.Admin(t, "POST", "/vault/keys/"+parentID+"/children", `{"total_usd_cap":100,"allowed_endpoints":["/v1/refunds/rf_1"]}`)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("admin mint: %d %s", resp.StatusCode, out)
		}
	})
	t.Run("ErrOverCap", func(t *testing.T) {
		status, v := mint(t, e, "/vault/keys/self/children", parentSecret, `{"total_usd_cap":200.000001}`)
		if status != http.StatusTooManyRequests {
			t.Fatalf("mint past the parent's monthly cap: %d %v", status, v)
		}
	})
	t.Run("ErrWider", func(t *testing.T) {
		for body, param := range map[string]string{
			`{"total_usd_cap":10,"allowed_endpoints":["payouts.create"]}`:         "allowed_endpoints",
			`{"total_usd_cap":10,"allowed_endpoints":["*"]}`:                      "allowed_endpoints",
			`{"total_usd_cap":10,"expires_at":"2026-12-02T00:00:00Z"}`:            "expires_at",
			`{"total_usd_cap":10,"monthly_usd_cap":null}`:                         "monthly_usd_cap",
			`{"total_usd_cap":10,"allow_unpriced":true}`:                          "allow_unpriced",
			`{"total_usd_cap":10,"guards":{}}`:                                    "guards",
			`{"label":"no budget"}`:                                               "total_usd_cap",
			`{"total_usd_cap":10,"mint":"yes"}`:                                   "mint",
			`{"total_usd_cap":10,"approval":{"above_usd":1,"every":true}}`:        "approval",
			`{"total_usd_cap":10,"approval":{"above_usd":1,"ttl_seconds":90000}}`: "approval.ttl_seconds",
		} {
			status, v := mint(t, e, "/vault/keys/self/children", parentSecret, body)
			errv, _ := v["error"].(map[string]any)
			if status != http.StatusBadRequest || errv["param"] != param {
				t.Errorf("%s: %d %v, want 400 on %s", body, status, v, param)
			}
		}
	})
	t.Run("ErrNoMintPermission", func(t *testing.T) {
		if status, v := mint(t, e, "/vault/keys/self/children", plainSecret, `{"total_usd_cap":1}`); status != http.StatusForbidden {
			t.Fatalf("mint without permission: %d %v", status, v)
		}
		if status, _ := mint(t, e, "/vault/keys/self/children", "vault_key_nope", `{"total_usd_cap":1}`); status != http.StatusUnauthorized {
			t.Fatalf("mint with an unknown key: %d", status)
		}
		if status, _ := mint(t, e, "/vault/keys/self/children", adminToken, `{"total_usd_cap":1}`); status != http.StatusUnauthorized {
			t.Fatalf("the admin token is not a vault key: %d", status)
		}
	})
	t.Run("ErrWidenChild", func(t *testing.T) {
		_, v := mint(t, e, "/vault/keys/self/children", parentSecret, `{"total_usd_cap":5}`)
		id := v["id"].(string)
		for _, body := range []string{`{"total_usd_cap":6}`, `{"allowed_endpoints":["*"]}`, `{"expires_at":null}`} {
			if resp, out := e.Admin(t, "PATCH", "/vault/keys/"+id, body); resp.StatusCode != http.StatusBadRequest {
				t.Errorf("widening a child with %s: %d %s", body, resp.StatusCode, out)
			}
		}
		if resp, out := e.Admin(t, "PATCH", "/vault/keys/"+id, `{"total_usd_cap":4,"label":"narrower"}`); resp.StatusCode != http.StatusOK {
			t.Errorf("narrowing a child: %d %s", resp.StatusCode, out)
		}
	})
	t.Run("RevokeReturns", func(t *testing.T) {
		before := e.Spend(t, parentID).Month
		_, v := mint(t, e, "/vault/keys/self/children", parentSecret, `{"total_usd_cap":40}`)
		id, secret := v["id"].(string), v["vault_key"].(string)
		if _, err := e.Stripe(secret).V1Charges.Create(context.Background(), chargeParams(15_00, "usd")); err != nil {
			t.Fatal(err)
		}
		if resp, _ := e.Admin(t, "POST", "/vault/keys/"+id+"/revoke", ""); resp.StatusCode != http.StatusOK {
			t.Fatal("revoke")
		}
		if got := e.Spend(t, parentID).Month; got != before+storetest.USD(15) {
			t.Fatalf("parent after the child's revocation: %s, want %s", got, before+storetest.USD(15))
		}
	})
}

// TestApproval runs an agent whose charges above $100 wait for a person,
// with stripe-go as the client.
func TestApproval(t *testing.T) {
	e := MustOpen(t)
	keyID, secret := e.CreateKey(t, `{"label":"agent","total_usd_cap":1000,"approval":{"above_usd":100,"operations":["refunds.create"]}}`)
	sc := e.Stripe(secret)
	ctx := context.Background()
	big := func(idem string, cents int64) error {
		p := chargeParams(cents, "usd")
		p.SetIdempotencyKey(idem)
		_, err := sc.V1Charges.Create(ctx, p)
		return err
	}
	approvalOf := func(err error) string {
		t.Helper()
		se := StripeErr(t, err, http.StatusPaymentRequired)
		if se.Code != "keybrake_approval_required" || se.Type != stripego.ErrorTypeInvalidRequest {
			t.Fatalf("want keybrake_approval_required, got %+v", se)
		}
		i := strings.Index(se.Msg, "/console/approvals/apr_")
		if i < 0 {
			t.Fatalf("no console link in %q", se.Msg)
		}
		return strings.TrimRight(strings.Fields(se.Msg[i+len("/console/approvals/"):])[0], ".,")
	}

	if err := big("small", 50_00); err != nil {
		t.Fatalf("below the threshold: %v", err)
	}
	id := approvalOf(big("ik-150", 150_00))
	if again := approvalOf(big("ik-150", 150_00)); again != id {
		t.Fatalf("retry made a second approval %s (first %s)", again, id)
	}
	if n, _ := e.SucceededCents("usd"); n != 1 || e.Spend(t, keyID).Total != storetest.USD(50) {
		t.Fatalf("pending approval forwarded or reserved: %d charges, %+v", n, e.Spend(t, keyID))
	}
	if err := big("ik-150", 151_00); StripeErr(t, err, http.StatusBadRequest).Param != "Idempotency-Key" {
		t.Fatalf("another body under the approval's key: %v", err)
	}
	if err := big("", 150_00); StripeErr(t, err, http.StatusBadRequest).Param != "Idempotency-Key" {
		t.Fatalf("no Idempotency-Key: %v", err)
	}

	resp, out := e.Admin(t, "GET", "/vault/approvals?state=pending", "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(out), id) {
		t.Fatalf("pending approvals: %d %s", resp.StatusCode, out)
	}
	resp, out = e.Admin(t, "POST", "/vault/approvals/"+id+"/approve", "")
	var a keybrake.Approval
	json.Unmarshal(out, &a)
	if resp.StatusCode != http.StatusOK || a.State != keybrake.ApprovalApproved || a.DecidedBy != "env" {
		t.Fatalf("approve: %d %s", resp.StatusCode, out)
	}
	if resp, _ := e.Admin(t, "POST", "/vault/approvals/"+id+"/deny", ""); resp.StatusCode != http.StatusConflict {
		t.Fatalf("deny after approve: %d", resp.StatusCode)
	}
	for range 3 { // the approved retry goes through once; further retries are replays
		if err := big("ik-150", 150_00); err != nil {
			t.Fatalf("approved retry: %v", err)
		}
	}
	if n, cents := e.SucceededCents("usd"); n != 2 || cents != 200_00 || e.Spend(t, keyID).Total != storetest.USD(200) {
		t.Fatalf("after the approved retry: %d charges, %d cents, %+v", n, cents, e.Spend(t, keyID))
	}
	resp, out = e.Admin(t, "GET", "/vault/approvals/"+id, "")
	if !strings.Contains(string(out), `"state": "used"`) {
		t.Fatalf("approval after use: %s", out)
	}

	denied := approvalOf(big("ik-300", 300_00))
	e.Admin(t, "POST", "/vault/approvals/"+denied+"/deny", "")
	if err := big("ik-300", 300_00); StripeErr(t, err, http.StatusForbidden).Code != "keybrake_forbidden" {
		t.Fatalf("denied retry: %v", err)
	}

	expired := approvalOf(big("ik-late", 120_00))
	e.Clock.Advance(keybrake.DefaultApprovalTTL)
	if resp, _ := e.Admin(t, "POST", "/vault/approvals/"+expired+"/approve", ""); resp.StatusCode != http.StatusConflict {
		t.Fatalf("approving an expired approval: %d", resp.StatusCode)
	}
	if err := big("ik-late", 120_00); StripeErr(t, err, http.StatusBadRequest).Param != "Idempotency-Key" {
		t.Fatalf("retry after expiry: %v", err)
	}
	if n, _ := e.SucceededCents("usd"); n != 2 {
		t.Fatalf("unapproved requests forwarded: %d charges", n)
	}
	e.Server.FlushAudit()
	resp, out = e.Admin(t, "GET", "/vault/audit", "")
	if !strings.Contains(string(out), "approval.approve") || !strings.Contains(string(out), "approval.deny") {
		t.Fatalf("admin audit lacks the decisions: %s", out)
	}
}
