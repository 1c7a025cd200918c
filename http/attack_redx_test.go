package http_test

import (
	"net/http"
	"testing"
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
