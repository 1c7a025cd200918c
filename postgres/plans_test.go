package postgres_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/storetest"
)

// TestFreshServerPlans measures what PostgreSQL spends on capped charges
// on a fresh server, where no table has statistics yet and every session
// plans each statement of the store's PL/pgSQL functions on first use: it
// drives KEYBRAKE_PLANS_N (default 2,000) capped $1.00 charges at one
// client through the store, as TestChargeWrites does (Reserve, SettleLater,
// AddEvents in batches of eight), on a key with caps only and on one with
// caps and guards (a velocity limit and the breaker's repeat and spend
// rules, none of which trips), and at eight clients on eight capped keys
// (whose reservations the store batches into keybrake_reserve_many), and
// reports per charge:
//
//   - each function's calls and its self and total time
//     (pg_stat_user_functions, track_functions = all);
//   - the statements planned, from pg_stat_statements (track = all,
//     track_planning = on): plans against calls, nested statements
//     included. A statement under a generic plan is planned once a
//     session; one under custom plans, every call;
//   - the server's CPU (/proc) and the client's wall time, both noisy on a
//     shared machine.
//
// It starts a server of its own (scripts/pg, with pg_stat_statements
// preloaded), so it needs the shared one only to know PostgreSQL is there:
//
//	scripts/pg run -- go test ./postgres/ -run TestFreshServerPlans -v
//
// Each case runs twice per pair, in a fresh schema and fresh sessions each
// time: as migrated (the request path's functions pinned to generic plans,
// migration 0042) and with the functions' plan_cache_mode reset to the
// server's (auto), as before 0042. KEYBRAKE_PLANS_PAIRS sets the pairs
// (default 1).
//
// It asserts what is deterministic: at one client every charge went
// through keybrake_reserve, and, as migrated, no statement of the store's
// functions is planned more than a few times a session.
func TestFreshServerPlans(t *testing.T) {
	server, dataDir := MustScratchCluster(t)
	ctx := context.Background()
	n, pairs := 2000, 1
	if v, err := strconv.Atoi(os.Getenv("KEYBRAKE_PLANS_N")); err == nil && v > 0 {
		n = v
	}
	if v, err := strconv.Atoi(os.Getenv("KEYBRAKE_PLANS_PAIRS")); err == nil && v > 0 {
		pairs = v
	}
	// pg_stat_statements' settings exist once it is loaded: two restarts.
	var conn *pgx.Conn
	for _, qs := range [][]string{{`ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'`, `ALTER SYSTEM SET track_functions = 'all'`},
		{`ALTER SYSTEM SET pg_stat_statements.track = 'all'`, `ALTER SYSTEM SET pg_stat_statements.track_planning = on`}} {
		c, err := pgx.Connect(ctx, server)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if _, err := c.Exec(ctx, q); err != nil {
				t.Logf("%s: %v", q, err)
			}
		}
		c.Close(ctx)
		MustPG(t, "pause", dataDir)
		MustPG(t, "resume", dataDir)
	}
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
	havePGSS := err == nil
	if err != nil {
		t.Logf("no pg_stat_statements (%v): plans not counted", err)
	}

	type result struct {
		wall, cpu   time.Duration
		plansPerRun float64 // statements planned per charge, nested ones included
		funcs, hot  string
		maxPlans    int64  // the most plans of one statement of keybrake's functions
		maxPlanned  string // that statement
		reserves    int64  // calls of keybrake_reserve
		batches     int64  // of keybrake_reserve_many
	}
	run := func(t *testing.T, guarded, pinned bool, app string, clients int) result {
		dsn := MustDatabase(t, server)
		schema := dsn[strings.LastIndex(dsn, "=")+1:]
		dsn = withParam(dsn, "application_name", app)
		s := MustOpen(t, dsn)
		if !pinned {
			// As before 0042: the functions plan as the session says.
			rows, err := conn.Query(ctx, `SELECT p.oid::regprocedure::text FROM pg_proc p
				WHERE p.pronamespace = $1::regnamespace AND p.proconfig IS NOT NULL`, schema)
			if err != nil {
				t.Fatal(err)
			}
			fns, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range fns {
				if _, err := conn.Exec(ctx, "ALTER FUNCTION "+f+" RESET plan_cache_mode"); err != nil {
					t.Fatal(err)
				}
			}
		}
		caps := keybrake.Caps{Daily: storetest.Ptr(storetest.USD(1_000_000)), Monthly: storetest.Ptr(storetest.USD(10_000_000))}
		if guarded {
			for c := range clients {
				storetest.MustCreateGuardedKey(t, s, fmt.Sprintf("key_%d", c), caps, &keybrake.Guards{
					Velocity: []keybrake.VelocityLimit{{Name: "v", Per: keybrake.PerKey, Limit: 1_000_000, WindowSeconds: 3600}},
					Breaker: &keybrake.Breaker{RepeatBody: 1000, RepeatWindowSeconds: 60,
						SpendMultiple: 1000, SpendWindowSeconds: 60, BaselineSeconds: 3600},
				})
			}
		} else {
			for c := range clients {
				storetest.MustCreateCappedKey(t, s, fmt.Sprintf("key_%d", c), "UTC", caps)
			}
		}
		funcs0 := functionStats(t, conn, schema)
		if havePGSS {
			if _, err := conn.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
				t.Fatal(err)
			}
		}
		// Each client charges its own key, one charge after another.
		var failed atomic.Bool
		fail := func(format string, args ...any) {
			failed.Store(true)
			t.Errorf(format, args...)
		}
		client := func(c int) {
			key := fmt.Sprintf("key_%d", c)
			var batch []*keybrake.Event
			for i := c; i < n; i += clients {
				now := storetest.T0.Add(time.Duration(i) * time.Millisecond)
				r := storetest.NewReservation(key, fmt.Sprintf("idem_%d", i), storetest.USD(1))
				sum := sha256.Sum256([]byte(r.Request.Body))
				r.Fingerprint = hex.EncodeToString(sum[:])
				res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: r, Now: now})
				if err != nil || res.Reservation == nil {
					fail("Reserve: %+v, %v", res, err)
					return
				}
				chID := fmt.Sprintf("ch_%x", sha256.Sum256([]byte(res.Reservation.ID)))[:27]
				err = s.SettleLater(ctx, keybrake.SettleArgs{ID: res.Reservation.ID, State: keybrake.StateSettled, SettledMicros: storetest.USD(1),
					Amount: 100, Currency: "usd", ObjectID: chID, UpstreamStatus: 200, Now: now}, func(_ *keybrake.Reservation, err error) {
					if err != nil {
						fail("SettleLater: %v", err)
					}
				})
				if err != nil {
					fail("SettleLater: %v", err)
					return
				}
				batch = append(batch, &keybrake.Event{KeyID: key, Time: now, Operation: "charges.create", Method: "POST",
					Decision: keybrake.DecisionAllow, UpstreamStatus: 200, ObjectID: chID, RequestID: fmt.Sprintf("req_%d", i),
					IdempotencyKey: r.IdempotencyKey, ReservationID: res.Reservation.ID, Amount: 100, Currency: "usd", Micros: storetest.USD(1), Path: "/v1/charges"})
				if len(batch) == 8 || i+clients >= n {
					if err := s.AddEvents(ctx, batch); err != nil {
						fail("AddEvents: %v", err)
						return
					}
					batch = nil
				}
			}
		}
		cpu0, start := serverCPUOf(dataDir), time.Now()
		var wg sync.WaitGroup
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				client(c)
			}()
		}
		wg.Wait()
		if failed.Load() {
			t.FailNow()
		}
		if err := s.FlushSettlements(ctx); err != nil {
			t.Fatal(err)
		}
		var out result
		out.wall = time.Since(start) / time.Duration(n)
		if cpu1 := serverCPUOf(dataDir); cpu0 >= 0 && cpu1 >= 0 {
			out.cpu = (cpu1 - cpu0) / time.Duration(n)
		}
		if havePGSS {
			out.plansPerRun, out.hot, out.maxPlans, out.maxPlanned = planStats(t, conn, n)
		}
		// A backend flushes its function statistics when it exits, before
		// it leaves pg_stat_activity: close the store's sessions and wait
		// for them to be gone.
		s.Close()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var left int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&left); err != nil {
				t.Fatal(err)
			}
			if left == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d sessions of %s still open", left, app)
			}
			time.Sleep(10 * time.Millisecond) // polling for a condition, not a delay
		}
		funcs1 := functionStats(t, conn, schema)
		out.reserves = funcs1["keybrake_reserve"].calls - funcs0["keybrake_reserve"].calls
		out.batches = funcs1["keybrake_reserve_many"].calls - funcs0["keybrake_reserve_many"].calls
		var names []string
		for f := range funcs1 {
			if funcs1[f].calls > funcs0[f].calls {
				names = append(names, f)
			}
		}
		sort.Strings(names)
		var b strings.Builder
		for _, f := range names {
			a, z := funcs0[f], funcs1[f]
			fmt.Fprintf(&b, "\n    %-28s %5.2f calls/charge  self %4.0f µs/call  total %4.0f µs/call", f,
				float64(z.calls-a.calls)/float64(n), (z.self-a.self)*1000/float64(z.calls-a.calls), (z.total-a.total)*1000/float64(z.calls-a.calls))
		}
		out.funcs = b.String()
		return out
	}

	for _, tc := range []struct {
		name    string
		guarded bool
		clients int
	}{{"Capped", false, 1}, {"Guarded", true, 1}, {"Capped8Clients", false, 8}} {
		t.Run(tc.name, func(t *testing.T) {
			for p := range pairs {
				for _, pinned := range []bool{true, false} {
					mode := map[bool]string{true: "pinned (0042)", false: "unpinned"}[pinned]
					r := run(t, tc.guarded, pinned, fmt.Sprintf("pgplan_%s_%d_%t", tc.name, p, pinned), tc.clients)
					t.Logf("%s, pair %d, %s, %d charges: PostgreSQL CPU %d µs/charge, client %d µs/charge (noisy: a shared machine); statements planned %.2f/charge, most plans of one function statement %d (%s); functions:%s\n  statements planned more than once per 10 charges:%s",
						tc.name, p+1, mode, n, r.cpu.Microseconds(), r.wall.Microseconds(), r.plansPerRun, r.maxPlans, r.maxPlanned, r.funcs, r.hot)
					if tc.clients > 1 {
						t.Logf("%s: %d reservations through keybrake_reserve, %d keybrake_reserve_many batches", mode, r.reserves, r.batches)
					} else if r.reserves != int64(n) {
						t.Errorf("%s: keybrake_reserve ran %d times for %d charges", mode, r.reserves, n)
					}
					// Pinned, a statement is planned once a session (a few
					// sessions) and again only when its table's statistics
					// change (autoanalyze): never once a charge. (At eight
					// clients the sessions are more, and pg_stat_statements
					// counts alike statements, such as status := 'ok' and
					// status := 'over', as one.)
					if pinned && havePGSS && tc.clients == 1 && r.maxPlans > int64(n/10) {
						t.Errorf("pinned: a statement of keybrake's functions was planned %d times in %d charges: %s", r.maxPlans, n, r.maxPlanned)
					}
				}
			}
		})
	}
}

type funcStat struct {
	calls       int64
	self, total float64 // ms
}

// functionStats reads pg_stat_user_functions for schema's functions.
func functionStats(t *testing.T, conn *pgx.Conn, schema string) map[string]funcStat {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT funcname, calls, self_time, total_time FROM pg_stat_user_functions WHERE schemaname = $1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]funcStat{}
	for rows.Next() {
		var name string
		var f funcStat
		if err := rows.Scan(&name, &f.calls, &f.self, &f.total); err != nil {
			t.Fatal(err)
		}
		g := m[name] // overloads add up
		m[name] = funcStat{g.calls + f.calls, g.self + f.self, g.total + f.total}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

// planStats reads pg_stat_statements since its reset: plans per charge of
// every statement, the statements planned more than once per ten charges,
// and the most plans of one statement of keybrake's functions (not
// top-level: a statement of the store's own, prepared by pgx, has its
// plans counted in the total only).
func planStats(t *testing.T, conn *pgx.Conn, n int) (perCharge float64, hot string, maxPlans int64, maxPlanned string) {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT toplevel, plans, calls, regexp_replace(left(query, 110), '\s+', ' ', 'g')
		FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_%' ORDER BY plans DESC, calls DESC`)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	var b strings.Builder
	for rows.Next() {
		var top bool
		var plans, calls int64
		var q string
		if err := rows.Scan(&top, &plans, &calls, &q); err != nil {
			t.Fatal(err)
		}
		total += plans
		if !top && plans > maxPlans {
			maxPlans, maxPlanned = plans, q
		}
		if plans*10 > int64(n) {
			fmt.Fprintf(&b, "\n    %6d plans %6d calls  top=%-5t %s", plans, calls, top, q)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if b.Len() == 0 {
		b.WriteString(" none")
	}
	return float64(total) / float64(n), b.String(), maxPlans, maxPlanned
}
