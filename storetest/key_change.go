package storetest

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// testKeyChange checks AdminStore.ChangeKey: a key's suspension, resumption,
// revocation, rotation or update and the admin audit event recording it
// commit together or not at all.
func testKeyChange(t *testing.T, open opener) {
	ctx := context.Background()
	mustAS := func(t *testing.T) (keybrake.Store, keybrake.AdminStore) {
		t.Helper()
		s := open(t)
		as, ok := s.(keybrake.AdminStore)
		if !ok {
			t.Fatal("the store does not implement keybrake.AdminStore")
		}
		return s, as
	}
	event := func(action, detail string) *keybrake.AdminEvent {
		return &keybrake.AdminEvent{Time: T0, Actor: "drift watch", Action: action, Target: "vk_a", Detail: detail, Client: "127.0.0.1"}
	}
	// setup makes vk_a, with a child vk_c, in the state each action
	// starts from: suspended for resume, active otherwise.
	setup := func(t *testing.T, s keybrake.Store, action string) {
		t.Helper()
		p := NewKey("vk_a")
		p.Total, p.Mint = Ptr(USD(100)), true
		MustCreateKey(t, s, p)
		MustMint(t, s, p.ID, NewChild("vk_c", p, USD(10), T0.Add(24*time.Hour)), T0)
		if action == keybrake.ActionResume {
			if _, err := s.SuspendKey(ctx, "vk_a", "earlier", T0); err != nil {
				t.Fatal(err)
			}
		}
	}
	change := func(action string, e *keybrake.AdminEvent) keybrake.KeyChange {
		c := keybrake.KeyChange{Action: action, Reason: "drift: amount ch_1", Now: T0.Add(time.Minute), Event: e}
		switch action {
		case keybrake.ActionRotate:
			c.Rotate = &keybrake.RotateArgs{SecretHash: hash("rotated"), SecretPrefix: "vault_key_rot"}
		case keybrake.ActionUpdate:
			label := "updated"
			c.Update = &keybrake.KeyUpdate{Label: &label, SetDaily: true, Daily: Ptr(USD(7))}
		}
		return c
	}
	// changed says whether k (and its child c) show the action's effect.
	changed := func(action string, k, c *keybrake.Key) bool {
		switch action {
		case keybrake.ActionSuspend:
			return k.SuspendedAt != nil && k.SuspendedReason == "drift: amount ch_1" && c.SuspendedAt != nil
		case keybrake.ActionResume:
			return k.SuspendedAt == nil && c.SuspendedAt == nil
		case keybrake.ActionRevoke:
			return k.RevokedAt != nil && c.RevokedAt != nil
		case keybrake.ActionUpdate:
			return k.Label == "updated" && k.Daily != nil && *k.Daily == USD(7)
		default:
			return k.SecretHash == hash("rotated")
		}
	}
	actions := []string{keybrake.ActionSuspend, keybrake.ActionResume, keybrake.ActionRevoke, keybrake.ActionRotate, keybrake.ActionUpdate}

	t.Run("OK", func(t *testing.T) {
		for _, action := range actions {
			t.Run(action, func(t *testing.T) {
				s, as := mustAS(t)
				setup(t, s, action)
				e := event("key."+action, "why "+action)
				k, err := as.ChangeKey(ctx, "vk_a", change(action, e))
				if err != nil {
					t.Fatalf("ChangeKey: %v", err)
				}
				if !changed(action, k, mustFindKey(t, s, "vk_c")) || !changed(action, mustFindKey(t, s, "vk_a"), mustFindKey(t, s, "vk_c")) {
					t.Fatalf("%s did not happen: returned %+v, stored %+v", action, k, mustFindKey(t, s, "vk_a"))
				}
				got := mustAdminEvents(t, as)
				if len(got) != 1 || e.ID == 0 || got[0].ID != e.ID || got[0].Action != "key."+action || got[0].Detail != "why "+action ||
					got[0].Actor != "drift watch" || got[0].Target != "vk_a" || !got[0].Time.Equal(T0) {
					t.Fatalf("admin events after %s: %+v (event ID %d)", action, got, e.ID)
				}
			})
		}
	})

	// The event's insert fails inside the transaction (the schema refuses
	// an event without an action): the change must roll back with it,
	// child keys included.
	t.Run("ErrEventRefusedLeavesKey", func(t *testing.T) {
		for _, action := range actions {
			t.Run(action, func(t *testing.T) {
				s, as := mustAS(t)
				setup(t, s, action)
				before, child := mustFindKey(t, s, "vk_a"), mustFindKey(t, s, "vk_c")
				if _, err := as.ChangeKey(ctx, "vk_a", change(action, event("", "refused"))); err == nil {
					t.Fatal("ChangeKey with an event the store refuses succeeded")
				}
				if after := mustFindKey(t, s, "vk_a"); !reflect.DeepEqual(after, before) {
					t.Fatalf("%s took effect though its admin event was not written:\nbefore %+v\nafter  %+v", action, before, after)
				}
				if after := mustFindKey(t, s, "vk_c"); !reflect.DeepEqual(after, child) {
					t.Fatalf("%s reached the child though its admin event was not written:\nbefore %+v\nafter  %+v", action, child, after)
				}
				if got := mustAdminEvents(t, as); len(got) != 0 {
					t.Fatalf("admin events: %+v", got)
				}
				if action == keybrake.ActionRotate {
					if _, err := s.FindKeyBySecretHash(ctx, hash("rotated")); keybrake.ErrorCode(err) != keybrake.ENOTFOUND {
						t.Fatalf("the refused rotation's secret: %v, want ENOTFOUND", err)
					}
				}
			})
		}
	})

	// A key is created with its admin event, or neither is written.
	t.Run("Create", func(t *testing.T) {
		s, as := mustAS(t)
		k := NewKey("vk_new")
		e := event("key.create", "daily_usd_cap=25")
		got, err := as.ChangeKey(ctx, "vk_new", keybrake.KeyChange{Action: keybrake.ActionCreate, Create: k, Now: T0, Event: e})
		if err != nil || got == nil || got.ID != "vk_new" {
			t.Fatalf("ChangeKey(create) = %+v, %v", got, err)
		}
		if stored := mustFindKey(t, s, "vk_new"); stored.SecretHash != k.SecretHash {
			t.Fatalf("stored %+v", stored)
		}
		events := mustAdminEvents(t, as)
		if len(events) != 1 || e.ID == 0 || events[0].ID != e.ID || events[0].Action != "key.create" || events[0].Detail != "daily_usd_cap=25" {
			t.Fatalf("admin events: %+v", events)
		}
		// The same ID again: refused, and no second event.
		if _, err := as.ChangeKey(ctx, "vk_new", keybrake.KeyChange{Action: keybrake.ActionCreate, Create: NewKey("vk_new"), Now: T0, Event: event("key.create", "again")}); keybrake.ErrorCode(err) != keybrake.ECONFLICT {
			t.Fatalf("second create of vk_new: %v, want ECONFLICT", err)
		}
		if events := mustAdminEvents(t, as); len(events) != 1 {
			t.Fatalf("admin events after a refused create: %+v", events)
		}
	})

	t.Run("ErrCreateEventRefusedCreatesNothing", func(t *testing.T) {
		s, as := mustAS(t)
		if _, err := as.ChangeKey(ctx, "vk_new", keybrake.KeyChange{Action: keybrake.ActionCreate, Create: NewKey("vk_new"), Now: T0, Event: event("", "refused")}); err == nil {
			t.Fatal("create with an event the store refuses succeeded")
		}
		if _, err := s.FindKeyByID(ctx, "vk_new"); keybrake.ErrorCode(err) != keybrake.ENOTFOUND {
			t.Fatalf("the key of a refused create: %v, want ENOTFOUND", err)
		}
		if got := mustAdminEvents(t, as); len(got) != 0 {
			t.Fatalf("admin events: %+v", got)
		}
	})

	t.Run("AlreadySuspendedKeepsReason", func(t *testing.T) {
		s, as := mustAS(t)
		setup(t, s, keybrake.ActionResume) // suspended "earlier" at T0
		k, err := as.ChangeKey(ctx, "vk_a", change(keybrake.ActionSuspend, event("key.suspend", "again")))
		if err != nil || k.SuspendedReason != "earlier" || !k.SuspendedAt.Equal(T0) {
			t.Fatalf("second suspension = %+v, %v; want the first kept", k, err)
		}
		if got := mustAdminEvents(t, as); len(got) != 1 || got[0].Detail != "again" {
			t.Fatalf("admin events: %+v; want the second suspension recorded", got)
		}
	})

	t.Run("ErrRevokedWritesNoEvent", func(t *testing.T) {
		for _, action := range []string{keybrake.ActionSuspend, keybrake.ActionResume, keybrake.ActionRotate} {
			t.Run(action, func(t *testing.T) {
				s, as := mustAS(t)
				setup(t, s, action)
				if _, err := s.RevokeKey(ctx, "vk_a", T0); err != nil {
					t.Fatal(err)
				}
				before := mustFindKey(t, s, "vk_a")
				if _, err := as.ChangeKey(ctx, "vk_a", change(action, event("key."+action, ""))); keybrake.ErrorCode(err) != keybrake.ECONFLICT {
					t.Fatalf("%s of a revoked key: %v, want ECONFLICT", action, err)
				}
				if after := mustFindKey(t, s, "vk_a"); !reflect.DeepEqual(after, before) {
					t.Fatalf("refused %s changed the key:\nbefore %+v\nafter  %+v", action, before, after)
				}
				if got := mustAdminEvents(t, as); len(got) != 0 {
					t.Fatalf("admin events: %+v", got)
				}
			})
		}
	})

	t.Run("ErrNotFound", func(t *testing.T) {
		_, as := mustAS(t)
		for _, action := range actions {
			if _, err := as.ChangeKey(ctx, "vk_nobody", change(action, event("key."+action, ""))); keybrake.ErrorCode(err) != keybrake.ENOTFOUND {
				t.Fatalf("%s of an unknown key: %v, want ENOTFOUND", action, err)
			}
		}
		if got := mustAdminEvents(t, as); len(got) != 0 {
			t.Fatalf("admin events: %+v", got)
		}
	})

	t.Run("ErrInvalid", func(t *testing.T) {
		s, as := mustAS(t)
		MustCreateKey(t, s, NewKey("vk_a"))
		for _, c := range []keybrake.KeyChange{
			{Action: "delete", Now: T0, Event: event("key.delete", "")},
			{Action: keybrake.ActionCreate, Now: T0, Event: event("key.create", "")},                             // no Key
			{Action: keybrake.ActionCreate, Create: NewKey("vk_other"), Now: T0, Event: event("key.create", "")}, // not vk_a
			{Action: keybrake.ActionRotate, Now: T0, Event: event("key.rotate", "")},                             // no RotateArgs
			{Action: keybrake.ActionUpdate, Now: T0, Event: event("key.update", "")},                             // no KeyUpdate
		} {
			if _, err := as.ChangeKey(ctx, "vk_a", c); keybrake.ErrorCode(err) != keybrake.EINVALID {
				t.Fatalf("ChangeKey(%+v): %v, want EINVALID", c, err)
			}
		}
		if got := mustAdminEvents(t, as); len(got) != 0 {
			t.Fatalf("admin events: %+v", got)
		}
	})

	// A reader never sees a suspension whose admin event it cannot read:
	// reading the key, then the log, while suspensions and resumptions
	// commit, finds each suspension's reason among the events.
	t.Run("NeverVisibleWithoutEvent", func(t *testing.T) {
		s, as := mustAS(t)
		MustCreateKey(t, s, NewKey("vk_a"))
		const rounds = 40
		done := make(chan error, 1)
		go func() {
			for i := range rounds {
				now := T0.Add(time.Duration(i) * time.Second)
				reason := fmt.Sprintf("round %d", i)
				if _, err := as.ChangeKey(ctx, "vk_a", keybrake.KeyChange{Action: keybrake.ActionSuspend, Reason: reason, Now: now, Event: event("key.suspend", reason)}); err != nil {
					done <- err
					return
				}
				if _, err := as.ChangeKey(ctx, "vk_a", keybrake.KeyChange{Action: keybrake.ActionResume, Now: now, Event: event("key.resume", reason)}); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		seen := 0
		for {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("ChangeKey: %v", err)
				}
				if got := mustAdminEvents(t, as); len(got) != 2*rounds {
					t.Fatalf("%d admin events after %d rounds, want %d", len(got), rounds, 2*rounds)
				}
				t.Logf("saw the key suspended %d times", seen)
				return
			default:
			}
			k := mustFindKey(t, s, "vk_a")
			if k.SuspendedAt == nil {
				continue
			}
			seen++
			found := false
			for _, e := range mustAdminEvents(t, as) {
				found = found || (e.Action == "key.suspend" && e.Detail == k.SuspendedReason)
			}
			if !found {
				t.Fatalf("key suspended (%s) with no admin event recording it", k.SuspendedReason)
			}
		}
	})
}

// mustAdminEvents returns every admin event, newest first.
func mustAdminEvents(tb testing.TB, as keybrake.AdminStore) []*keybrake.AdminEvent {
	tb.Helper()
	got, _, err := as.FindAdminEvents(context.Background(), keybrake.AdminEventFilter{Limit: 1000})
	if err != nil {
		tb.Fatalf("FindAdminEvents: %v", err)
	}
	return got
}
