-- 0012_guards: guards are policy on the key (one jsonb column, NULL for
-- none), decided by keybrake_reserve under the key row lock, in the same
-- transaction as the caps, so they are exact across replicas. A breaker
-- rule suspends a key (suspended_at) until an operator resumes it; the
-- keys_notify trigger announces the suspension to every replica's cache.
--
-- Reservations keep what the guards compare: the customer (or payment
-- method) the request names and the duplicate guard's match (dup_key);
-- both are '' on keys without guards, so the partial indexes stay small.
ALTER TABLE keys ADD COLUMN guards jsonb;
-- suspended_at comes from 0009_prod (operators suspend keys too).
ALTER TABLE keys ADD COLUMN suspended_reason text NOT NULL DEFAULT '';

ALTER TABLE reservations ADD COLUMN customer text NOT NULL DEFAULT '';
ALTER TABLE reservations ADD COLUMN dup_key text NOT NULL DEFAULT '';

CREATE INDEX reservations_key_time ON reservations (key_id, created_at);
CREATE INDEX reservations_dup ON reservations (key_id, dup_key, created_at) WHERE dup_key <> '';
CREATE INDEX reservations_customer ON reservations (key_id, customer, created_at) WHERE customer <> '';
CREATE INDEX reservations_fingerprint ON reservations (key_id, fingerprint, created_at);

-- guard_refusals are the recent cap and policy refusals of keys whose
-- breaker counts them; rows older than the longest window are deleted as
-- new ones come.
CREATE TABLE guard_refusals (
	key_id      text        NOT NULL REFERENCES keys (id),
	at          timestamptz NOT NULL,
	fingerprint text        NOT NULL DEFAULT ''
);
CREATE INDEX guard_refusals_key ON guard_refusals (key_id, at);

-- keybrake_guard_check decides the guards of key k on a reservation about
-- to be made, under the key row lock the caller holds: the breaker's
-- repeat_body and spend_rate rules (which suspend the key), the duplicate
-- guard, then the velocity limits, in that order, as sqlite/guards.go
-- does. guard is NULL when every guard holds.
CREATE FUNCTION keybrake_guard_check(k keys, p_fingerprint text, p_operation text, p_micros bigint,
	p_customer text, p_dup_key text, p_override boolean, p_now timestamptz,
	OUT guard text, OUT rule text, OUT earlier_id text, OUT earlier_object text, OUT earlier_at timestamptz,
	OUT g_limit integer, OUT g_count integer, OUT retry_at timestamptz, OUT suspended boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	g      jsonb := k.guards;
	b      jsonb := k.guards->'breaker';
	v      jsonb;
	n      integer;
	win    interval;
	recent bigint;
	before bigint;
	reason text;
	oldest timestamptz;
BEGIN
	suspended := false;
	IF b IS NOT NULL AND jsonb_typeof(b) = 'object' THEN
		IF coalesce((b->>'repeat_body')::int, 0) > 0 AND p_fingerprint <> '' THEN
			win := make_interval(secs => (b->>'repeat_window_seconds')::bigint);
			SELECT (SELECT count(*) FROM reservations r WHERE r.key_id = k.id AND r.created_at > p_now - win AND r.fingerprint = p_fingerprint)
			     + (SELECT count(*) FROM guard_refusals f WHERE f.key_id = k.id AND f.at > p_now - win AND f.fingerprint = p_fingerprint)
			INTO n;
			IF n + 1 >= (b->>'repeat_body')::int THEN
				rule := 'repeat_body';
				reason := format('breaker repeat_body: the same %s request %s times within %ss under different Idempotency-Keys',
					p_operation, n + 1, b->>'repeat_window_seconds');
			END IF;
		END IF;
		IF rule IS NULL AND coalesce((b->>'spend_multiple')::bigint, 0) > 0 THEN
			win := make_interval(secs => (b->>'spend_window_seconds')::bigint);
			SELECT coalesce(sum(r.micros) FILTER (WHERE r.created_at > p_now - win), 0),
			       coalesce(sum(r.micros) FILTER (WHERE r.created_at <= p_now - win), 0)
			INTO recent, before
			FROM reservations r
			WHERE r.key_id = k.id AND r.created_at > p_now - make_interval(secs => (b->>'baseline_seconds')::bigint)
			  AND (r.state <> 'released' OR r.upstream_status = 402);
			recent := recent + p_micros;
			-- recent / w > x * before / (base - w), in exact numerics.
			IF before > 0 AND recent::numeric * ((b->>'baseline_seconds')::numeric - (b->>'spend_window_seconds')::numeric)
			     > (b->>'spend_multiple')::numeric * before::numeric * (b->>'spend_window_seconds')::numeric THEN
				rule := 'spend_rate';
				reason := format('breaker spend_rate: %s USD micros reserved in %ss, over %s times the key''s rate in the %ss before',
					recent, b->>'spend_window_seconds', b->>'spend_multiple', b->>'baseline_seconds');
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
		SELECT r.id, r.object_id, r.created_at INTO earlier_id, earlier_object, earlier_at
		FROM reservations r
		WHERE r.key_id = k.id AND r.dup_key = p_dup_key AND r.state <> 'released'
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
			win := make_interval(secs => (v->>'window_seconds')::bigint);
			SELECT count(*), min(t.created_at) INTO n, oldest FROM (
				SELECT r.created_at FROM reservations r
				WHERE r.key_id = k.id AND r.created_at > p_now - win
				  AND (r.state <> 'released' OR r.upstream_status = 402)
				  AND (v->>'per' <> 'customer' OR r.customer = p_customer)
				  AND (jsonb_array_length(coalesce(v->'operations', '[]')) = 0 OR v->'operations' ? r.operation)
				ORDER BY r.created_at DESC LIMIT (v->>'limit')::int) t;
			IF n >= (v->>'limit')::int THEN
				guard := 'velocity'; rule := v->>'name'; g_limit := (v->>'limit')::int; g_count := n;
				retry_at := oldest + win;
				RETURN;
			END IF;
		END LOOP;
	END IF;
END
$$;

-- keybrake_reserve as in 0002, with the key's suspension refused like a
-- revocation (KB401) and its guards decided after the caps: status
-- 'guard' records nothing but what a tripped breaker suspends.
DROP FUNCTION keybrake_reserve(text, text, text, text, text, bigint, text, bigint, text, text,
	text, text, bytea, text, text, timestamptz);
CREATE FUNCTION keybrake_reserve(
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
	END IF;

	INSERT INTO reservations (id, key_id, idempotency_key, fingerprint, operation,
		amount, currency, micros, settled_micros, state, day, month,
		req_method, req_path, req_body, req_stripe_account, req_stripe_version,
		object_id, upstream_status, attempts, lease_owner, lease_until, created_at, updated_at,
		customer, dup_key)
	VALUES (p_id, p_key_id, p_idempotency_key, p_fingerprint, p_operation,
		p_amount, p_currency, p_micros, 0, 'reserved', p_day, p_month,
		p_method, p_path, p_body, p_stripe_account, p_stripe_version,
		'', 0, 0, '', NULL, p_now, p_now,
		p_customer, p_dup_key);
	INSERT INTO spend_counters AS c (key_id, window_name, bucket, micros)
	VALUES (p_key_id, 'daily', p_day, p_micros), (p_key_id, 'monthly', p_month, p_micros),
	       (p_key_id, 'total', '', p_micros)
	ON CONFLICT (key_id, window_name, bucket) DO UPDATE SET micros = c.micros + EXCLUDED.micros;
	status := 'ok';
END
$$;

-- keybrake_reserve_batch as in 0004, but a key with guards, or suspended,
-- is refused as a whole (KB428) so the store decides its reservations one
-- by one through keybrake_reserve, which decides guards. Batching is the
-- hot unguarded path; a guarded key pays one statement per reservation.
CREATE OR REPLACE FUNCTION keybrake_reserve_batch(
	p_key_id text, p_day text, p_month text,
	p_ids text[], p_idempotency_keys text[], p_fingerprints text[], p_operations text[],
	p_amounts bigint[], p_currencies text[], p_micros bigint[],
	p_methods text[], p_paths text[], p_bodies bytea[], p_stripe_accounts text[], p_stripe_versions text[],
	p_nows timestamptz[])
RETURNS TABLE (ord integer, status text, win text, cap bigint, spent bigint, replay_id text)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	k         keys%ROWTYPE;
	c_day     bigint;
	c_month   bigint;
	c_total   bigint;
	seen_keys text[];  -- Idempotency-Keys the key already has, then those accepted
	seen_ids  text[];  -- the reservation IDs of seen_keys
	accepted  integer[] := '{}';
	added     bigint := 0;
	pos       integer;
	i         integer;
BEGIN
	-- The same lock as keybrake_reserve (see there why NO KEY), taken once.
	SELECT * INTO k FROM keys WHERE id = p_key_id FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'No such key: %.', p_key_id USING ERRCODE = 'KB404';
	END IF;
	-- Guards and suspension are decided by keybrake_reserve: raising sends
	-- the batch's reservations there one by one (postgres/reserve_batch.go).
	IF k.guards IS NOT NULL OR k.suspended_at IS NOT NULL THEN
		RAISE EXCEPTION 'Key % has guards: reserve one by one.', p_key_id USING ERRCODE = 'KB428';
	END IF;

	-- A statement of its own after the lock is granted: a fresh snapshot.
	SELECT
		-- Both in the same order, so seen_ids[n] is the ID of seen_keys[n].
		(SELECT coalesce(array_agg(r.idempotency_key ORDER BY r.idempotency_key), '{}') FROM reservations r WHERE r.key_id = p_key_id AND r.idempotency_key = ANY (p_idempotency_keys)),
		(SELECT coalesce(array_agg(r.id ORDER BY r.idempotency_key), '{}') FROM reservations r WHERE r.key_id = p_key_id AND r.idempotency_key = ANY (p_idempotency_keys)),
		COALESCE((SELECT c.micros FROM spend_counters c WHERE c.key_id = p_key_id AND c.window_name = 'daily' AND c.bucket = p_day), 0),
		COALESCE((SELECT c.micros FROM spend_counters c WHERE c.key_id = p_key_id AND c.window_name = 'monthly' AND c.bucket = p_month), 0),
		COALESCE((SELECT c.micros FROM spend_counters c WHERE c.key_id = p_key_id AND c.window_name = 'total' AND c.bucket = ''), 0)
	INTO seen_keys, seen_ids, c_day, c_month, c_total;

	FOR i IN 1 .. coalesce(array_length(p_ids, 1), 0) LOOP
		ord := i; status := NULL; win := NULL; cap := NULL; spent := NULL; replay_id := NULL;

		IF (k.revoked_at IS NOT NULL AND p_nows[i] >= k.revoked_at) OR (k.expires_at IS NOT NULL AND p_nows[i] >= k.expires_at) THEN
			status := 'unusable';
			RETURN NEXT;
			CONTINUE;
		END IF;

		-- A replay was counted when first reserved: return it, never refuse it.
		pos := array_position(seen_keys, p_idempotency_keys[i]);
		IF pos IS NOT NULL THEN
			status := 'replay'; replay_id := seen_ids[pos];
			RETURN NEXT;
			CONTINUE;
		END IF;

		-- amount > cap - spent is spent + amount > cap without overflow.
		status := 'over';
		IF k.per_request_cap IS NOT NULL AND p_micros[i] > k.per_request_cap THEN
			win := 'per_request'; cap := k.per_request_cap; spent := 0;
		ELSIF k.daily_cap IS NOT NULL AND p_micros[i] > k.daily_cap - c_day THEN
			win := 'daily'; cap := k.daily_cap; spent := c_day;
		ELSIF k.monthly_cap IS NOT NULL AND p_micros[i] > k.monthly_cap - c_month THEN
			win := 'monthly'; cap := k.monthly_cap; spent := c_month;
		ELSIF k.total_cap IS NOT NULL AND p_micros[i] > k.total_cap - c_total THEN
			win := 'total'; cap := k.total_cap; spent := c_total;
		ELSE
			status := 'ok';
			accepted := accepted || i;
			seen_keys := seen_keys || p_idempotency_keys[i];
			seen_ids := seen_ids || p_ids[i];
			c_day := c_day + p_micros[i]; c_month := c_month + p_micros[i]; c_total := c_total + p_micros[i];
			added := added + p_micros[i];
		END IF;
		RETURN NEXT;
	END LOOP;

	IF array_length(accepted, 1) > 0 THEN
		INSERT INTO reservations (id, key_id, idempotency_key, fingerprint, operation,
			amount, currency, micros, settled_micros, state, day, month,
			req_method, req_path, req_body, req_stripe_account, req_stripe_version,
			object_id, upstream_status, attempts, lease_owner, lease_until, created_at, updated_at)
		SELECT p_ids[a.i], p_key_id, p_idempotency_keys[a.i], p_fingerprints[a.i], p_operations[a.i],
			p_amounts[a.i], p_currencies[a.i], p_micros[a.i], 0, 'reserved', p_day, p_month,
			p_methods[a.i], p_paths[a.i], p_bodies[a.i], p_stripe_accounts[a.i], p_stripe_versions[a.i],
			'', 0, 0, '', NULL, p_nows[a.i], p_nows[a.i]
		FROM unnest(accepted) WITH ORDINALITY AS a(i, n)
		ORDER BY a.n;
		-- Rows in the fixed order of keybrake_reserve and keybrake_settle.
		INSERT INTO spend_counters AS c (key_id, window_name, bucket, micros)
		VALUES (p_key_id, 'daily', p_day, added), (p_key_id, 'monthly', p_month, added),
		       (p_key_id, 'total', '', added)
		ON CONFLICT (key_id, window_name, bucket) DO UPDATE SET micros = c.micros + EXCLUDED.micros;
	END IF;
END
$$;
