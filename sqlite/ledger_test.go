package sqlite_test

import (
	"testing"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/ledgertest"
)

func TestLedger(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) keybrake.Ledger {
		s, _ := MustOpen(t)
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestLedger_TwoStoresOneFile(t *testing.T) {
	// Two processes on one file: a claim in one is a held lease in the other.
	a, path := MustOpen(t)
	defer a.Close()
	b := MustReopen(t, path)
	ledgertest.MustClaim(t, a, ledgertest.NewEntry("kb_a"), "owner_a", ledgertest.T0)
	if res := ledgertest.Claim(t, b, ledgertest.NewEntry("kb_a"), "owner_b", ledgertest.T0); res.Claimed {
		t.Fatalf("second store claimed a held entry: %+v", res.Entry)
	}
	ledgertest.MustClaim(t, b, ledgertest.NewEntry("kb_a"), "owner_b", ledgertest.T0.Add(ledgertest.Lease))
}
