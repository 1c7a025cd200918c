-- 0042_plans: the request path's functions plan once a session, on a fresh
-- server as on a warm one (docs/performance.md "PostgreSQL: plans on a
-- fresh server (pgplan)").
--
-- keybrake_velocity_scope and keybrake_counted were SQL functions that
-- PostgreSQL cannot inline (a subquery; an OUT record), and a SQL function
-- that is not inlined has its statement parsed and planned again at each
-- call: keybrake_velocity_scope once per velocity limit per reservation,
-- 200-360 µs of a guarded charge on a fresh server; keybrake_counted twice
-- per settlement. In PL/pgSQL their statements are planned once a session
-- and the rest are simple expressions. Same results, argument for argument.
CREATE OR REPLACE FUNCTION keybrake_velocity_scope(v jsonb, p_customer text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
	ops text;
BEGIN
	IF coalesce(v->'operations', '[]') <> '[]' THEN
		SELECT string_agg(o, ',' ORDER BY o COLLATE "C") INTO ops FROM jsonb_array_elements_text(v->'operations') o;
	END IF;
	RETURN 'v:' || left(coalesce(nullif(v->>'window_kind', ''), 'sliding'), 1) || (v->>'window_seconds')
		|| ':' || coalesce(ops, '')
		|| CASE WHEN v->>'per' = 'customer' THEN ':' || p_customer ELSE '' END;
END
$$;

CREATE OR REPLACE FUNCTION keybrake_counted(r reservations, OUT total bigint, OUT uncertain bigint)
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	total := CASE r.state WHEN 'settled' THEN r.settled_micros WHEN 'released' THEN 0 ELSE r.micros END;
	uncertain := CASE r.state WHEN 'uncertain' THEN r.micros ELSE 0 END;
END
$$;

-- The functions a request calls first run with generic plans: each of
-- their statements (and those of the triggers and functions they call,
-- which run under the same setting) is planned once a session instead of
-- five custom plans first, and never falls back to a custom plan a call
-- because a table has few rows or no statistics yet. TestQueryPlans checks
-- that each statement's generic plan reads its index; TestRequestPathPinned
-- that a later CREATE OR REPLACE (which drops the setting) sets it again.
-- The setting costs up to 1.3 µs a call (saved and restored around it).
DO $$
DECLARE
	f regprocedure;
BEGIN
	FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
		WHERE p.pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
		AND p.proname IN ('keybrake_reserve', 'keybrake_reserve_many', 'keybrake_guard_check', 'keybrake_settle', 'keybrake_settle_batch')
	LOOP
		EXECUTE format('ALTER FUNCTION %s SET plan_cache_mode = force_generic_plan', f);
	END LOOP;
END
$$;
