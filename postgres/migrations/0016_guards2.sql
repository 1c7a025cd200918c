-- 0016_guards2: the guards' windows are counted, not searched, as in
-- sqlite/migrations/0012_guards2.sql (see there, and guard_counters.go for
-- the buckets). keybrake_guard_check names the counters a reservation
-- counts in (counted, keybrake.EncodeCounters' shape) and reads the
-- window sums under the key row lock keybrake_reserve holds; the triggers
-- below keep guard_counters equal to what counts.
--
-- A counter is the sum of its slots: slot '' is written only by
-- keybrake_reserve (under the key row lock), slot <reservation id> only
-- by whoever changes that reservation (under its row lock). A release
-- therefore never waits for, nor holds, a lock a reservation needs: no
-- deadlock between settlements and reservations, in any order.
--
-- Reservations made before this migration count in no counter: limits
-- start counting when it runs.
ALTER TABLE reservations ADD COLUMN counted jsonb;

CREATE TABLE guard_counters (
	key_id  text   NOT NULL,
	scope   text   NOT NULL,
	bucket  bigint NOT NULL, -- Unix second the bucket starts at
	slot    text   NOT NULL,
	expires bigint NOT NULL, -- no window reads it after this second
	n       bigint NOT NULL,
	micros  bigint NOT NULL,
	PRIMARY KEY (key_id, scope, bucket, slot)
);
CREATE INDEX guard_counters_expires ON guard_counters (expires);

DROP INDEX reservations_customer;

CREATE FUNCTION keybrake_guard_count() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'INSERT' THEN
		INSERT INTO guard_counters AS c (key_id, scope, bucket, slot, expires, n, micros)
		SELECT NEW.key_id, e->>0, (e->>1)::bigint, '', (e->>2)::bigint, 1, NEW.micros
		FROM jsonb_array_elements(NEW.counted) e
		ORDER BY 2, 3
		ON CONFLICT (key_id, scope, bucket, slot) DO UPDATE SET n = c.n + 1, micros = c.micros + EXCLUDED.micros;
		RETURN NULL;
	END IF;
	INSERT INTO guard_counters AS c (key_id, scope, bucket, slot, expires, n, micros)
	SELECT d.k, d.s, d.b, NEW.id, max(d.x), sum(d.n), sum(d.m) FROM (
		SELECT OLD.key_id, e->>0, (e->>1)::bigint, (e->>2)::bigint, -1, -OLD.micros
		FROM jsonb_array_elements(coalesce(OLD.counted, '[]')) e
		WHERE OLD.state <> 'released' OR OLD.upstream_status = 402
		UNION ALL
		SELECT NEW.key_id, e->>0, (e->>1)::bigint, (e->>2)::bigint, 1, NEW.micros
		FROM jsonb_array_elements(coalesce(NEW.counted, '[]')) e
		WHERE NEW.state <> 'released' OR NEW.upstream_status = 402
	) AS d(k, s, b, x, n, m)
	GROUP BY d.k, d.s, d.b
	ORDER BY d.k, d.s, d.b
	ON CONFLICT (key_id, scope, bucket, slot) DO UPDATE SET n = c.n + EXCLUDED.n, micros = c.micros + EXCLUDED.micros;
	RETURN NULL;
END
$$;

CREATE TRIGGER reservations_guard_insert AFTER INSERT ON reservations
	FOR EACH ROW WHEN (NEW.counted IS NOT NULL AND (NEW.state <> 'released' OR NEW.upstream_status = 402))
	EXECUTE FUNCTION keybrake_guard_count();

-- A change of what a reservation counts (released, re-armed, a hold grown,
-- new counters) takes out what it counted and adds what it counts.
CREATE TRIGGER reservations_guard_update AFTER UPDATE OF state, micros, counted, upstream_status ON reservations
	FOR EACH ROW WHEN ((OLD.counted IS NOT NULL OR NEW.counted IS NOT NULL)
		AND (OLD.counted IS DISTINCT FROM NEW.counted OR OLD.micros <> NEW.micros
		     OR (OLD.state <> 'released' OR OLD.upstream_status = 402) <> (NEW.state <> 'released' OR NEW.upstream_status = 402)))
	EXECUTE FUNCTION keybrake_guard_count();

-- keybrake_velocity_scope is VelocityLimit.Scope (guard_counters.go).
CREATE FUNCTION keybrake_velocity_scope(v jsonb, p_customer text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
	SELECT 'v:' || left(coalesce(nullif(v->>'window_kind', ''), 'sliding'), 1) || (v->>'window_seconds')
		|| ':' || coalesce((SELECT string_agg(o, ',' ORDER BY o COLLATE "C") FROM jsonb_array_elements_text(coalesce(v->'operations', '[]')) o), '')
		|| CASE WHEN v->>'per' = 'customer' THEN ':' || p_customer ELSE '' END
$$;

-- keybrake_velocity_probe reads limit v's window at second s for
-- p_customer: the count, when it frees up if at or over the limit, and
-- the counter a request at s counts in.
CREATE FUNCTION keybrake_velocity_probe(p_key_id text, v jsonb, p_customer text, s bigint,
	OUT n bigint, OUT retry_at timestamptz, OUT counter jsonb)
LANGUAGE plpgsql STABLE AS $$
DECLARE
	w     bigint := (v->>'window_seconds')::bigint;
	fixed boolean := v->>'window_kind' = 'fixed';
	wid   bigint;
	since bigint;
	sc    text := keybrake_velocity_scope(v, p_customer);
	total bigint;
	bk    record;
BEGIN
	wid := CASE WHEN fixed THEN w ELSE (w + 59) / 60 END;
	since := CASE WHEN fixed THEN s - s % wid ELSE s - w - wid + 2 END;
	counter := jsonb_build_array(sc, s - s % wid, s - s % wid + wid + w);
	SELECT coalesce(sum(c.n), 0) INTO n FROM guard_counters c WHERE c.key_id = p_key_id AND c.scope = sc AND c.bucket >= since;
	IF n < (v->>'limit')::bigint THEN
		RETURN;
	END IF;
	IF fixed THEN
		retry_at := to_timestamp(since + wid);
		RETURN;
	END IF;
	total := n;
	FOR bk IN SELECT c.bucket, sum(c.n) AS n FROM guard_counters c
		WHERE c.key_id = p_key_id AND c.scope = sc AND c.bucket >= since GROUP BY c.bucket HAVING sum(c.n) > 0 ORDER BY c.bucket LOOP
		total := total - bk.n;
		IF total < (v->>'limit')::bigint THEN
			retry_at := to_timestamp(bk.bucket + w + wid - 1);
			RETURN;
		END IF;
	END LOOP;
END
$$;

-- keybrake_guard_check as in 0012, with windows read from guard_counters,
-- and counted: the counters the reservation counts in if it is made.
DROP FUNCTION keybrake_guard_check(keys, text, text, bigint, text, text, boolean, timestamptz);
CREATE FUNCTION keybrake_guard_check(k keys, p_fingerprint text, p_operation text, p_micros bigint,
	p_customer text, p_dup_key text, p_override boolean, p_now timestamptz,
	OUT guard text, OUT rule text, OUT earlier_id text, OUT earlier_object text, OUT earlier_at timestamptz,
	OUT g_limit integer, OUT g_count integer, OUT retry_at timestamptz, OUT suspended boolean, OUT counted jsonb)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	g      jsonb := k.guards;
	b      jsonb := k.guards->'breaker';
	v      jsonb;
	n      integer;
	win    interval;
	s      bigint := floor(extract(epoch FROM p_now))::bigint;
	sw     bigint;
	bw     bigint;
	recent bigint;
	base   bigint;
	reason text;
	vp     record;
	scopes text[] := '{}';
	sc     text;
BEGIN
	suspended := false;
	counted := '[]';
	IF b IS NOT NULL AND jsonb_typeof(b) = 'object' THEN
		IF coalesce((b->>'repeat_body')::int, 0) > 0 AND p_fingerprint <> '' THEN
			win := make_interval(secs => (b->>'repeat_window_seconds')::bigint);
			SELECT (SELECT count(*) FROM (SELECT 1 FROM reservations r WHERE r.key_id = k.id AND r.fingerprint = p_fingerprint AND r.created_at > p_now - win
			        LIMIT (b->>'repeat_body')::int) x)
			     + (SELECT count(*) FROM (SELECT 1 FROM guard_refusals f WHERE f.key_id = k.id AND f.at > p_now - win AND f.fingerprint = p_fingerprint
			        LIMIT (b->>'repeat_body')::int) y)
			INTO n;
			IF n + 1 >= (b->>'repeat_body')::int THEN
				rule := 'repeat_body';
				reason := format('breaker repeat_body: the same %s request %s times within %ss under different Idempotency-Keys',
					p_operation, n + 1, b->>'repeat_window_seconds');
			END IF;
		END IF;
		IF rule IS NULL AND coalesce((b->>'spend_multiple')::bigint, 0) > 0 THEN
			-- Breaker.Probe: the recent window rounded up to its buckets,
			-- the baseline's buckets wholly inside it.
			sw := (b->>'spend_window_seconds')::bigint;
			bw := (b->>'baseline_seconds')::bigint;
			SELECT coalesce(sum(c.micros), 0) INTO recent FROM guard_counters c
			WHERE c.key_id = k.id AND c.scope = 'sr:' || sw AND c.bucket >= s - sw - (sw + 59) / 60 + 2;
			SELECT coalesce(sum(c.micros), 0) INTO base FROM guard_counters c
			WHERE c.key_id = k.id AND c.scope = 'sb:' || bw AND c.bucket >= s - bw + 1;
			base := base - recent;
			recent := recent + p_micros;
			-- recent / w > x * before / (base - w), in exact numerics.
			IF base > 0 AND recent::numeric * (bw - sw)::numeric > (b->>'spend_multiple')::numeric * base::numeric * sw::numeric THEN
				rule := 'spend_rate';
				reason := format('breaker spend_rate: %s USD micros reserved in %ss, over %s times the key''s rate in the %ss before',
					recent, sw, b->>'spend_multiple', bw);
			END IF;
		END IF;
		IF rule IS NOT NULL THEN
			UPDATE keys SET suspended_at = p_now, suspended_reason = reason, updated_at = p_now
			WHERE id = k.id AND suspended_at IS NULL;
			guard := 'breaker'; suspended := true;
			RETURN;
		END IF;
	END IF;

	IF g->'duplicate' IS NOT NULL AND jsonb_typeof(g->'duplicate') = 'object' AND p_dup_key <> ''
	   AND NOT (p_override AND coalesce((g->'duplicate'->>'allow_override')::boolean, false)) THEN
		-- dup_key <> '' lets the planner use the partial index.
		SELECT r.id, r.object_id, r.created_at INTO earlier_id, earlier_object, earlier_at
		FROM reservations r
		WHERE r.key_id = k.id AND r.dup_key = p_dup_key AND r.dup_key <> '' AND r.state <> 'released'
		  AND r.created_at > p_now - make_interval(secs => (g->'duplicate'->>'window_seconds')::bigint)
		ORDER BY r.created_at DESC LIMIT 1;
		IF FOUND THEN
			guard := 'duplicate';
			RETURN;
		END IF;
	END IF;

	IF jsonb_typeof(g->'velocity') = 'array' THEN
		FOR v IN SELECT * FROM jsonb_array_elements(g->'velocity') LOOP
			CONTINUE WHEN jsonb_array_length(coalesce(v->'operations', '[]')) > 0 AND NOT (v->'operations' ? p_operation);
			CONTINUE WHEN v->>'per' = 'customer' AND p_customer = '';
			vp := keybrake_velocity_probe(k.id, v, p_customer, s);
			IF vp.n >= (v->>'limit')::bigint THEN
				guard := 'velocity'; rule := v->>'name'; g_limit := (v->>'limit')::int; g_count := vp.n;
				retry_at := vp.retry_at;
				counted := NULL;
				RETURN;
			END IF;
			sc := vp.counter->>0;
			IF NOT sc = ANY (scopes) THEN
				scopes := scopes || sc;
				counted := counted || jsonb_build_array(vp.counter);
			END IF;
		END LOOP;
	END IF;
	IF b IS NOT NULL AND jsonb_typeof(b) = 'object' AND coalesce((b->>'spend_multiple')::bigint, 0) > 0 THEN
		sw := (b->>'spend_window_seconds')::bigint;
		bw := (b->>'baseline_seconds')::bigint;
		counted := counted
			|| jsonb_build_array(jsonb_build_array('sr:' || sw, s - s % ((sw + 59) / 60), s - s % ((sw + 59) / 60) + (sw + 59) / 60 + sw))
			|| jsonb_build_array(jsonb_build_array('sb:' || bw, s - s % ((bw + 59) / 60), s - s % ((bw + 59) / 60) + (bw + 59) / 60 + bw));
	END IF;
	IF counted = '[]' THEN
		counted := NULL;
	END IF;
END
$$;

-- keybrake_reserve as in 0012, recording the counters the reservation
-- counts in (the trigger reservations_guard_insert adds it to them).
CREATE OR REPLACE FUNCTION keybrake_reserve(
	p_id text, p_key_id text, p_idempotency_key text, p_fingerprint text, p_operation text,
	p_amount bigint, p_currency text, p_micros bigint, p_day text, p_month text,
	p_method text, p_path text, p_body bytea, p_stripe_account text, p_stripe_version text,
	p_now timestamptz, p_customer text, p_dup_key text, p_override boolean,
	OUT status text, OUT win text, OUT cap bigint, OUT spent bigint, OUT replay_id text,
	OUT guard text, OUT rule text, OUT earlier_id text, OUT earlier_object text, OUT earlier_at timestamptz,
	OUT g_limit integer, OUT g_count integer, OUT retry_at timestamptz, OUT suspended boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	k       keys%ROWTYPE;
	c_day   bigint;
	c_month bigint;
	c_total bigint;
	gc      record;
	v_counted jsonb;
BEGIN
	-- See 0002 for why NO KEY.
	SELECT * INTO k FROM keys WHERE id = p_key_id FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'No such key: %.', p_key_id USING ERRCODE = 'KB404';
	END IF;
	IF (k.revoked_at IS NOT NULL AND p_now >= k.revoked_at) OR (k.expires_at IS NOT NULL AND p_now >= k.expires_at)
	   OR k.suspended_at IS NOT NULL THEN
		RAISE EXCEPTION 'Vault key % can no longer be used.', p_key_id USING ERRCODE = 'KB401';
	END IF;

	SELECT
		(SELECT id FROM reservations WHERE key_id = p_key_id AND idempotency_key = p_idempotency_key),
		COALESCE((SELECT micros FROM spend_counters WHERE key_id = p_key_id AND window_name = 'daily' AND bucket = p_day), 0),
		COALESCE((SELECT micros FROM spend_counters WHERE key_id = p_key_id AND window_name = 'monthly' AND bucket = p_month), 0),
		COALESCE((SELECT micros FROM spend_counters WHERE key_id = p_key_id AND window_name = 'total' AND bucket = ''), 0)
	INTO replay_id, c_day, c_month, c_total;

	IF replay_id IS NOT NULL THEN
		status := 'replay';
		RETURN;
	END IF;

	status := 'over';
	IF k.per_request_cap IS NOT NULL AND p_micros > k.per_request_cap THEN
		win := 'per_request'; cap := k.per_request_cap; spent := 0; RETURN;
	ELSIF k.daily_cap IS NOT NULL AND p_micros > k.daily_cap - c_day THEN
		win := 'daily'; cap := k.daily_cap; spent := c_day; RETURN;
	ELSIF k.monthly_cap IS NOT NULL AND p_micros > k.monthly_cap - c_month THEN
		win := 'monthly'; cap := k.monthly_cap; spent := c_month; RETURN;
	ELSIF k.total_cap IS NOT NULL AND p_micros > k.total_cap - c_total THEN
		win := 'total'; cap := k.total_cap; spent := c_total; RETURN;
	END IF;
	win := NULL; cap := NULL; spent := NULL;

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

	INSERT INTO reservations (id, key_id, idempotency_key, fingerprint, operation,
		amount, currency, micros, settled_micros, state, day, month,
		req_method, req_path, req_body, req_stripe_account, req_stripe_version,
		object_id, upstream_status, attempts, lease_owner, lease_until, created_at, updated_at,
		customer, dup_key, counted)
	VALUES (p_id, p_key_id, p_idempotency_key, p_fingerprint, p_operation,
		p_amount, p_currency, p_micros, 0, 'reserved', p_day, p_month,
		p_method, p_path, p_body, p_stripe_account, p_stripe_version,
		'', 0, 0, '', NULL, p_now, p_now,
		p_customer, p_dup_key, v_counted);
	INSERT INTO spend_counters AS c (key_id, window_name, bucket, micros)
	VALUES (p_key_id, 'daily', p_day, p_micros), (p_key_id, 'monthly', p_month, p_micros),
	       (p_key_id, 'total', '', p_micros)
	ON CONFLICT (key_id, window_name, bucket) DO UPDATE SET micros = c.micros + EXCLUDED.micros;
	status := 'ok';
END
$$;

