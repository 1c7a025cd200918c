package postgres_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/postgres"
	"github.com/keybrake/keybrake/storetest"
)

// pgScript is scripts/pg, relative to this package's directory (where go
// test runs the test binary).
const pgScript = "../scripts/pg"

// MustScratchCluster starts a second throwaway PostgreSQL cluster of the
// test's own through scripts/pg, so stopping it disturbs no other test, and
// removes it when the test ends. It returns the cluster's DSN and data dir.
func MustScratchCluster(tb testing.TB) (dsn, dataDir string) {
	tb.Helper()
	MustServerDSN(tb) // the binaries are there only where the shared server is
	cmd := exec.Command(pgScript, "start")
	cmd.Env = append(cmd.Environ(), "KEYBRAKE_PG_PORT=55329")
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("scripts/pg start: %v\n%s", err, stderrOf(err))
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "export KEYBRAKE_TEST_POSTGRES="); ok {
			dsn = v
		} else if v, ok := strings.CutPrefix(line, "export KEYBRAKE_TEST_POSTGRES_DATADIR="); ok {
			dataDir = v
		}
	}
	if dsn == "" || dataDir == "" {
		tb.Fatalf("scripts/pg start printed no DSN or data dir:\n%s", out)
	}
	tb.Cleanup(func() { MustPG(tb, "stop", dataDir) })
	return dsn, dataDir
}

// MustPG runs scripts/pg with args or fails the test.
func MustPG(tb testing.TB, args ...string) {
	tb.Helper()
	if out, err := exec.Command(pgScript, args...).CombinedOutput(); err != nil {
		tb.Fatalf("scripts/pg %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// wantUnavailable fails the test unless err is EUNAVAILABLE.
func wantUnavailable(tb testing.TB, what string, err error) {
	tb.Helper()
	if code := keybrake.ErrorCode(err); code != keybrake.EUNAVAILABLE {
		tb.Fatalf("%s: code = %q (%v), want %q", what, code, err, keybrake.EUNAVAILABLE)
	}
	if !strings.Contains(keybrake.ErrorMessage(err), "unavailable") {
		tb.Fatalf("%s: message %q does not say the store is unavailable", what, keybrake.ErrorMessage(err))
	}
}

// TestServerDown stops the server under a live Store: everything fails with
// EUNAVAILABLE (the proxy answers 503 and forwards nothing), and once the
// server is back the same Store works again without being reopened.
func TestServerDown(t *testing.T) {
	dsn, dataDir := MustScratchCluster(t)
	s := MustOpen(t, dsn)
	storetest.MustCreateCappedKey(t, s, "key_a", "UTC", keybrake.Caps{Total: storetest.Ptr(storetest.USD(10))})
	storetest.MustReserve(t, s, "key_a", "idem_1", storetest.USD(1), storetest.T0)

	MustPG(t, "pause", dataDir)

	// A bound on how long a refusal may take, not an assertion on time.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: storetest.NewReservation("key_a", "idem_2", storetest.USD(1)), Now: storetest.T0})
	wantUnavailable(t, "Reserve", err)
	_, err = s.Settle(ctx, keybrake.SettleArgs{ID: "rsv_x", State: keybrake.StateReleased, Now: storetest.T0})
	wantUnavailable(t, "Settle", err)
	_, err = s.FindKeyBySecretHash(ctx, storetest.NewKey("key_a").SecretHash)
	wantUnavailable(t, "FindKeyBySecretHash", err)
	wantUnavailable(t, "Ping", s.Ping(ctx))
	_, err = postgres.Open(ctx, dsn)
	wantUnavailable(t, "Open", err)

	MustPG(t, "resume", dataDir)

	// The very first request after the restart succeeds: the store drops
	// the pool's dead connections instead of failing on each of them.
	storetest.MustReserve(t, s, "key_a", "idem_2", storetest.USD(1), storetest.T0)
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("Ping after restart: %v", err)
	}
	sp := storetest.MustSpend(t, s, "key_a", storetest.T0, time.UTC)
	if sp.Total != storetest.USD(2) {
		t.Fatalf("total = %s, want 2.00", sp.Total)
	}
}
