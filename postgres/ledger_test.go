package postgres_test

import (
	"testing"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/ledgertest"
)

func TestLedger(t *testing.T) {
	server := MustServerDSN(t)
	ledgertest.Run(t, func(t *testing.T) keybrake.Ledger {
		return MustOpen(t, MustDatabase(t, server))
	})
}

func TestLedger_TwoReplicas(t *testing.T) {
	// Two replicas on one database: a claim in one is a held lease in the
	// other.
	dsn := MustDatabase(t, MustServerDSN(t))
	a, b := MustOpen(t, dsn), MustOpen(t, dsn)
	ledgertest.MustClaim(t, a, ledgertest.NewEntry("kb_a"), "owner_a", ledgertest.T0)
	if res := ledgertest.Claim(t, b, ledgertest.NewEntry("kb_a"), "owner_b", ledgertest.T0); res.Claimed {
		t.Fatalf("second replica claimed a held entry: %+v", res.Entry)
	}
	ledgertest.MustClaim(t, b, ledgertest.NewEntry("kb_a"), "owner_b", ledgertest.T0.Add(ledgertest.Lease))
}
