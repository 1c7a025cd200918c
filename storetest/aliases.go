package storetest

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

// legacyVelocity is a key's velocity limits as stored before the admin API
// named every alias of the operations a limit names (stripe.Aliases): one
// limit naming refunds.create only, one per name of every alias group,
// a mixed list, and one naming nothing (every operation), with the lists
// the migration must leave them with.
func legacyVelocity() (limits []keybrake.VelocityLimit, want [][]string) {
	add := func(ops, w []string) {
		limits = append(limits, keybrake.VelocityLimit{Name: "limit", Per: keybrake.PerKey, Operations: ops, Limit: 1, WindowSeconds: 3600})
		want = append(want, w)
	}
	add([]string{"refunds.create"}, []string{"refunds.create", "charges.refund", "charges.refunds.create"})
	for _, g := range stripe.AliasGroups() {
		for _, name := range g {
			add([]string{name}, g)
		}
	}
	add([]string{"charges.create", "charges.refund", "payment_intents.create", "refunds.create"},
		[]string{"charges.create", "refunds.create", "charges.refund", "charges.refunds.create", "payment_intents.create"})
	add(nil, nil)
	return limits, want
}

// MustCreateLegacyVelocityKey stores key id with velocity limits that name
// operations without their aliases (legacyVelocity), as keys saved before
// the aliases were; CheckVelocityAliases checks it once the store's
// migration has named them.
func MustCreateLegacyVelocityKey(tb testing.TB, s keybrake.Store, id string) {
	tb.Helper()
	limits, _ := legacyVelocity()
	MustCreateGuardedKey(tb, s, id, keybrake.Caps{}, &keybrake.Guards{Velocity: limits})
}

// CheckVelocityAliases checks key id of MustCreateLegacyVelocityKey after
// the store's migration ran: every limit names the aliases of what it
// named, in the admin API's order, and the limit of one refunds.create an
// hour refuses a second refund by the legacy path (charges.refund).
func CheckVelocityAliases(t *testing.T, s keybrake.Store, id string) {
	t.Helper()
	_, want := legacyVelocity()
	k := mustFindKey(t, s, id)
	if k.Guards == nil || len(k.Guards.Velocity) != len(want) {
		t.Fatalf("velocity limits after the migration: %+v", k.Guards)
	}
	for i, v := range k.Guards.Velocity {
		if !reflect.DeepEqual(v.Operations, want[i]) && !(len(v.Operations) == 0 && len(want[i]) == 0) {
			t.Errorf("limit %d names %q, want %q", i, v.Operations, want[i])
		}
	}
	ctx := context.Background()
	for i, idem := range []string{"refund-1", "refund-2"} {
		r := NewReservation(id, idem, 1_000_000)
		r.Operation = "charges.refund"
		res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: r, Now: T0.Add(time.Duration(i) * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if refused := res.Guard != nil && res.Guard.Guard == keybrake.GuardVelocity; refused != (i == 1) {
			t.Fatalf("refund %d by its legacy path: guard %+v; a limit of one refunds.create an hour must count it", i+1, res.Guard)
		}
	}
}
