package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

func testAdmin(t *testing.T, open func(*testing.T) keybrake.Store) {
	ctx := context.Background()
	mustAdmin := func(t *testing.T) keybrake.AdminStore {
		t.Helper()
		as, ok := open(t).(keybrake.AdminStore)
		if !ok {
			t.Fatal("the store does not implement keybrake.AdminStore")
		}
		return as
	}
	t.Run("TokenLifecycle", func(t *testing.T) {
		as := mustAdmin(t)
		tok := &keybrake.AdminToken{Name: "alice", Role: keybrake.RoleViewer, TokenHash: hash("kbadm_alice"), Prefix: "kbadm_alic", CreatedBy: "env", CreatedAt: T0}
		if err := as.CreateAdminToken(ctx, tok, nil); err != nil {
			t.Fatal(err)
		}
		got, err := as.FindAdminTokenByHash(ctx, hash("kbadm_alice"))
		if err != nil || got.Name != "alice" || got.Role != keybrake.RoleViewer || got.CreatedBy != "env" || !got.CreatedAt.Equal(T0) || got.RevokedAt != nil {
			t.Fatalf("FindAdminTokenByHash = %+v, %v", got, err)
		}
		if _, err := as.FindAdminTokenByHash(ctx, hash("nobody")); keybrake.ErrorCode(err) != keybrake.ENOTFOUND {
			t.Fatalf("unknown hash: %v, want ENOTFOUND", err)
		}
		dup := *tok
		dup.TokenHash = hash("other")
		if err := as.CreateAdminToken(ctx, &dup, nil); keybrake.ErrorCode(err) != keybrake.EINVALID && keybrake.ErrorCode(err) != keybrake.ECONFLICT {
			t.Fatalf("duplicate name: %v", err)
		}
		at := T0.Add(time.Hour)
		r, err := as.RevokeAdminToken(ctx, "alice", at, nil)
		if err != nil || r.RevokedAt == nil || !r.RevokedAt.Equal(at) {
			t.Fatalf("RevokeAdminToken = %+v, %v", r, err)
		}
		r, err = as.RevokeAdminToken(ctx, "alice", at.Add(time.Hour), nil)
		if err != nil || !r.RevokedAt.Equal(at) {
			t.Fatalf("second revoke moved the time: %+v, %v", r, err)
		}
		if _, err := as.RevokeAdminToken(ctx, "bob", at, nil); keybrake.ErrorCode(err) != keybrake.ENOTFOUND {
			t.Fatalf("revoke unknown: %v", err)
		}
		// A revoked name is never reused.
		again := &keybrake.AdminToken{Name: "alice", Role: keybrake.RoleAdmin, TokenHash: hash("kbadm_alice2"), CreatedAt: T0}
		if err := as.CreateAdminToken(ctx, again, nil); err == nil {
			t.Fatal("a revoked token's name was reused")
		}
		all, err := as.FindAdminTokens(ctx)
		if err != nil || len(all) != 1 {
			t.Fatalf("FindAdminTokens = %v, %v", all, err)
		}
	})
	// A token's creation and revocation commit with their admin events, or
	// not at all.
	t.Run("TokensAudited", func(t *testing.T) {
		as := mustAdmin(t)
		event := func(action, target string) *keybrake.AdminEvent {
			return &keybrake.AdminEvent{Time: T0, Actor: "env", Action: action, Target: target, Client: "127.0.0.1"}
		}
		newToken := func(name string) *keybrake.AdminToken {
			return &keybrake.AdminToken{Name: name, Role: keybrake.RoleAdmin, TokenHash: hash("kbadm_" + name), CreatedAt: T0}
		}
		created := event("token.create", "alice")
		if err := as.CreateAdminToken(ctx, newToken("alice"), created); err != nil || created.ID == 0 {
			t.Fatalf("CreateAdminToken: %v (event ID %d)", err, created.ID)
		}
		// Refused events: nothing of the change is written.
		if err := as.CreateAdminToken(ctx, newToken("bob"), event("", "bob")); err == nil {
			t.Fatal("a token whose admin event the store refuses was created")
		}
		if _, err := as.FindAdminTokenByHash(ctx, hash("kbadm_bob")); keybrake.ErrorCode(err) != keybrake.ENOTFOUND {
			t.Fatalf("the refused token: %v, want ENOTFOUND", err)
		}
		if _, err := as.RevokeAdminToken(ctx, "alice", T0.Add(time.Hour), event("", "alice")); err == nil {
			t.Fatal("a revocation whose admin event the store refuses succeeded")
		}
		if got, _ := as.FindAdminTokenByHash(ctx, hash("kbadm_alice")); got == nil || got.RevokedAt != nil {
			t.Fatalf("alice after the refused revocation: %+v", got)
		}
		revoked := event("token.revoke", "alice")
		if r, err := as.RevokeAdminToken(ctx, "alice", T0.Add(time.Hour), revoked); err != nil || r.RevokedAt == nil || revoked.ID == 0 {
			t.Fatalf("RevokeAdminToken = %+v, %v (event ID %d)", r, err, revoked.ID)
		}
		got := mustAdminEvents(t, as)
		if len(got) != 2 || got[0].Action != "token.revoke" || got[1].Action != "token.create" {
			t.Fatalf("admin events: %+v", got)
		}
	})
	t.Run("ErrInvalidRole", func(t *testing.T) {
		as := mustAdmin(t)
		if err := as.CreateAdminToken(ctx, &keybrake.AdminToken{Name: "x", Role: "root", TokenHash: hash("x"), CreatedAt: T0}, nil); keybrake.ErrorCode(err) != keybrake.EINVALID {
			t.Fatalf("role root: %v, want EINVALID", err)
		}
	})
	t.Run("Events", func(t *testing.T) {
		as := mustAdmin(t)
		for i, a := range []string{"key.create", "key.update", "token.create"} {
			e := &keybrake.AdminEvent{Time: T0.Add(time.Duration(i) * time.Second), Actor: "env", Action: a, Target: "vk_1", Client: "127.0.0.1"}
			if err := as.AddAdminEvent(ctx, e); err != nil || e.ID == 0 {
				t.Fatalf("AddAdminEvent: %v (id %d)", err, e.ID)
			}
		}
		page, more, err := as.FindAdminEvents(ctx, keybrake.AdminEventFilter{Limit: 2})
		if err != nil || len(page) != 2 || !more || page[0].Action != "token.create" || !page[0].Time.Equal(T0.Add(2*time.Second)) {
			t.Fatalf("first page = %+v, %v, %v", page, more, err)
		}
		rest, more, err := as.FindAdminEvents(ctx, keybrake.AdminEventFilter{Limit: 2, StartingAfter: page[1].ID})
		if err != nil || len(rest) != 1 || more || rest[0].Action != "key.create" {
			t.Fatalf("second page = %+v, %v, %v", rest, more, err)
		}
	})
}

func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
