package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/keybrake/keybrake/storetest"
)

// TestQueryPlans pins which index each read of reservations (and each read
// of the request path's functions of other tables) goes through
// (one of those named, where the planner may take either),
// so that dropping or narrowing an index (0036, 0037: what a charge writes)
// never leaves a read scanning the table. The statements are those of the
// store and of its SQL functions, with their parameters as the generic plan
// sees them ($n); enable_seqscan = off makes the planner take an index
// whenever one can serve, as it does on a large table, so a Seq Scan here
// means no index can.
func TestQueryPlans(t *testing.T) {
	ctx := context.Background()
	dsn := MustDatabase(t, MustServerDSN(t))
	s := MustOpen(t, dsn)
	for k := range 200 {
		storetest.MustCreateKey(t, s, storetest.NewKey(fmt.Sprintf("key_%d", k)))
	}
	s.Close()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// 50,000 reservations over 200 keys, mostly settled Stripe charges, a
	// tenth Twilio sends, a few open, held, released, guarded or counted:
	// the statistics of a store that has run a while.
	for _, q := range []string{`INSERT INTO reservations (id, key_id, idempotency_key, fingerprint, operation,
			amount, currency, micros, settled_micros, state, day, month,
			req_method, req_path, req_body, req_stripe_account, req_stripe_version,
			object_id, upstream_status, attempts, lease_owner, lease_until, created_at, updated_at,
			customer, dup_key, count_kind, count, repeat_rule)
		SELECT 'rsv_' || i, 'key_' || (i % 200), 'idem_' || i, md5(i::text),
			CASE WHEN i % 10 = 0 THEN 'twilio.messages.create' ELSE 'charges.create' END,
			100, 'usd', 1000000, 1000000, st, '2026-11-29', '2026-11',
			'POST', '/v1/charges', ''::bytea, '', '',
			CASE WHEN i % 10 = 0 THEN 'SM' || i WHEN st = 'settled' THEN 'ch_' || i ELSE '' END, 200, 0, '', NULL,
			'2026-11-29'::timestamptz + i * interval '1 second', '2026-11-29'::timestamptz + i * interval '1 second',
			'', CASE WHEN i % 20 = 0 THEN 'dup' || i ELSE '' END, CASE WHEN i % 50 = 0 THEN 'sms' ELSE '' END, 1, i % 200 < 10
		FROM generate_series(1, 50000) i,
		LATERAL (SELECT CASE i % 100 WHEN 0 THEN 'reserved' WHEN 1 THEN 'uncertain' WHEN 2 THEN 'held' WHEN 3 THEN 'released' ELSE 'settled' END AS st) x`,
		`ANALYZE reservations`,
		`SET enable_seqscan = off`, `SET plan_cache_mode = force_generic_plan`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, index, q string
	}{
		{"ByID", "reservations_pkey", `SELECT * FROM reservations WHERE id = $1::text`},
		{"Replay", "reservations_key_id_idempotency_key_key",
			`SELECT id FROM reservations WHERE key_id = $1::text AND idempotency_key = $2::text`},
		// FindReservations{KeyID}: a key's rows, sorted (no (key_id, seq) since 0037).
		{"KeyReservations", "reservations_", `SELECT * FROM reservations WHERE key_id = $1::text ORDER BY seq`},
		{"KeyReservationsByTime", "reservations_key_time",
			`SELECT * FROM reservations WHERE key_id = $1::text AND created_at >= $2::timestamptz AND created_at < $3::timestamptz ORDER BY seq`},
		{"TwilioObject", "reservations_object",
			`SELECT * FROM reservations WHERE object_id <> '' AND operation LIKE 'twilio.%' AND object_id = $1::text ORDER BY seq LIMIT 1`},
		{"TwilioIdenticalSends", "reservations_open_operation",
			`SELECT * FROM reservations WHERE created_at >= $1::timestamptz AND created_at < $2::timestamptz AND operation = $3::text
			 AND operation LIKE 'twilio.%' AND state IN ('reserved', 'uncertain') ORDER BY seq`},
		{"OpenOfAnOperation", "reservations_open",
			`SELECT * FROM reservations WHERE operation = $1::text AND state IN ('reserved', 'uncertain') ORDER BY seq`},
		{"LeaseUncertain", "reservations_open",
			`SELECT id FROM reservations WHERE (state = 'uncertain' OR (state = 'reserved' AND created_at < $1::timestamptz))
			 AND (lease_until IS NULL OR lease_until <= $2::timestamptz) ORDER BY seq LIMIT 10 FOR UPDATE SKIP LOCKED`},
		{"LeaseHeld", "reservations_held_due|reservations_held",
			`SELECT id FROM reservations WHERE state = 'held' AND operation = ANY($1::text[]) AND (lease_until IS NULL OR lease_until <= $2::timestamptz)
			 ORDER BY lease_until NULLS FIRST, seq LIMIT 10 FOR UPDATE SKIP LOCKED`},
		{"Held", "reservations_held", `SELECT COALESCE(SUM(micros), 0) FROM reservations WHERE key_id = $1::text AND state = 'held'`},
		// keybrake_guard_check's repeat rule and CountRefusal's.
		{"RepeatRule", "reservations_fingerprint",
			`SELECT 1 FROM reservations r WHERE r.key_id = $1::text AND r.repeat_rule AND r.fingerprint = $2::text AND r.created_at > $3::timestamptz LIMIT 3`},
		{"Duplicate", "reservations_dup",
			`SELECT r.id FROM reservations r WHERE r.key_id = $1::text AND r.dup_key = $2::text AND r.dup_key <> '' AND r.state <> 'released'
			 AND r.created_at > $3::timestamptz ORDER BY r.created_at DESC LIMIT 1`},
		// countUse (counts.go): count_kind <> '' proves the partial
		// indexes under a generic plan, which count_kind = $2 alone cannot.
		{"CountsDay", "reservations_counted",
			`SELECT SUM(count) FROM reservations WHERE key_id = $1::text AND count_kind = $2::text AND count_kind <> '' AND day = $3::text AND state <> 'released'`},
		{"CountsMonthOfKind", "reservations_counted_month|reservations_counted",
			`SELECT SUM(count) FROM reservations WHERE key_id = $1::text AND count_kind = $2::text AND count_kind <> '' AND month = $3::text AND state <> 'released'`},
		{"CountsMonth", "reservations_counted_month|reservations_counted",
			`SELECT count_kind, SUM(count) FROM reservations WHERE key_id = $1::text AND count_kind <> '' AND month = $2::text AND state <> 'released' GROUP BY count_kind`},
		{"SpendByHourOfKey", "reservations_key_time",
			`SELECT count(*) FROM reservations WHERE key_id = $1::text AND created_at >= $2::timestamptz AND created_at < $3::timestamptz`},
		{"Prune", "reservations_final",
			`SELECT r.id FROM reservations r WHERE r.state IN ('settled', 'released') AND r.updated_at < $1::timestamptz AND r.created_at < $1::timestamptz LIMIT 100`},
		{"Escrow", "reservations_escrow|reservations_held_due",
			`SELECT id FROM reservations WHERE operation = 'keybrake.escrow' AND state = 'held' AND object_id = $1::text`},
		// delegate.go: an ended escrow's child has no open reservation.
		{"ChildOpen", "reservations_",
			`SELECT 1 FROM reservations l WHERE l.key_id = $1::text AND l.state IN ('reserved', 'uncertain', 'held')`},
		// keybrake_reserve_many's replays of a key (0035).
		{"ReplaysOfKey", "reservations_key_id_idempotency_key_key",
			`SELECT coalesce(array_agg(r.id ORDER BY r.idempotency_key), '{}') FROM reservations r WHERE r.key_id = $1::text AND r.idempotency_key = ANY ($2::text[])`},
		// The other tables the request path's functions read (0035, 0016,
		// 0023, 0036), pinned to generic plans since 0042.
		{"KeyLock", "keys_pkey", `SELECT * FROM keys WHERE id = $1::text FOR NO KEY UPDATE`},
		{"Counter", "spend_counters_pkey",
			`SELECT micros FROM spend_counters WHERE key_id = $1::text AND window_name = 'daily' AND bucket = $2::text`},
		{"VelocityCount", "guard_counters_pkey",
			`SELECT coalesce(sum(c.n), 0) FROM guard_counters c WHERE c.key_id = $1::text AND c.scope = $2::text AND c.bucket >= $3::bigint`},
		{"RepeatRefusals", "guard_refusals_key",
			`SELECT 1 FROM guard_refusals f WHERE f.key_id = $1::text AND f.at > $2::timestamptz AND f.fingerprint = $3::text LIMIT 3`},
		{"SettleLock", "reservations_pkey", `SELECT * FROM reservations WHERE id = ($1::text[])[$2::int] FOR UPDATE`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := conn.Exec(ctx, "PREPARE q_"+tc.name+" AS "+tc.q); err != nil {
				t.Fatalf("PREPARE: %v", err)
			}
			params := []string{}
			for i := 1; strings.Contains(tc.q, fmt.Sprintf("$%d", i)); i++ {
				params = append(params, "NULL")
			}
			exec := "EXPLAIN EXECUTE q_" + tc.name
			if len(params) > 0 {
				exec += "(" + strings.Join(params, ", ") + ")"
			}
			rows, err := conn.Query(ctx, exec)
			if err != nil {
				t.Fatalf("EXPLAIN: %v", err)
			}
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			plan := strings.Join(lines, "\n")
			found := false
			for _, ix := range strings.Split(tc.index, "|") {
				found = found || strings.Contains(plan, " "+ix)
			}
			if strings.Contains(plan, "Seq Scan on ") || !found {
				t.Errorf("plan of %s does not read %s:\n%s", tc.name, tc.index, plan)
			}
		})
	}
}

// TestRequestPathPinned checks that the functions a request calls first
// plan with generic plans (migration 0042): CREATE OR REPLACE FUNCTION
// drops a function's SET clauses, so a later migration that redefines one
// must set it again.
func TestRequestPathPinned(t *testing.T) {
	ctx := context.Background()
	dsn := MustDatabase(t, MustServerDSN(t))
	MustOpen(t, dsn)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT p.oid::regprocedure::text, coalesce(array_to_string(p.proconfig, ' '), '') FROM pg_proc p
		WHERE p.pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
		AND p.proname IN ('keybrake_reserve', 'keybrake_reserve_many', 'keybrake_guard_check', 'keybrake_settle', 'keybrake_settle_batch')`)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for rows.Next() {
		var f, config string
		if err := rows.Scan(&f, &config); err != nil {
			t.Fatal(err)
		}
		seen++
		if !strings.Contains(config, "plan_cache_mode=force_generic_plan") {
			t.Errorf("%s: proconfig %q, want plan_cache_mode=force_generic_plan", f, config)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if seen != 5 {
		t.Errorf("%d request-path functions found, want 5", seen)
	}
}

// TestPlpgsqlRewritesSame checks that keybrake_velocity_scope and
// keybrake_counted, rewritten in PL/pgSQL by migration 0042 so that they are
// planned once a session, answer what their SQL versions (0016, 0002)
// answered: a velocity counter's scope names the counters a key has already
// counted in, so a different string would start every count again.
func TestPlpgsqlRewritesSame(t *testing.T) {
	ctx := context.Background()
	dsn := MustDatabase(t, MustServerDSN(t))
	MustOpen(t, dsn)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{`CREATE FUNCTION scope_0016(v jsonb, p_customer text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
	SELECT 'v:' || left(coalesce(nullif(v->>'window_kind', ''), 'sliding'), 1) || (v->>'window_seconds')
		|| ':' || coalesce((SELECT string_agg(o, ',' ORDER BY o COLLATE "C") FROM jsonb_array_elements_text(coalesce(v->'operations', '[]')) o), '')
		|| CASE WHEN v->>'per' = 'customer' THEN ':' || p_customer ELSE '' END
$$`, `CREATE FUNCTION counted_0002(r reservations, OUT total bigint, OUT uncertain bigint) LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE r.state WHEN 'settled' THEN r.settled_micros WHEN 'released' THEN 0 ELSE r.micros END,
	       CASE r.state WHEN 'uncertain' THEN r.micros ELSE 0 END
$$`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range []string{
		`{"window_seconds": 60}`, `{"window_seconds": 60, "operations": []}`,
		`{"window_seconds": 3600, "window_kind": "fixed", "operations": ["refunds.create", "charges.create", "Charges.create"]}`,
		`{"window_seconds": 60, "window_kind": "", "per": "customer", "operations": ["payment_intents.create"]}`,
		`{"window_seconds": 60, "per": "key"}`, `{"per": "customer"}`, `{}`,
	} {
		for _, customer := range []string{"", "cus_1"} {
			var same bool
			var got string
			if err := conn.QueryRow(ctx, `SELECT keybrake_velocity_scope($1::jsonb, $2) IS NOT DISTINCT FROM scope_0016($1::jsonb, $2),
				coalesce(keybrake_velocity_scope($1::jsonb, $2), '<null>')`, v, customer).Scan(&same, &got); err != nil {
				t.Fatal(err)
			}
			if !same {
				t.Errorf("keybrake_velocity_scope(%s, %q) = %s, not what 0016 answered", v, customer, got)
			}
		}
	}
	var differ int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM (VALUES ('reserved'), ('uncertain'), ('held'), ('settled'), ('released')) s(state),
		LATERAL (SELECT jsonb_populate_record(NULL::reservations,
			jsonb_build_object('state', s.state, 'micros', 7000000, 'settled_micros', 3000000)) AS r) q
		WHERE keybrake_counted(q.r) IS DISTINCT FROM counted_0002(q.r)`).Scan(&differ); err != nil {
		t.Fatal(err)
	}
	if differ != 0 {
		t.Errorf("keybrake_counted differs from 0002's in %d states", differ)
	}
}
