package postgres_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/postgres"
	"github.com/keybrake/keybrake/storetest"
)

// TestReserveStatements measures, statement by statement, where
// PostgreSQL's time goes on a capped $1.00 charge at one client: the
// reservation (one keybrake_reserve call) and what runs inside it (its own
// statements, the triggers they fire and those triggers' statements), the
// settlement and the audit event, driven through the store as serve drives
// them (Reserve, SettleLater, AddEvents in batches of eight, as
// TestFreshServerPlans and TestChargeWrites do), on a key with caps only
// and on one with caps and guards (a velocity limit, the breaker's repeat
// and spend rules; none trips).
//
// It starts a server of its own (scripts/pg) with pg_stat_statements
// preloaded and track = all, so that the statements of PL/pgSQL functions
// and triggers are counted on their own (toplevel false), and
// track_functions = all (calls of each function, triggers included):
//
//	scripts/pg run -- go test ./postgres/ -run TestReserveStatements -v
//
// KEYBRAKE_STMT_N sets the charges a run (default 2,000, after 200 of
// warm-up in other sessions, so that each statement's plan is made before
// the count starts) and KEYBRAKE_STMT_RUNS the runs of each case
// (default 3, alternated). It prints per run, and min/median/max over the
// runs, for each statement: calls a charge, execution µs a call (planning
// is not counted: track_planning is off), µs a charge, and the shared
// buffers it touched a call, which unlike time does not move with the
// machine's load; then each function's calls a charge. It prints the
// floor measured on the same server in the same run: a round trip of
// SELECT 1, and of a one-row INSERT into a two-column table in its own
// transaction (its commit included), as the client sees them and as the
// server counts them.
//
// It asserts only what is deterministic: every charge made exactly one
// keybrake_reserve call, which fired neither keybrake_refuse_suspended
// nor keybrake_alert_threshold, and on the capped key touched at most 100
// shared buffers a call (migration 0043; KEYBRAKE_STMT_BEFORE=1
// skips that check, to measure a build before it). See docs/performance.md
// "PostgreSQL: the reservation's statements (pgstmt)". KEYBRAKE_STMT_EXPLAIN=1
// also prints auto_explain's plans of three more reservations (times
// inflated by the logging).
func TestReserveStatements(t *testing.T) {
	server, dataDir := MustScratchCluster(t)
	ctx := context.Background()
	n, runs := 2000, 3
	if v, err := strconv.Atoi(os.Getenv("KEYBRAKE_STMT_N")); err == nil && v > 0 {
		n = v
	}
	if v, err := strconv.Atoi(os.Getenv("KEYBRAKE_STMT_RUNS")); err == nil && v > 0 {
		runs = v
	}
	for _, qs := range [][]string{{`ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'`, `ALTER SYSTEM SET track_functions = 'all'`},
		{`ALTER SYSTEM SET pg_stat_statements.track = 'all'`, `ALTER SYSTEM SET pg_stat_statements.track_planning = off`, `ALTER SYSTEM SET pg_stat_statements.max = 10000`}} {
		c, err := pgx.Connect(ctx, server)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if _, err := c.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
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
	if rate := os.Getenv("KEYBRAKE_STMT_AUTOEXPLAIN"); rate != "" {
		// A sample (rate, 0 to 1) of the statements, nested ones included, with its
		// plan, buffers and triggers, into the server's log, which is
		// copied to KEYBRAKE_STMT_AUTOEXPLAIN_LOG at the end.
		for _, q := range []string{`LOAD 'auto_explain'`, `ALTER SYSTEM SET session_preload_libraries = 'auto_explain'`, `ALTER SYSTEM SET auto_explain.log_min_duration = 0`,
			`ALTER SYSTEM SET auto_explain.sample_rate = ` + rate,
			`ALTER SYSTEM SET auto_explain.log_nested_statements = on`, `ALTER SYSTEM SET auto_explain.log_analyze = on`,
			`ALTER SYSTEM SET auto_explain.log_buffers = on`, `ALTER SYSTEM SET auto_explain.log_triggers = on`, `SELECT pg_reload_conf()`} {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		if to := os.Getenv("KEYBRAKE_STMT_AUTOEXPLAIN_LOG"); to != "" {
			defer func() {
				if raw, err := os.ReadFile(filepath.Join(filepath.Dir(dataDir), "log")); err == nil {
					_ = os.WriteFile(to, raw, 0o644)
				}
			}()
		}
	}
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		t.Skipf("no pg_stat_statements: %v", err)
	}

	type stmtStat struct {
		calls, us, blks, wal float64 // per charge (calls) and per call
		top                  bool
	}
	type result struct {
		stmts    map[string]stmtStat
		funcs    map[string]float64 // calls a charge
		reserve  time.Duration      // the client's median Reserve call
		reserveU float64            // the server's keybrake_reserve statement, µs a call
		floorSel time.Duration      // the client's median SELECT 1
		floorIns time.Duration      // the client's median INSERT + commit
		selU     float64            // server µs of SELECT 1
		insU     float64            // server µs of the INSERT (its commit is not in it)
		inside   float64            // statements of functions and triggers per reservation
		// CPU µs a call of one backend of its own (/proc), which unlike
		// the times above does not count the time it waited for a core:
		// keybrake_reserve alone, and the floor's INSERT + commit and
		// SELECT 1.
		cpuReserve, cpuInsert, cpuSelect float64
		io                               string // buffers by table and index, and HOT updates, a charge
	}
	// waitGone waits until the sessions of app have exited, when a
	// backend flushes its function statistics.
	waitGone := func(t *testing.T, app string) {
		deadline := time.Now().Add(30 * time.Second)
		for {
			var left int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&left); err != nil {
				t.Fatal(err)
			}
			if left == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d sessions of %s still open", left, app)
			}
			time.Sleep(10 * time.Millisecond) // polling for a condition, not a delay
		}
	}
	run := func(t *testing.T, guarded bool, app string) result {
		base := MustDatabase(t, server)
		schema := base[strings.LastIndex(base, "=")+1:]
		caps := keybrake.Caps{Daily: storetest.Ptr(storetest.USD(1_000_000)), Monthly: storetest.Ptr(storetest.USD(10_000_000))}
		charges := func(s *postgres.Store, from, to int, lat *[]time.Duration) {
			var batch []*keybrake.Event
			for i := from; i < to; i++ {
				now := storetest.T0.Add(time.Duration(i) * time.Millisecond)
				r := storetest.NewReservation("key_0", fmt.Sprintf("idem_%d", i), storetest.USD(1))
				sum := sha256.Sum256([]byte(r.Request.Body))
				r.Fingerprint = hex.EncodeToString(sum[:])
				t0 := time.Now()
				res, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: r, Now: now})
				if lat != nil {
					*lat = append(*lat, time.Since(t0))
				}
				if err != nil || res.Reservation == nil {
					t.Fatalf("Reserve: %+v, %v", res, err)
				}
				chID := fmt.Sprintf("ch_%x", sha256.Sum256([]byte(res.Reservation.ID)))[:27]
				if err := s.SettleLater(ctx, keybrake.SettleArgs{ID: res.Reservation.ID, State: keybrake.StateSettled, SettledMicros: storetest.USD(1),
					Amount: 100, Currency: "usd", ObjectID: chID, UpstreamStatus: 200, Now: now}, func(_ *keybrake.Reservation, err error) {
					if err != nil {
						t.Errorf("SettleLater: %v", err)
					}
				}); err != nil {
					t.Fatalf("SettleLater: %v", err)
				}
				batch = append(batch, &keybrake.Event{KeyID: "key_0", Time: now, Operation: "charges.create", Method: "POST",
					Decision: keybrake.DecisionAllow, UpstreamStatus: 200, ObjectID: chID, RequestID: fmt.Sprintf("req_%d", i),
					IdempotencyKey: r.IdempotencyKey, ReservationID: res.Reservation.ID, Amount: 100, Currency: "usd", Micros: storetest.USD(1), Path: "/v1/charges"})
				if len(batch) == 8 || i+1 == to {
					if err := s.AddEvents(ctx, batch); err != nil {
						t.Fatalf("AddEvents: %v", err)
					}
					batch = nil
				}
			}
			if err := s.FlushSettlements(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// Warm-up, in sessions of its own: the key, 200 charges.
		warm := MustOpen(t, withParam(base, "application_name", app+"_warm"))
		if guarded {
			storetest.MustCreateGuardedKey(t, warm, "key_0", caps, &keybrake.Guards{
				Velocity: []keybrake.VelocityLimit{{Name: "v", Per: keybrake.PerKey, Limit: 1_000_000, WindowSeconds: 3600}},
				Breaker: &keybrake.Breaker{RepeatBody: 1000, RepeatWindowSeconds: 60,
					SpendMultiple: 1000, SpendWindowSeconds: 60, BaselineSeconds: 3600},
			})
		} else {
			storetest.MustCreateCappedKey(t, warm, "key_0", "UTC", caps)
		}
		charges(warm, 0, 200, nil)
		warm.Close()
		waitGone(t, app+"_warm")

		s := MustOpen(t, withParam(base, "application_name", app))
		// The first charge of the session plans its statements; then
		// the count starts.
		funcs0 := functionStats(t, conn, schema)
		io0 := ioStats(t, conn, schema)
		charges(s, 200, 201, nil)
		if _, err := conn.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
			t.Fatal(err)
		}
		lat := make([]time.Duration, 0, n)
		charges(s, 201, 201+n, &lat)

		// The floor, on a session of the same kind: a round trip, and a
		// one-row insert with its commit.
		fc, err := pgx.Connect(ctx, withParam(base, "application_name", app+"_floor"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fc.Exec(ctx, `CREATE TABLE floor_rows (id bigint PRIMARY KEY, v text NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		var sel, ins []time.Duration
		for i := range n {
			t0 := time.Now()
			if _, err := fc.Exec(ctx, `SELECT 1`); err != nil {
				t.Fatal(err)
			}
			sel = append(sel, time.Since(t0))
			t0 = time.Now()
			if _, err := fc.Exec(ctx, `INSERT INTO floor_rows (id, v) VALUES ($1, 'x')`, i); err != nil {
				t.Fatal(err)
			}
			ins = append(ins, time.Since(t0))
		}
		fc.Close(ctx)

		var out result
		out.reserve, out.floorSel, out.floorIns = median(lat), median(sel), median(ins)
		out.stmts = map[string]stmtStat{}
		rows, err := conn.Query(ctx, `SELECT toplevel, calls, total_exec_time, shared_blks_hit + shared_blks_read + local_blks_hit + local_blks_read, wal_records,
			regexp_replace(left(query, 120), '\s+', ' ', 'g'), query LIKE '%FROM keybrake_reserve(%' FROM pg_stat_statements
			WHERE query NOT LIKE '%pg_stat_%' AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var top bool
			var calls, blks, walr int64
			var ms float64
			var q string
			var isReserve bool
			if err := rows.Scan(&top, &calls, &ms, &blks, &walr, &q, &isReserve); err != nil {
				t.Fatal(err)
			}
			k := q
			if top {
				k = "[top] " + q
			}
			prev := out.stmts[k]
			c := prev.calls*float64(n) + float64(calls)
			out.stmts[k] = stmtStat{calls: c / float64(n), us: (prev.us*prev.calls*float64(n) + ms*1000) / c,
				blks: (prev.blks*prev.calls*float64(n) + float64(blks)) / c, wal: (prev.wal*prev.calls*float64(n) + float64(walr)) / c, top: top}
			switch {
			case top && isReserve:
				out.reserveU = ms * 1000 / float64(calls)
				// Migration 0043: a capped reservation touches ~40
				// buffers, however many reservations its key has; a
				// replay lookup whose generic plan reads the key's
				// reservations through (key_id, created_at) touched
				// 200-300 at 2,000.
				if b := float64(blks) / float64(calls); !guarded && b > 100 && os.Getenv("KEYBRAKE_STMT_BEFORE") == "" {
					t.Errorf("keybrake_reserve touched %.0f buffers a call on a capped key, want at most 100", b)
				}
			case top && q == "SELECT $1":
				out.selU = ms * 1000 / float64(calls)
			case top && strings.HasPrefix(q, "INSERT INTO floor_rows"):
				out.insU = ms * 1000 / float64(calls)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		s.Close()
		waitGone(t, app)
		funcs1 := functionStats(t, conn, schema)
		out.io = ioDelta(io0, ioStats(t, conn, schema), n+1)
		out.funcs = map[string]float64{}
		for f, z := range funcs1 {
			if c := z.calls - funcs0[f].calls; c > 0 {
				out.funcs[f] = float64(c) / float64(n+1) // the first charge of the session too
			}
		}
		if got := out.funcs["keybrake_reserve"]; got != 1 {
			t.Errorf("keybrake_reserve ran %.3f times a charge, want 1", got)
		}
		// Migration 0043: the reservation does the triggers' work itself.
		for _, f := range []string{"keybrake_refuse_suspended", "keybrake_alert_threshold"} {
			if got := out.funcs[f]; got > 0 && os.Getenv("KEYBRAKE_STMT_BEFORE") == "" {
				t.Errorf("%s ran %.3f times a charge, want 0 (0043: keybrake_reserve does its work)", f, got)
			}
		}
		if os.Getenv("KEYBRAKE_STMT_EXPLAIN") != "" {
			explainReserve(t, withParam(base, "application_name", app+"_explain"))
		}
		out.cpuReserve, out.cpuInsert, out.cpuSelect = backendCPU(t, withParam(base, "application_name", app+"_cpu"), n)
		return out
	}

	cases := []struct {
		name    string
		guarded bool
	}{{"Capped", false}, {"Guarded", true}}
	results := map[string][]result{}
	for r := range runs {
		for _, tc := range cases {
			res := run(t, tc.guarded, fmt.Sprintf("pgstmt_%s_%d", strings.ToLower(tc.name), r))
			results[tc.name] = append(results[tc.name], res)
			t.Logf("%s run %d: backend CPU a call: keybrake_reserve %.1f µs, INSERT + commit %.1f µs, SELECT 1 %.1f µs", tc.name, r+1, res.cpuReserve, res.cpuInsert, res.cpuSelect)
			t.Logf("%s run %d: Reserve %d µs at the client (median), keybrake_reserve %.0f µs in the server (mean); floor: SELECT 1 %d µs at the client, %.1f µs in the server; INSERT + commit %d µs at the client, %.1f µs in the server (without its commit)",
				tc.name, r+1, res.reserve.Microseconds(), res.reserveU, res.floorSel.Microseconds(), res.selU, res.floorIns.Microseconds(), res.insU)
		}
	}
	mmm := func(xs []float64) string {
		slices.Sort(xs)
		return fmt.Sprintf("%6.1f %6.1f %6.1f", xs[0], xs[len(xs)/2], xs[len(xs)-1])
	}
	for _, tc := range cases {
		rs := results[tc.name]
		keys := map[string]bool{}
		for _, r := range rs {
			for k := range r.stmts {
				keys[k] = true
			}
		}
		type line struct {
			k   string
			med float64
		}
		var lines []line
		for k := range keys {
			var per []float64
			for _, r := range rs {
				per = append(per, r.stmts[k].calls*r.stmts[k].us)
			}
			slices.Sort(per)
			lines = append(lines, line{k, per[len(per)/2]})
		}
		sort.Slice(lines, func(i, j int) bool { return lines[i].med > lines[j].med })
		var b strings.Builder
		fmt.Fprintf(&b, "%s, %d runs of %d charges; per statement: calls/charge | µs/call min med max | µs/charge min med max | buffers/call | WAL records/call", tc.name, len(rs), n)
		var inside float64
		for _, l := range lines {
			var calls, us, uc, blks, walr []float64
			for _, r := range rs {
				st := r.stmts[l.k]
				calls, us, uc, blks, walr = append(calls, st.calls), append(us, st.us), append(uc, st.calls*st.us), append(blks, st.blks), append(walr, st.wal)
			}
			slices.Sort(calls)
			if calls[len(calls)/2] < 0.01 {
				continue
			}
			if !strings.HasPrefix(l.k, "[top]") && !strings.Contains(l.k, "pg_catalog") {
				inside += calls[len(calls)/2]
			}
			slices.Sort(blks)
			slices.Sort(walr)
			fmt.Fprintf(&b, "\n  %6.3f | %s | %s | %5.1f | %4.2f | %s", calls[len(calls)/2], mmm(us), mmm(uc), blks[len(blks)/2], walr[len(walr)/2], l.k)
		}
		fnames := map[string]bool{}
		for _, r := range rs {
			for f := range r.funcs {
				fnames[f] = true
			}
		}
		var fl []string
		for f := range fnames {
			fl = append(fl, f)
		}
		sort.Strings(fl)
		b.WriteString("\n  functions, calls/charge (median):")
		for _, f := range fl {
			var c []float64
			for _, r := range rs {
				c = append(c, r.funcs[f])
			}
			slices.Sort(c)
			fmt.Fprintf(&b, " %s %.3f;", f, c[len(c)/2])
		}
		var res, srv, sel, ins, selU, insU, cr, ci, cs []float64
		for _, r := range rs {
			cr, ci, cs = append(cr, r.cpuReserve), append(ci, r.cpuInsert), append(cs, r.cpuSelect)
			res, srv = append(res, float64(r.reserve.Microseconds())), append(srv, r.reserveU)
			sel, ins = append(sel, float64(r.floorSel.Microseconds())), append(ins, float64(r.floorIns.Microseconds()))
			selU, insU = append(selU, r.selU), append(insU, r.insU)
		}
		fmt.Fprintf(&b, "\n  Reserve at the client, µs (median of each run) min med max: %s; keybrake_reserve in the server, µs: %s", mmm(res), mmm(srv))
		fmt.Fprintf(&b, "\n  floor: SELECT 1 at the client %s, in the server %s; INSERT + commit at the client %s, in the server %s (µs)", mmm(sel), mmm(selU), mmm(ins), mmm(insU))
		for i, r := range rs {
			fmt.Fprintf(&b, "\n  run %d, a charge: %s", i+1, r.io)
		}
		fmt.Fprintf(&b, "\n  backend CPU µs a call, on a session of its own: keybrake_reserve %s; floor: INSERT + commit %s, SELECT 1 %s", mmm(cr), mmm(ci), mmm(cs))
		fmt.Fprintf(&b, "\n  statements inside functions and triggers a charge (reservation, settlement, events): %.2f", inside)
		t.Log(b.String())
	}
}

// explainReserve prints auto_explain's plans, with times, buffers and
// triggers, of every statement of three reservations on key_0.
func explainReserve(t *testing.T, dsn string) {
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { log.WriteString(n.Message + "\n") }
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, q := range []string{`LOAD 'auto_explain'`, `SET auto_explain.log_min_duration = 0`, `SET auto_explain.log_analyze = on`,
		`SET auto_explain.log_nested_statements = on`, `SET auto_explain.log_buffers = on`, `SET auto_explain.log_triggers = on`,
		`SET auto_explain.log_wal = on`, `SET client_min_messages = log`} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		now := storetest.T0.Add(time.Hour + time.Duration(i)*time.Millisecond)
		day, month := keybrake.Buckets(now, time.UTC)
		log.WriteString(fmt.Sprintf("---- reservation %d\n", i))
		if _, err := c.Exec(ctx, `SELECT status FROM keybrake_reserve($1, 'key_0', $2, $3, 'charges.create', 100, 'usd', 1000000, $4, $5,
			'POST', '/v1/charges', 'amount=100&currency=usd'::bytea, '', '', $6, '', '', false, '')`,
			fmt.Sprintf("res_explain_%d", i), fmt.Sprintf("idem_explain_%d", i), fmt.Sprintf("fp_explain_%d", i), day, month, now); err != nil {
			t.Fatal(err)
		}
	}
	t.Log(log.String())
}

// backendCPU measures on one session the CPU its backend spends (utime +
// stime in /proc, 10 ms ticks: n calls make it exact to a few µs a call)
// on n calls of keybrake_reserve on key_0 (no settlement between them),
// then on n one-row INSERTs, each with its commit, and n SELECT 1; µs a
// call each. -1 where /proc cannot be read.
func backendCPU(t *testing.T, dsn string, n int) (reserve, insert, sel float64) {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var pid int
	if err := c.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	cpu := func() time.Duration {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return -1
		}
		f := strings.Fields(string(raw)[strings.LastIndexByte(string(raw), ')')+1:])
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		return time.Duration(u+s) * time.Second / 100
	}
	measure := func(m int, call func(i int)) float64 {
		for i := range 50 { // plans made, caches warm
			call(-1 - i)
		}
		c0 := cpu()
		for i := range m {
			call(i)
		}
		if c1 := cpu(); c0 >= 0 && c1 >= 0 {
			return float64((c1 - c0).Microseconds()) / float64(m)
		}
		return -1
	}
	reserve = measure(n, func(i int) {
		now := storetest.T0.Add(2*time.Hour + time.Duration(i+100)*time.Millisecond)
		day, month := keybrake.Buckets(now, time.UTC)
		var status string
		if err := c.QueryRow(ctx, `SELECT status FROM keybrake_reserve($1, 'key_0', $2, $3, 'charges.create', 100, 'usd', 1000000, $4, $5,
			'POST', '/v1/charges', 'amount=100&currency=usd'::bytea, '', '', $6, '', '', false, '')`,
			fmt.Sprintf("res_cpu_%d", i), fmt.Sprintf("idem_cpu_%d", i), fmt.Sprintf("fp_cpu_%d", i), day, month, now).Scan(&status); err != nil || status != "ok" {
			t.Fatalf("keybrake_reserve: %q, %v", status, err)
		}
	})
	if _, err := c.Exec(ctx, `CREATE TABLE floor_cpu (id bigint PRIMARY KEY, v text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	insert = measure(n, func(i int) {
		if _, err := c.Exec(ctx, `INSERT INTO floor_cpu (id, v) VALUES ($1, 'x')`, i); err != nil {
			t.Fatal(err)
		}
	})
	sel = measure(n, func(int) {
		if _, err := c.Exec(ctx, `SELECT 1`); err != nil {
			t.Fatal(err)
		}
	})
	return reserve, insert, sel
}

type ioStat struct{ blks, upd, hot int64 }

// ioStats reads the buffers read or hit in each table and index of schema
// (pg_statio_user_tables and _indexes), and each table's updates and HOT
// updates, as flushed by the sessions that have exited.
func ioStats(t *testing.T, conn *pgx.Conn, schema string) map[string]ioStat {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT 'heap ' || relname, coalesce(heap_blks_hit + heap_blks_read, 0),
			(SELECT n_tup_upd FROM pg_stat_user_tables u WHERE u.relid = s.relid), (SELECT n_tup_hot_upd FROM pg_stat_user_tables u WHERE u.relid = s.relid)
			FROM pg_statio_user_tables s WHERE schemaname = $1
		UNION ALL SELECT indexrelname, coalesce(idx_blks_hit + idx_blks_read, 0), 0, 0 FROM pg_statio_user_indexes WHERE schemaname = $1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]ioStat{}
	for rows.Next() {
		var name string
		var st ioStat
		if err := rows.Scan(&name, &st.blks, &st.upd, &st.hot); err != nil {
			t.Fatal(err)
		}
		m[name] = st
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

// ioDelta says what changed from a to b per charge, the most first.
func ioDelta(a, b map[string]ioStat, n int) string {
	var names []string
	for k, z := range b {
		if z.blks-a[k].blks > int64(n)/10 {
			names = append(names, k)
		}
	}
	sort.Slice(names, func(i, j int) bool { return b[names[i]].blks-a[names[i]].blks > b[names[j]].blks-a[names[j]].blks })
	var sb strings.Builder
	for _, k := range names {
		d := ioStat{b[k].blks - a[k].blks, b[k].upd - a[k].upd, b[k].hot - a[k].hot}
		fmt.Fprintf(&sb, "%s %.1f", k, float64(d.blks)/float64(n))
		if d.upd > 0 {
			fmt.Fprintf(&sb, " (updates %.2f, HOT %.2f)", float64(d.upd)/float64(n), float64(d.hot)/float64(n))
		}
		sb.WriteString("; ")
	}
	return sb.String()
}

// median returns the median of ds.
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
