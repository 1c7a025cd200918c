package http_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

func chargeAs(t *testing.T, e *Env, secret string) int {
	t.Helper()
	resp, _ := e.Do(t, "POST", "/v1/charges", "amount=100&currency=usd&source=tok_visa", map[string]string{"Authorization": "Bearer " + secret})
	return resp.StatusCode
}

func TestKeyLifecycle(t *testing.T) {
	t.Run("RotateWithGrace", func(t *testing.T) {
		e := MustOpen(t)
		id, old := e.CreateKey(t, `{"total_usd_cap":10,"allowed_endpoints":["charges.create","charges.retrieve"]}`)
		if st := chargeAs(t, e, old); st != 200 {
			t.Fatalf("charge before rotation: %d", st)
		}
		resp, body := e.Admin(t, "POST", "/vault/keys/"+id+"/rotate", `{"grace_period":"1h"}`)
		var v struct {
			ID       string `json:"id"`
			VaultKey string `json:"vault_key"`
			Prev     string `json:"previous_secret_expires_at"`
		}
		json.Unmarshal(body, &v)
		if resp.StatusCode != 200 || v.ID != id || v.VaultKey == "" || v.VaultKey == old || v.Prev == "" {
			t.Fatalf("rotate: %d %s", resp.StatusCode, body)
		}
		// Both secrets work during the grace period, on one spend.
		if st := chargeAs(t, e, old); st != 200 {
			t.Fatalf("old secret in grace: %d", st)
		}
		if st := chargeAs(t, e, v.VaultKey); st != 200 {
			t.Fatalf("new secret: %d", st)
		}
		if sp := e.Spend(t, id); sp.Total != 3_000_000 {
			t.Fatalf("spend = %+v, want $3 on one key", sp)
		}
		e.Clock.Advance(time.Hour)
		if st := chargeAs(t, e, old); st != 401 {
			t.Fatalf("old secret after grace: %d, want 401", st)
		}
		if st := chargeAs(t, e, v.VaultKey); st != 200 {
			t.Fatalf("new secret after grace: %d", st)
		}
		e.Server.FlushAudit()
		_, ev := e.Admin(t, "GET", "/vault/keys/"+id+"/events?limit=1", "")
		if !strings.Contains(string(ev), `"allow"`) {
			t.Fatalf("events: %s", ev)
		}
		_, audit := e.Admin(t, "GET", "/vault/audit", "")
		if !strings.Contains(string(audit), `"key.rotate"`) || strings.Contains(string(audit), v.VaultKey) {
			t.Fatalf("audit: %s", audit)
		}
	})
	t.Run("ErrRotateWithoutGrace", func(t *testing.T) {
		e := MustOpen(t)
		id, old := e.CreateKey(t, `{"allowed_endpoints":["charges.create"]}`)
		chargeAs(t, e, old) // cached under the old secret
		if resp, b := e.Admin(t, "POST", "/vault/keys/"+id+"/rotate", ""); resp.StatusCode != 200 {
			t.Fatalf("rotate: %d %s", resp.StatusCode, b)
		}
		if st := chargeAs(t, e, old); st != 401 {
			t.Fatalf("old secret without grace: %d, want 401", st)
		}
	})
	t.Run("CacheEvictsBothSecrets", func(t *testing.T) {
		e := MustOpen(t)
		id, old := e.CreateKey(t, `{"allowed_endpoints":["charges.create","charges.list"]}`)
		_, body := e.Admin(t, "POST", "/vault/keys/"+id+"/rotate", `{"grace_period":3600}`)
		var v struct {
			VaultKey string `json:"vault_key"`
		}
		json.Unmarshal(body, &v)
		// Both secrets cached; a revocation must evict both, reads included.
		for _, s := range []string{old, v.VaultKey} {
			if resp, _ := e.Do(t, "GET", "/v1/charges", "", map[string]string{"Authorization": "Bearer " + s}); resp.StatusCode != 200 {
				t.Fatalf("read: %d", resp.StatusCode)
			}
		}
		e.Admin(t, "POST", "/vault/keys/"+id+"/revoke", "")
		for _, s := range []string{old, v.VaultKey} {
			if resp, _ := e.Do(t, "GET", "/v1/charges", "", map[string]string{"Authorization": "Bearer " + s}); resp.StatusCode != 401 {
				t.Fatalf("read after revoke through a cached secret: %d, want 401", resp.StatusCode)
			}
		}
	})
	t.Run("SuspendResume", func(t *testing.T) {
		e := MustOpen(t)
		id, secret := e.CreateKey(t, `{"allowed_endpoints":["charges.create"]}`)
		chargeAs(t, e, secret)
		if resp, b := e.Admin(t, "POST", "/vault/keys/"+id+"/suspend", ""); resp.StatusCode != 200 || !strings.Contains(string(b), `"suspended"`) {
			t.Fatalf("suspend: %d %s", resp.StatusCode, b)
		}
		if st := chargeAs(t, e, secret); st != 403 {
			t.Fatalf("suspended: %d, want 403", st)
		}
		if resp, _ := e.Admin(t, "POST", "/vault/keys/"+id+"/resume", ""); resp.StatusCode != 200 {
			t.Fatalf("resume: %d", resp.StatusCode)
		}
		if st := chargeAs(t, e, secret); st != 200 {
			t.Fatalf("resumed: %d", st)
		}
		if resp, b := e.Admin(t, "PATCH", "/vault/keys/"+id, `{"label":"renamed"}`); resp.StatusCode != 200 {
			t.Fatalf("update: %d %s", resp.StatusCode, b)
		}
		e.Admin(t, "POST", "/vault/keys/"+id+"/revoke", "")
		if resp, b := e.Admin(t, "POST", "/vault/keys/"+id+"/resume", ""); resp.StatusCode != 409 {
			t.Fatalf("resume revoked: %d %s", resp.StatusCode, b)
		}
		// Each change is in the admin audit log, written with it; the
		// refused resumption is not.
		_, b := e.Admin(t, "GET", "/vault/audit?limit=10", "")
		var audit struct {
			Data []struct {
				Actor, Action, Target, Client string
			} `json:"data"`
		}
		if err := json.Unmarshal(b, &audit); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, a := range audit.Data {
			if a.Target == id {
				if a.Actor == "" || a.Client == "" {
					t.Fatalf("admin event without actor or client: %s", b)
				}
				got = append(got, a.Action)
			}
		}
		if want := []string{"key.revoke", "key.update", "key.resume", "key.suspend", "key.create"}; !slices.Equal(got, want) {
			t.Fatalf("admin events of the key, newest first: %v, want %v", got, want)
		}
	})
	t.Run("ErrBadGrace", func(t *testing.T) {
		e := MustOpen(t)
		id, _ := e.CreateKey(t, `{"allowed_endpoints":["charges.create"]}`)
		for _, body := range []string{`{"grace_period":"forever"}`, `{"grace_period":"-1h"}`, `{"grace_period":"9999h"}`, `{"grace":"1h"}`} {
			if resp, b := e.Admin(t, "POST", "/vault/keys/"+id+"/rotate", body); resp.StatusCode != 400 {
				t.Fatalf("rotate %s: %d %s", body, resp.StatusCode, b)
			}
		}
	})
}

func TestListKeys_Filters(t *testing.T) {
	e := MustOpen(t)
	var ids []string
	for i, body := range []string{
		`{"label":"a","metadata":{"team":"billing"},"allowed_endpoints":["charges.create"]}`,
		`{"label":"b","metadata":{"team":"growth"},"allowed_endpoints":["charges.create"]}`,
		`{"label":"a","metadata":{"team":"billing"},"allowed_endpoints":["charges.create"]}`,
		`{"label":"a","metadata":{"team":"billing"},"allowed_endpoints":["charges.create"]}`,
	} {
		id, _ := e.CreateKey(t, body)
		ids = append(ids, id)
		e.Clock.Advance(time.Second)
		_ = i
	}
	e.Admin(t, "POST", "/vault/keys/"+ids[3]+"/suspend", "")
	list := func(q string) (got []string, more bool) {
		resp, b := e.Admin(t, "GET", "/vault/keys?"+q, "")
		if resp.StatusCode != 200 {
			t.Fatalf("list %s: %d %s", q, resp.StatusCode, b)
		}
		var l struct {
			Data []struct {
				ID string `json:"id"`
			}
			HasMore bool `json:"has_more"`
		}
		json.Unmarshal(b, &l)
		for _, d := range l.Data {
			got = append(got, d.ID)
		}
		return got, l.HasMore
	}
	if got, more := list("metadata[team]=billing&status=active&limit=1"); len(got) != 1 || got[0] != ids[0] || !more {
		t.Fatalf("page 1 = %v %v", got, more)
	}
	if got, more := list("metadata[team]=billing&status=active&limit=1&starting_after=" + ids[0]); len(got) != 1 || got[0] != ids[2] || more {
		t.Fatalf("page 2 = %v %v", got, more)
	}
	if got, _ := list("status=suspended"); len(got) != 1 || got[0] != ids[3] {
		t.Fatalf("suspended = %v", got)
	}
	if got, _ := list("label=b&vendor=stripe"); len(got) != 1 || got[0] != ids[1] {
		t.Fatalf("label b = %v", got)
	}
	if resp, _ := e.Admin(t, "GET", "/vault/keys?status=paused", ""); resp.StatusCode != 400 {
		t.Fatalf("bad status: %d", resp.StatusCode)
	}
	if resp, _ := e.Admin(t, "GET", "/vault/keys?colour=red", ""); resp.StatusCode != 400 {
		t.Fatalf("unknown parameter: %d", resp.StatusCode)
	}
}
