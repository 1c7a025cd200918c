package postgres_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/storetest"
)

// 0007_key_policy writes out the old meaning of an empty allowed_endpoints,
// every operation, as {*}, and keys made before it may not read secrets.
func TestMigrate_KeyPolicy(t *testing.T) {
	ctx := context.Background()
	dsn := MustDatabase(t, MustServerDSN(t))
	s := MustOpen(t, dsn)
	old := storetest.NewKey("key_old")
	storetest.MustCreateKey(t, s, old)
	limited := storetest.NewKey("key_limited")
	limited.AllowedEndpoints = []string{"charges.create"}
	storetest.MustCreateKey(t, s, limited)
	s.Close()

	// Put the schema back as it was before 0007.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`ALTER TABLE keys DROP COLUMN allow_secret_reads`,
		`DELETE FROM schema_migrations WHERE name LIKE '%0007_key_policy.sql'`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close(ctx)

	s2 := MustOpen(t, dsn)
	for id, want := range map[string][]string{"key_old": {"*"}, "key_limited": {"charges.create"}} {
		k, err := s2.FindKeyByID(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(k.AllowedEndpoints, want) || k.AllowSecretReads {
			t.Fatalf("%s after 0007: endpoints %q, secret reads %v", id, k.AllowedEndpoints, k.AllowSecretReads)
		}
	}
}

// 0031_velocity_aliases names the aliases of every operation a
// velocity limit saved before them names (storetest.CheckVelocityAliases).
func TestAttackLife_LegacyVelocityAliases(t *testing.T) {
	ctx := context.Background()
	dsn := MustDatabase(t, MustServerDSN(t))
	s := MustOpen(t, dsn)
	storetest.MustCreateLegacyVelocityKey(t, s, "key_legacy")
	s.Close()

	// Put the schema back as it was before 0031.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `DELETE FROM schema_migrations WHERE name LIKE '%0031_velocity_aliases.sql'`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)

	storetest.CheckVelocityAliases(t, MustOpen(t, dsn), "key_legacy")
}

// 0036_repeat_fingerprints sets repeat_rule on the reservations a key with
// the repeat rule already has, so that they keep counting.
func TestMigrate_RepeatFingerprints(t *testing.T) {
	ctx := context.Background()
	dsn := MustDatabase(t, MustServerDSN(t))
	s := MustOpen(t, dsn)
	repeat := &keybrake.Guards{Breaker: &keybrake.Breaker{RepeatBody: 3, RepeatWindowSeconds: 60}}
	storetest.MustCreateGuardedKey(t, s, "key_a", keybrake.Caps{}, repeat)
	for _, idem := range []string{"a1", "a2"} {
		if res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: storetest.NewCharge("key_a", idem, "cus_1", storetest.USD(1)), Now: storetest.T0}); err != nil || res.Guard != nil {
			t.Fatalf("Reserve %s: %+v, %v", idem, res, err)
		}
	}
	s.Close()

	// Put the rows back as they were before 0036.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE reservations SET repeat_rule = false`,
		`DELETE FROM schema_migrations WHERE name LIKE '%0036_repeat_fingerprints.sql'`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close(ctx)

	s2 := MustOpen(t, dsn)
	res, err := s2.Reserve(ctx, keybrake.ReserveArgs{Reservation: storetest.NewCharge("key_a", "a3", "cus_1", storetest.USD(1)), Now: storetest.T0})
	if err != nil || res.Guard == nil || res.Guard.Rule != keybrake.BreakerRepeat {
		t.Fatalf("third repeat after 0036: %+v, %v", res, err)
	}
}
