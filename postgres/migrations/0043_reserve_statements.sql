-- 0043_reserve_statements: keybrake_reserve does itself, once, the work
-- that triggers did again for each of its rows (docs/performance.md
-- "PostgreSQL: the reservation's statements (pgstmt)").
--
-- Measured with TestReserveStatements (pg_stat_statements, track = all), a
-- capped charge's reservation ran four statements of its own and, through
-- triggers, five more: keybrake_refuse_suspended (BEFORE INSERT on
-- reservations: a read of the key for its suspension and repeat rule) and
-- keybrake_alert_threshold three times (AFTER INSERT OR UPDATE on each
-- spend_counters row: a read of the key for the window's cap, then the
-- fast path of 0027), each a PL/pgSQL call queued as a trigger event, and
-- the function read the key's row a second time for its version. The key
-- is already locked and read in full by the function's first statement, so:
--
--   - the version (xmin) is read by that same statement;
--   - a window without a cap has its counter not read (the CASE leaves its
--     subquery unrun), since only the cap checks read it;
--   - the reservation's repeat_rule is computed from the key the function
--     holds (as keybrake_refuse_suspended computes it), and its
--     suspension was already refused by the function (KB401, before the
--     trigger's KB403 could be reached): the BEFORE INSERT trigger is
--     skipped for the function's insert;
--   - the counters' upsert returns the new values, and the function tests
--     each capped window for a crossed threshold with the key's cap it
--     holds (the test of 0027, exact); only a window that may cross one
--     runs the alerts' INSERT (keybrake_alert_threshold_at, the body of the
--     trigger, which the trigger now calls too): the AFTER trigger is
--     skipped for the function's upsert.
--
-- The triggers are skipped by a WHEN on the setting keybrake.reserving,
-- which keybrake_reserve sets for its own duration (a SET clause, undone
-- when it returns or fails), so that every other writer of reservations
-- and spend_counters (keybrake_reserve_many, settlements, re-arms, holds,
-- migrations, an admin's SQL) fires them exactly as before. Nothing else
-- that keybrake_reserve runs writes either table. Every invariant is
-- unchanged: the same key row lock, version check, replay lookup, caps
-- checked on the same counters, guards, insert and upsert in one
-- statement and one transaction, and the same alerts.

-- keybrake_alert_threshold_at writes the threshold alerts of a counter
-- of key p_key_id that moved from p_old to p_new micros: the body of
-- keybrake_alert_threshold as in 0027. Returns 0.
CREATE OR REPLACE FUNCTION keybrake_alert_threshold_at(p_key_id text, p_window text, p_bucket text, p_old bigint, p_new bigint)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
	v_cap bigint;
	p_lo  numeric;
BEGIN
	IF p_window NOT IN ('daily', 'monthly', 'total') OR p_new <= p_old THEN
		RETURN 0;
	END IF;
	SELECT CASE p_window WHEN 'daily' THEN daily_cap WHEN 'monthly' THEN monthly_cap ELSE total_cap END
	INTO v_cap FROM keys WHERE id = p_key_id;
	IF v_cap IS NULL THEN
		RETURN 0;  -- an uncapped window has no thresholds (0008: k.cap IS NOT NULL)
	END IF;
	IF v_cap > 0 THEN
		p_lo := greatest(floor(100::numeric * p_old / v_cap) + 1, 1);
		IF p_lo > 100 OR ceil(v_cap::numeric * p_lo / 100) > p_new THEN
			RETURN 0;
		END IF;
	END IF;
	INSERT INTO alerts (id, alert_key, kind, key_id, window_name, bucket, percent, cap_micros, threshold_micros,
		spent_micros, reserved_micros, reservation_id, count, endpoint_id, detail, created_at)
	SELECT keybrake_alert_id('alt_'),
		'threshold:' || p_key_id || ':' || p_window || ':' || p_bucket || ':' || t.percent,
		'threshold', p_key_id, p_window, p_bucket, t.percent, t.cap, t.threshold, p_new, 0, '', 0, '', '', now()
	FROM (
		SELECT r.percent, k.cap, (k.cap / 100) * r.percent + ((k.cap % 100) * r.percent + 99) / 100 AS threshold
		FROM alert_rules r,
			(SELECT CASE p_window WHEN 'daily' THEN daily_cap WHEN 'monthly' THEN monthly_cap ELSE total_cap END AS cap
			 FROM keys WHERE id = p_key_id) AS k
		WHERE r.kind = 'threshold' AND r.enabled AND r.window_name IN ('', p_window) AND k.cap IS NOT NULL
		AND r.key_id = keybrake_rule_owner('threshold', p_key_id)
	) AS t
	WHERE t.threshold > 0 AND p_old < t.threshold AND p_new >= t.threshold
	ORDER BY t.percent
	ON CONFLICT (alert_key) DO NOTHING;
	RETURN 0;
END
$$;

CREATE OR REPLACE FUNCTION keybrake_alert_threshold() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM keybrake_alert_threshold_at(NEW.key_id, NEW.window_name, NEW.bucket,
		CASE WHEN TG_OP = 'UPDATE' THEN OLD.micros ELSE 0 END, NEW.micros);
	RETURN NULL;
END
$$;

-- keybrake_threshold_may_cross says whether a counter under cap that moved
-- from p_old to p_new may have crossed a threshold rule's value: 0027's
-- fast path, as an expression PL/pgSQL inlines. False only when
-- keybrake_alert_threshold_at would write nothing.
CREATE OR REPLACE FUNCTION keybrake_threshold_may_cross(p_old bigint, p_new bigint, cap bigint) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE
		WHEN cap IS NULL OR p_new <= p_old THEN false
		WHEN cap <= 0 THEN true
		ELSE greatest(floor(100::numeric * p_old / cap) + 1, 1) <= 100
			AND ceil(cap::numeric * greatest(floor(100::numeric * p_old / cap) + 1, 1) / 100) <= p_new
	END
$$;

-- The triggers keybrake_reserve does the work of, skipped for it alone.
DROP TRIGGER IF EXISTS reservations_refuse_suspended ON reservations;
CREATE TRIGGER reservations_refuse_suspended BEFORE INSERT ON reservations
	FOR EACH ROW WHEN (current_setting('keybrake.reserving', true) IS DISTINCT FROM 'on')
	EXECUTE FUNCTION keybrake_refuse_suspended();
DROP TRIGGER IF EXISTS spend_counters_alert ON spend_counters;
CREATE TRIGGER spend_counters_alert AFTER INSERT OR UPDATE OF micros ON spend_counters
	FOR EACH ROW WHEN (current_setting('keybrake.reserving', true) IS DISTINCT FROM 'on')
	EXECUTE FUNCTION keybrake_alert_threshold();

-- keybrake_reserve as in 0035 (pinned to generic plans as in 0042), but
-- for the above.
CREATE OR REPLACE FUNCTION keybrake_reserve(
	p_id text, p_key_id text, p_idempotency_key text, p_fingerprint text, p_operation text,
	p_amount bigint, p_currency text, p_micros bigint, p_day text, p_month text,
	p_method text, p_path text, p_body bytea, p_stripe_account text, p_stripe_version text,
	p_now timestamptz, p_customer text, p_dup_key text, p_override boolean, p_key_version text,
	OUT status text, OUT win text, OUT cap bigint, OUT spent bigint, OUT replay_id text,
	OUT guard text, OUT rule text, OUT earlier_id text, OUT earlier_object text, OUT earlier_at timestamptz,
	OUT g_limit integer, OUT g_count integer, OUT retry_at timestamptz, OUT suspended boolean)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET keybrake.reserving = 'on'
AS $$
DECLARE
	kr      record;
	k       keys%ROWTYPE;
	c_day   bigint;
	c_month bigint;
	c_total bigint;
	gc      record;
	v_counted jsonb;
	v_alerts  bigint;
BEGIN
	-- See 0002 for why NO KEY. The row and its version in one read.
	SELECT kk AS key_row, kk.xmin::text AS key_version INTO kr FROM keys kk WHERE kk.id = p_key_id FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'No such key: %.', p_key_id USING ERRCODE = 'KB404';
	END IF;
	k := kr.key_row;
	IF k.revoked_at IS NOT NULL OR (k.expires_at IS NOT NULL AND p_now >= k.expires_at)
	   OR k.suspended_at IS NOT NULL THEN
		RAISE EXCEPTION 'Vault key % can no longer be used.', p_key_id USING ERRCODE = 'KB401';
	END IF;

	-- Decided on another version of the key: nothing reserved, not even a
	-- replay's answer; the caller decides again on the key as it is now.
	IF p_key_version <> '' AND p_key_version IS DISTINCT FROM kr.key_version THEN
		status := 'stale';
		RETURN;
	END IF;

	-- A window's counter is read only if the window has a cap to check.
	-- The replay is looked up here only for a key with guards (which may
	-- act, a breaker suspending the key, and must not for a replay);
	-- otherwise by the insert's arbiter below, or before a refusal.
	SELECT
		CASE WHEN k.guards IS NOT NULL THEN
			(SELECT id FROM reservations WHERE key_id = p_key_id AND idempotency_key = p_idempotency_key) END,
		CASE WHEN k.daily_cap IS NOT NULL THEN
			COALESCE((SELECT micros FROM spend_counters WHERE key_id = p_key_id AND window_name = 'daily' AND bucket = p_day), 0) END,
		CASE WHEN k.monthly_cap IS NOT NULL THEN
			COALESCE((SELECT micros FROM spend_counters WHERE key_id = p_key_id AND window_name = 'monthly' AND bucket = p_month), 0) END,
		CASE WHEN k.total_cap IS NOT NULL THEN
			COALESCE((SELECT micros FROM spend_counters WHERE key_id = p_key_id AND window_name = 'total' AND bucket = ''), 0) END
	INTO replay_id, c_day, c_month, c_total;

	IF replay_id IS NOT NULL THEN
		status := 'replay';
		RETURN;
	END IF;

	IF k.per_request_cap IS NOT NULL AND p_micros > k.per_request_cap THEN
		win := 'per_request'; cap := k.per_request_cap; spent := 0;
	ELSIF k.daily_cap IS NOT NULL AND p_micros > k.daily_cap - c_day THEN
		win := 'daily'; cap := k.daily_cap; spent := c_day;
	ELSIF k.monthly_cap IS NOT NULL AND p_micros > k.monthly_cap - c_month THEN
		win := 'monthly'; cap := k.monthly_cap; spent := c_month;
	ELSIF k.total_cap IS NOT NULL AND p_micros > k.total_cap - c_total THEN
		win := 'total'; cap := k.total_cap; spent := c_total;
	END IF;
	IF win IS NOT NULL THEN
		-- Over a cap, unless it is a replay (which answers first, as ever).
		IF k.guards IS NULL THEN
			SELECT id INTO replay_id FROM reservations WHERE key_id = p_key_id AND idempotency_key = p_idempotency_key;
			IF replay_id IS NOT NULL THEN
				status := 'replay'; win := NULL; cap := NULL; spent := NULL;
				RETURN;
			END IF;
		END IF;
		status := 'over';
		RETURN;
	END IF;

	IF k.guards IS NOT NULL THEN
		gc := keybrake_guard_check(k, p_fingerprint, p_operation, p_micros, p_customer, p_dup_key, p_override, p_now);
		IF gc.guard IS NOT NULL THEN
			status := 'guard'; guard := gc.guard; rule := gc.rule;
			earlier_id := gc.earlier_id; earlier_object := gc.earlier_object; earlier_at := gc.earlier_at;
			g_limit := gc.g_limit; g_count := gc.g_count; retry_at := gc.retry_at; suspended := gc.suspended;
			RETURN;
		END IF;
		v_counted := gc.counted;
	END IF;

	-- repeat_rule as keybrake_refuse_suspended sets it (0036), from the
	-- key this function holds locked.
	INSERT INTO reservations (id, key_id, idempotency_key, fingerprint, operation,
		amount, currency, micros, settled_micros, state, day, month,
		req_method, req_path, req_body, req_stripe_account, req_stripe_version,
		object_id, upstream_status, attempts, lease_owner, lease_until, created_at, updated_at,
		customer, dup_key, counted, repeat_rule)
	VALUES (p_id, p_key_id, p_idempotency_key, p_fingerprint, p_operation,
		p_amount, p_currency, p_micros, 0, 'reserved', p_day, p_month,
		p_method, p_path, p_body, p_stripe_account, p_stripe_version,
		'', 0, 0, '', NULL, p_now, p_now,
		p_customer, p_dup_key, v_counted,
		k.guards IS NOT NULL AND p_fingerprint <> '' AND coalesce(keybrake_repeat_rule(k.guards), false))
	ON CONFLICT (key_id, idempotency_key) DO NOTHING;
	IF NOT FOUND THEN
		-- A replay of a key without guards: its reservation is there (the
		-- key's row lock orders every reservation of the key, so it was
		-- committed before this one began), nothing reserved or counted.
		SELECT id INTO replay_id FROM reservations WHERE key_id = p_key_id AND idempotency_key = p_idempotency_key;
		status := 'replay';
		RETURN;
	END IF;
	-- The counters, and the threshold alerts of the windows that may have
	-- crossed one (old = new - p_micros: the upsert adds p_micros to the
	-- row it finds or inserts it).
	WITH c AS (
		INSERT INTO spend_counters AS c (key_id, window_name, bucket, micros)
		VALUES (p_key_id, 'daily', p_day, p_micros), (p_key_id, 'monthly', p_month, p_micros),
		       (p_key_id, 'total', '', p_micros)
		ON CONFLICT (key_id, window_name, bucket) DO UPDATE SET micros = c.micros + EXCLUDED.micros
		RETURNING c.window_name, c.bucket, c.micros)
	SELECT count(keybrake_alert_threshold_at(p_key_id, c.window_name, c.bucket, c.micros - p_micros, c.micros))
	INTO v_alerts FROM c
	WHERE keybrake_threshold_may_cross(c.micros - p_micros, c.micros,
		CASE c.window_name WHEN 'daily' THEN k.daily_cap WHEN 'monthly' THEN k.monthly_cap ELSE k.total_cap END);
	status := 'ok';
END
$$;
