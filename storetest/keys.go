package storetest

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// wantKey fails the test unless got equals want field by field: times as
// instants, lists and metadata exactly (nil stays nil, empty stays empty).
func wantKey(tb testing.TB, got, want *keybrake.Key) {
	tb.Helper()
	wantTime(tb, "CreatedAt", got.CreatedAt, want.CreatedAt)
	wantTime(tb, "UpdatedAt", got.UpdatedAt, want.UpdatedAt)
	wantTimePtr(tb, "ExpiresAt", got.ExpiresAt, want.ExpiresAt)
	wantTimePtr(tb, "RevokedAt", got.RevokedAt, want.RevokedAt)
	g, w := *got, *want
	g.CreatedAt, g.UpdatedAt, g.ExpiresAt, g.RevokedAt = time.Time{}, time.Time{}, nil, nil
	w.CreatedAt, w.UpdatedAt, w.ExpiresAt, w.RevokedAt = time.Time{}, time.Time{}, nil, nil
	g.Version, w.Version = "", "" // the store's own (testKeyVersion)
	if !reflect.DeepEqual(g, w) {
		tb.Fatalf("key mismatch:\n got %s\nwant %s", dumpKey(&g), dumpKey(&w))
	}
}

func dumpKey(k *keybrake.Key) string {
	c := func(m *keybrake.Micros) string {
		if m == nil {
			return "nil"
		}
		return m.String()
	}
	l := func(s []string) string {
		if s == nil {
			return "nil"
		}
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("{ID:%s Vendor:%s Label:%q Hash:%s Prefix:%s Caps:[%s %s %s %s] Endpoints:%s Customers:%s Accounts:%s Currencies:%s TZ:%s Unpriced:%v SecretReads:%v Metadata:%#v}",
		k.ID, k.Vendor, k.Label, k.SecretHash, k.SecretPrefix,
		c(k.PerRequest), c(k.Daily), c(k.Monthly), c(k.Total),
		l(k.AllowedEndpoints), l(k.AllowedCustomers), l(k.AllowedAccounts), l(k.AllowedCurrencies),
		k.Timezone, k.AllowUnpriced, k.AllowSecretReads, k.Metadata)
}

// mustFindKey reads a key back by ID and by hash and checks both agree.
func mustFindKey(tb testing.TB, s keybrake.Store, id string) *keybrake.Key {
	tb.Helper()
	k, err := s.FindKeyByID(context.Background(), id)
	if err != nil {
		tb.Fatalf("FindKeyByID(%s): %v", id, err)
	}
	return k
}

func testKeys(t *testing.T, open opener) {
	ctx := context.Background()

	t.Run("Create", func(t *testing.T) {
		t.Run("OK", func(t *testing.T) {
			s := open(t)
			want := NewKey("key_ok")
			MustCreateKey(t, s, want)
			wantKey(t, mustFindKey(t, s, "key_ok"), want)
			byHash, err := s.FindKeyBySecretHash(ctx, want.SecretHash)
			if err != nil {
				t.Fatalf("FindKeyBySecretHash: %v", err)
			}
			wantKey(t, byHash, want)
		})
		t.Run("ErrConflictID", func(t *testing.T) {
			s := open(t)
			MustCreateKey(t, s, NewKey("key_a"))
			dup := NewKey("key_b")
			dup.ID = "key_a"
			wantCode(t, s.CreateKey(ctx, dup), keybrake.ECONFLICT)
		})
		t.Run("ErrConflictSecretHash", func(t *testing.T) {
			s := open(t)
			a := MustCreateKey(t, s, NewKey("key_a"))
			dup := NewKey("key_b")
			dup.SecretHash = a.SecretHash
			wantCode(t, s.CreateKey(ctx, dup), keybrake.ECONFLICT)
			_, err := s.FindKeyByID(ctx, "key_b")
			wantCode(t, err, keybrake.ENOTFOUND)
		})
		t.Run("ErrInvalidID", func(t *testing.T) {
			s := open(t)
			k := NewKey("key_a")
			k.ID = ""
			wantCode(t, s.CreateKey(ctx, k), keybrake.EINVALID)
		})
		t.Run("ErrInvalidSecretHash", func(t *testing.T) {
			s := open(t)
			k := NewKey("key_a")
			k.SecretHash = ""
			wantCode(t, s.CreateKey(ctx, k), keybrake.EINVALID)
		})
		t.Run("ErrInvalidTimezone", func(t *testing.T) {
			s := open(t)
			k := NewKey("key_a")
			k.Timezone = "Mars/Olympus_Mons"
			wantCode(t, s.CreateKey(ctx, k), keybrake.EINVALID)
		})
	})

	t.Run("RoundTrip", func(t *testing.T) {
		exp := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
		expMicro := time.Date(2027, 1, 2, 3, 4, 5, 999999000, time.FixedZone("X", 3600))
		tests := []struct {
			name string
			edit func(k *keybrake.Key)
		}{
			{"CapsNil", func(k *keybrake.Key) {}},
			{"CapsZero", func(k *keybrake.Key) {
				k.Caps = keybrake.Caps{PerRequest: Ptr(0), Daily: Ptr(0), Monthly: Ptr(0), Total: Ptr(0)}
			}},
			{"CapsSet", func(k *keybrake.Key) {
				k.Caps = keybrake.Caps{PerRequest: Ptr(1), Daily: Ptr(USD(100) + 1), Monthly: Ptr(USD(2_000_000)), Total: Ptr(9_000_000_000_000_000_000)}
			}},
			{"CapsSome", func(k *keybrake.Key) { k.Caps = keybrake.Caps{Monthly: Ptr(USD(5))} }},
			{"ListsNil", func(k *keybrake.Key) {}},
			{"ListsEmpty", func(k *keybrake.Key) {
				k.AllowedEndpoints, k.AllowedCustomers, k.AllowedAccounts, k.AllowedCurrencies = []string{}, []string{}, []string{}, []string{}
			}},
			{"ListsSet", func(k *keybrake.Key) {
				k.AllowedEndpoints = []string{"charges.create", "payment_intents.create", "refunds.create"}
				k.AllowedCustomers = []string{"cus_123"}
				k.AllowedAccounts = []string{"acct_1", "acct_2"}
				k.AllowedCurrencies = []string{"usd", "eur", "jpy"}
			}},
			{"MetadataEmpty", func(k *keybrake.Key) { k.Metadata = map[string]string{} }},
			{"MetadataSet", func(k *keybrake.Key) {
				k.Metadata = map[string]string{"team": "growth", "agent": "billing-bot", "quote": `"x"`, "unicode": "héllo ✓"}
			}},
			{"Timezone", func(k *keybrake.Key) { k.Timezone = "America/New_York" }},
			{"TimezoneEmpty", func(k *keybrake.Key) { k.Timezone = "" }},
			{"AllowUnpriced", func(k *keybrake.Key) { k.AllowUnpriced = true }},
			{"AllowSecretReads", func(k *keybrake.Key) { k.AllowSecretReads = true }},
			{"AllEndpoints", func(k *keybrake.Key) { k.AllowedEndpoints = []string{keybrake.AllEndpoints} }},
			{"DefaultEndpoints", func(k *keybrake.Key) { k.AllowedEndpoints = keybrake.DefaultEndpoints() }},
			{"Label", func(k *keybrake.Key) { k.Label = "it's a \"label\" — with unicode" }},
			{"ExpiresAtSecond", func(k *keybrake.Key) { k.ExpiresAt = &exp }},
			{"ExpiresAtMicrosecond", func(k *keybrake.Key) { k.ExpiresAt = &expMicro }},
			{"RevokedAt", func(k *keybrake.Key) { r := T0.Add(time.Hour); k.RevokedAt = &r }},
			{"TimesSecond", func(k *keybrake.Key) {
				k.CreatedAt = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
				k.UpdatedAt = time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)
			}},
			{"TimesMicrosecond", func(k *keybrake.Key) {
				k.CreatedAt = time.Date(2026, 1, 1, 0, 0, 0, 1000, time.UTC)
				k.UpdatedAt = time.Date(2026, 1, 1, 0, 0, 1, 999999000, MustLocation(t, "Asia/Tokyo"))
			}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				s := open(t)
				want := NewKey("key_rt")
				tt.edit(want)
				MustCreateKey(t, s, want)
				wantKey(t, mustFindKey(t, s, want.ID), want)
				byHash, err := s.FindKeyBySecretHash(ctx, want.SecretHash)
				if err != nil {
					t.Fatalf("FindKeyBySecretHash: %v", err)
				}
				wantKey(t, byHash, want)
			})
		}
	})

	t.Run("FindKeyByID", func(t *testing.T) {
		t.Run("ErrNotFound", func(t *testing.T) {
			s := open(t)
			MustCreateKey(t, s, NewKey("key_a"))
			_, err := s.FindKeyByID(ctx, "key_missing")
			wantCode(t, err, keybrake.ENOTFOUND)
		})
	})
	t.Run("FindKeyBySecretHash", func(t *testing.T) {
		t.Run("ErrNotFound", func(t *testing.T) {
			s := open(t)
			MustCreateKey(t, s, NewKey("key_a"))
			_, err := s.FindKeyBySecretHash(ctx, NewKey("key_b").SecretHash)
			wantCode(t, err, keybrake.ENOTFOUND)
		})
	})

	t.Run("FindKeys", func(t *testing.T) {
		mustCreateN := func(t *testing.T, s keybrake.Store, n int) []string {
			t.Helper()
			var ids []string
			// IDs sort opposite to creation, so a store ordering by ID fails.
			for i := range n {
				k := NewKey(fmt.Sprintf("key_%02d", 99-i))
				k.CreatedAt = T0.Add(time.Duration(i) * time.Second)
				k.UpdatedAt = k.CreatedAt
				MustCreateKey(t, s, k)
				ids = append(ids, k.ID)
			}
			return ids
		}
		page := func(t *testing.T, s keybrake.Store, f keybrake.KeyFilter) ([]string, bool) {
			t.Helper()
			keys, more, err := s.FindKeys(ctx, f)
			if err != nil {
				t.Fatalf("FindKeys(%+v): %v", f, err)
			}
			var ids []string
			for _, k := range keys {
				ids = append(ids, k.ID)
			}
			return ids, more
		}
		t.Run("OK", func(t *testing.T) {
			s := open(t)
			ids := mustCreateN(t, s, 5)
			got, more := page(t, s, keybrake.KeyFilter{Limit: 2})
			if !reflect.DeepEqual(got, ids[0:2]) || !more {
				t.Fatalf("page 1 = %v more=%v, want %v more=true", got, more, ids[0:2])
			}
			got, more = page(t, s, keybrake.KeyFilter{Limit: 2, StartingAfter: ids[1]})
			if !reflect.DeepEqual(got, ids[2:4]) || !more {
				t.Fatalf("page 2 = %v more=%v, want %v more=true", got, more, ids[2:4])
			}
			got, more = page(t, s, keybrake.KeyFilter{Limit: 2, StartingAfter: ids[3]})
			if !reflect.DeepEqual(got, ids[4:]) || more {
				t.Fatalf("page 3 = %v more=%v, want %v more=false", got, more, ids[4:])
			}
			got, more = page(t, s, keybrake.KeyFilter{Limit: 5})
			if !reflect.DeepEqual(got, ids) || more {
				t.Fatalf("exact page = %v more=%v, want %v more=false", got, more, ids)
			}
			got, more = page(t, s, keybrake.KeyFilter{StartingAfter: ids[4]})
			if len(got) != 0 || more {
				t.Fatalf("after last = %v more=%v, want none", got, more)
			}
		})
		t.Run("DefaultLimit", func(t *testing.T) {
			s := open(t)
			ids := mustCreateN(t, s, 12)
			got, more := page(t, s, keybrake.KeyFilter{})
			if !reflect.DeepEqual(got, ids[:10]) || !more {
				t.Fatalf("default page = %v more=%v, want %v more=true", got, more, ids[:10])
			}
		})
		t.Run("Empty", func(t *testing.T) {
			s := open(t)
			got, more := page(t, s, keybrake.KeyFilter{})
			if len(got) != 0 || more {
				t.Fatalf("empty store = %v more=%v", got, more)
			}
		})
		t.Run("FullRecords", func(t *testing.T) {
			s := open(t)
			want := NewKey("key_full")
			want.Caps = keybrake.Caps{Daily: Ptr(USD(3))}
			want.AllowedCurrencies = []string{"usd"}
			want.Metadata = map[string]string{"a": "b"}
			MustCreateKey(t, s, want)
			keys, _, err := s.FindKeys(ctx, keybrake.KeyFilter{})
			if err != nil || len(keys) != 1 {
				t.Fatalf("FindKeys = %d keys, %v", len(keys), err)
			}
			wantKey(t, keys[0], want)
		})
		t.Run("ErrInvalidCursor", func(t *testing.T) {
			s := open(t)
			mustCreateN(t, s, 2)
			_, _, err := s.FindKeys(ctx, keybrake.KeyFilter{StartingAfter: "key_missing"})
			wantCode(t, err, keybrake.EINVALID)
		})
	})

	t.Run("Update", func(t *testing.T) {
		now := T0.Add(time.Hour + time.Microsecond)
		exp := T0.Add(48 * time.Hour)
		label := "renamed"
		yes, no := true, false
		endpoints := []string{"refunds.create"}
		empty := []string{}
		meta := map[string]string{"k": "v"}
		tests := []struct {
			name string
			upd  keybrake.KeyUpdate
			want func(k *keybrake.Key)
		}{
			{"Nothing", keybrake.KeyUpdate{}, func(k *keybrake.Key) {}},
			{"Label", keybrake.KeyUpdate{Label: &label}, func(k *keybrake.Key) { k.Label = label }},
			{"SetPerRequest", keybrake.KeyUpdate{SetPerRequest: true, PerRequest: Ptr(USD(7))}, func(k *keybrake.Key) { k.PerRequest = Ptr(USD(7)) }},
			{"RemovePerRequest", keybrake.KeyUpdate{SetPerRequest: true}, func(k *keybrake.Key) { k.PerRequest = nil }},
			{"SetDaily", keybrake.KeyUpdate{SetDaily: true, Daily: Ptr(0)}, func(k *keybrake.Key) { k.Daily = Ptr(0) }},
			{"RemoveDaily", keybrake.KeyUpdate{SetDaily: true}, func(k *keybrake.Key) { k.Daily = nil }},
			{"SetMonthly", keybrake.KeyUpdate{SetMonthly: true, Monthly: Ptr(USD(70))}, func(k *keybrake.Key) { k.Monthly = Ptr(USD(70)) }},
			{"RemoveMonthly", keybrake.KeyUpdate{SetMonthly: true}, func(k *keybrake.Key) { k.Monthly = nil }},
			{"SetTotal", keybrake.KeyUpdate{SetTotal: true, Total: Ptr(USD(700))}, func(k *keybrake.Key) { k.Total = Ptr(USD(700)) }},
			{"RemoveTotal", keybrake.KeyUpdate{SetTotal: true}, func(k *keybrake.Key) { k.Total = nil }},
			{"CapValueWithoutSetIgnored", keybrake.KeyUpdate{Total: Ptr(1)}, func(k *keybrake.Key) {}},
			{"AllowedEndpoints", keybrake.KeyUpdate{AllowedEndpoints: &endpoints}, func(k *keybrake.Key) { k.AllowedEndpoints = endpoints }},
			{"AllowedCustomersEmpty", keybrake.KeyUpdate{AllowedCustomers: &empty}, func(k *keybrake.Key) { k.AllowedCustomers = []string{} }},
			{"AllowedAccounts", keybrake.KeyUpdate{AllowedAccounts: &endpoints}, func(k *keybrake.Key) { k.AllowedAccounts = endpoints }},
			{"AllowedCurrencies", keybrake.KeyUpdate{AllowedCurrencies: &endpoints}, func(k *keybrake.Key) { k.AllowedCurrencies = endpoints }},
			{"AllowUnpriced", keybrake.KeyUpdate{AllowUnpriced: &yes}, func(k *keybrake.Key) { k.AllowUnpriced = true }},
			{"AllowSecretReadsOff", keybrake.KeyUpdate{AllowSecretReads: &no}, func(k *keybrake.Key) { k.AllowSecretReads = false }},
			{"Metadata", keybrake.KeyUpdate{Metadata: &meta}, func(k *keybrake.Key) { k.Metadata = meta }},
			{"SetExpiresAt", keybrake.KeyUpdate{SetExpiresAt: true, ExpiresAt: &exp}, func(k *keybrake.Key) { k.ExpiresAt = &exp }},
			{"RemoveExpiresAt", keybrake.KeyUpdate{SetExpiresAt: true}, func(k *keybrake.Key) { k.ExpiresAt = nil }},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				s := open(t)
				orig := NewKey("key_upd")
				orig.Caps = keybrake.Caps{PerRequest: Ptr(USD(1)), Daily: Ptr(USD(2)), Monthly: Ptr(USD(3)), Total: Ptr(USD(4))}
				orig.AllowedEndpoints = []string{"charges.create"}
				orig.AllowedCustomers = []string{"cus_1"}
				orig.AllowedAccounts = []string{"acct_1"}
				orig.AllowedCurrencies = []string{"usd"}
				orig.Metadata = map[string]string{"old": "yes"}
				orig.AllowSecretReads = true
				e := T0.Add(24 * time.Hour)
				orig.ExpiresAt = &e
				MustCreateKey(t, s, orig)

				want := *orig
				tt.want(&want)
				want.UpdatedAt = now
				got, err := s.UpdateKey(ctx, orig.ID, tt.upd, now)
				if err != nil {
					t.Fatalf("UpdateKey: %v", err)
				}
				wantKey(t, got, &want)
				wantKey(t, mustFindKey(t, s, orig.ID), &want)
			})
		}
		t.Run("ErrNotFound", func(t *testing.T) {
			s := open(t)
			_, err := s.UpdateKey(ctx, "key_missing", keybrake.KeyUpdate{Label: &label}, now)
			wantCode(t, err, keybrake.ENOTFOUND)
		})
	})

	t.Run("Revoke", func(t *testing.T) {
		t.Run("OK", func(t *testing.T) {
			s := open(t)
			MustCreateKey(t, s, NewKey("key_a"))
			now := T0.Add(time.Minute)
			k, err := s.RevokeKey(ctx, "key_a", now)
			if err != nil {
				t.Fatalf("RevokeKey: %v", err)
			}
			wantTimePtr(t, "RevokedAt", k.RevokedAt, &now)
			wantTimePtr(t, "stored RevokedAt", mustFindKey(t, s, "key_a").RevokedAt, &now)
		})
		t.Run("KeepsFirstTime", func(t *testing.T) {
			s := open(t)
			MustCreateKey(t, s, NewKey("key_a"))
			first := T0.Add(time.Minute)
			if _, err := s.RevokeKey(ctx, "key_a", first); err != nil {
				t.Fatalf("RevokeKey: %v", err)
			}
			k, err := s.RevokeKey(ctx, "key_a", first.Add(time.Hour))
			if err != nil {
				t.Fatalf("RevokeKey again: %v", err)
			}
			wantTimePtr(t, "RevokedAt", k.RevokedAt, &first)
			wantTimePtr(t, "stored RevokedAt", mustFindKey(t, s, "key_a").RevokedAt, &first)
		})
		t.Run("ErrNotFound", func(t *testing.T) {
			s := open(t)
			_, err := s.RevokeKey(ctx, "key_missing", T0)
			wantCode(t, err, keybrake.ENOTFOUND)
		})
	})
}
