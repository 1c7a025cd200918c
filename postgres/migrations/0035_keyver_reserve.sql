-- 0035_keyver_reserve: a reservation carries the version of the key it was
-- decided on (keybrake.ReserveArgs.KeyVersion: the keys row's xmin, as
-- keyColumns reads it), and is refused with status 'stale', reserving and
-- counting nothing, when the row it locks is another version.
--
-- A replica's key cache may hold a key another replica has changed (its
-- NOTIFY late or lost); the allowlist, scope, field rules, allow_unpriced
-- and a rotated-out secret are decided in Go from that key. The proxy
-- re-read every priced request's key before deciding, one statement more
-- per charge; the version check makes the reservation, which already locks
-- the row, refuse a decision made on an old key instead, and the proxy
-- decides again on the key as it is now. The row lock makes the check
-- exact: no update of the row commits between the check and the commit of
-- the reservation. xmin changes on every UPDATE of the row and on nothing
-- else (the row lock is recorded in xmax). An empty version checks nothing
-- (callers with no key read). Everything else is exactly as in 0033.
DROP FUNCTION keybrake_reserve(text, text, text, text, text, bigint, text, bigint, text, text,
	text, text, bytea, text, text, timestamptz, text, text, boolean);
DROP FUNCTION keybrake_reserve_many(text[], text[], text[], text[], text[], text[], text[],
	bigint[], text[], bigint[], text[], text[], bytea[], text[], text[],
	timestamptz[], text[], text[], boolean[]);

-- keybrake_reserve as in 0033 but for p_key_version.
CREATE FUNCTION keybrake_reserve(
	p_id text, p_key_id text, p_idempotency_key text, p_fingerprint text, p_operation text,
	p_amount bigint, p_currency text, p_micros bigint, p_day text, p_month text,
	p_method text, p_path text, p_body bytea, p_stripe_account text, p_stripe_version text,
	p_now timestamptz, p_customer text, p_dup_key text, p_override boolean, p_key_version text,
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
	v_version text;
BEGIN
	-- See 0002 for why NO KEY.
	SELECT * INTO k FROM keys WHERE id = p_key_id FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'No such key: %.', p_key_id USING ERRCODE = 'KB404';
	END IF;
	IF k.revoked_at IS NOT NULL OR (k.expires_at IS NOT NULL AND p_now >= k.expires_at)
	   OR k.suspended_at IS NOT NULL THEN
		RAISE EXCEPTION 'Vault key % can no longer be used.', p_key_id USING ERRCODE = 'KB401';
	END IF;

	SELECT
		(SELECT id FROM reservations WHERE key_id = p_key_id AND idempotency_key = p_idempotency_key),
		COALESCE((SELECT micros FROM spend_counters WHERE key_id = p_key_id AND window_name = 'daily' AND bucket = p_day), 0),
		COALESCE((SELECT micros FROM spend_counters WHERE key_id = p_key_id AND window_name = 'monthly' AND bucket = p_month), 0),
		COALESCE((SELECT micros FROM spend_counters WHERE key_id = p_key_id AND window_name = 'total' AND bucket = ''), 0),
		(SELECT xmin::text FROM keys WHERE id = p_key_id)
	INTO replay_id, c_day, c_month, c_total, v_version;

	-- Decided on another version of the key: nothing reserved, not even a
	-- replay's answer; the caller decides again on the key as it is now.
	IF p_key_version <> '' AND p_key_version IS DISTINCT FROM v_version THEN
		status := 'stale';
		RETURN;
	END IF;

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

-- keybrake_reserve_many as in 0033 but for p_key_versions.
CREATE FUNCTION keybrake_reserve_many(
	p_key_ids text[], p_days text[], p_months text[],
	p_ids text[], p_idempotency_keys text[], p_fingerprints text[], p_operations text[],
	p_amounts bigint[], p_currencies text[], p_micros bigint[],
	p_methods text[], p_paths text[], p_bodies bytea[], p_stripe_accounts text[], p_stripe_versions text[],
	p_nows timestamptz[], p_customers text[], p_dup_keys text[], p_overrides boolean[],
	p_key_versions text[])
RETURNS TABLE (ord integer, status text, win text, cap bigint, spent bigint, replay_id text,
	guard text, rule text, earlier_id text, earlier_object text, earlier_at timestamptz,
	g_limit integer, g_count integer, retry_at timestamptz, suspended boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	n         integer := coalesce(array_length(p_ids, 1), 0);
	kid       text;
	k         keys%ROWTYPE;
	v_day     text;
	v_month   text;
	c_day     bigint;
	c_month   bigint;
	c_total   bigint;
	seen_keys text[];  -- Idempotency-Keys the key already has, then those accepted
	seen_ids  text[];  -- the reservation IDs of seen_keys
	dead      boolean; -- the key is suspended, before or by this batch
	took      boolean; -- the key accepted an element
	added     bigint;
	accepted  integer[] := '{}'; -- elements of unguarded keys, inserted at the end
	d_keys    text[] := '{}';
	d_wins    text[] := '{}';
	d_bkts    text[] := '{}';
	d_delta   bigint[] := '{}';
	gc        record;
	v_version text;    -- the key row's xmin, as keyColumns reads it
	pos       integer;
	i         integer;
BEGIN
	FOR kid IN SELECT DISTINCT u.id FROM unnest(p_key_ids) AS u(id) ORDER BY u.id LOOP
		SELECT * INTO k FROM keys WHERE id = kid FOR NO KEY UPDATE;
		IF NOT FOUND THEN
			RAISE EXCEPTION 'No such key: %.', kid USING ERRCODE = 'KB404';
		END IF;
		pos := array_position(p_key_ids, kid);
		v_day := p_days[pos]; v_month := p_months[pos];

		-- A statement of its own after the lock is granted: a fresh snapshot.
		SELECT
			-- Both in the same order, so seen_ids[n] is the ID of seen_keys[n].
			(SELECT coalesce(array_agg(r.idempotency_key ORDER BY r.idempotency_key), '{}') FROM reservations r WHERE r.key_id = kid AND r.idempotency_key = ANY (p_idempotency_keys)),
			(SELECT coalesce(array_agg(r.id ORDER BY r.idempotency_key), '{}') FROM reservations r WHERE r.key_id = kid AND r.idempotency_key = ANY (p_idempotency_keys)),
			COALESCE((SELECT c.micros FROM spend_counters c WHERE c.key_id = kid AND c.window_name = 'daily' AND c.bucket = v_day), 0),
			COALESCE((SELECT c.micros FROM spend_counters c WHERE c.key_id = kid AND c.window_name = 'monthly' AND c.bucket = v_month), 0),
			COALESCE((SELECT c.micros FROM spend_counters c WHERE c.key_id = kid AND c.window_name = 'total' AND c.bucket = ''), 0),
			(SELECT k2.xmin::text FROM keys k2 WHERE k2.id = kid)
		INTO seen_keys, seen_ids, c_day, c_month, c_total, v_version;

		dead := k.suspended_at IS NOT NULL;
		took := false;
		added := 0;
		FOR i IN 1 .. n LOOP
			CONTINUE WHEN p_key_ids[i] <> kid;
			ord := i; status := NULL; win := NULL; cap := NULL; spent := NULL; replay_id := NULL;
			guard := NULL; rule := NULL; earlier_id := NULL; earlier_object := NULL; earlier_at := NULL;
			g_limit := NULL; g_count := NULL; retry_at := NULL; suspended := NULL;

			IF dead OR k.revoked_at IS NOT NULL OR (k.expires_at IS NOT NULL AND p_nows[i] >= k.expires_at) THEN
				status := 'unusable';
				RETURN NEXT;
				CONTINUE;
			END IF;

			IF p_key_versions[i] <> '' AND p_key_versions[i] IS DISTINCT FROM v_version THEN
				status := 'stale';
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
				status := NULL;
			END IF;
			IF status = 'over' THEN
				RETURN NEXT;
				CONTINUE;
			END IF;

			IF k.guards IS NOT NULL THEN
				gc := keybrake_guard_check(k, p_fingerprints[i], p_operations[i], p_micros[i],
					p_customers[i], p_dup_keys[i], p_overrides[i], p_nows[i]);
				IF gc.guard IS NOT NULL THEN
					status := 'guard'; guard := gc.guard; rule := gc.rule;
					earlier_id := gc.earlier_id; earlier_object := gc.earlier_object; earlier_at := gc.earlier_at;
					g_limit := gc.g_limit; g_count := gc.g_count; retry_at := gc.retry_at; suspended := gc.suspended;
					dead := dead OR coalesce(gc.suspended, false);
					RETURN NEXT;
					CONTINUE;
				END IF;
				INSERT INTO reservations (id, key_id, idempotency_key, fingerprint, operation,
					amount, currency, micros, settled_micros, state, day, month,
					req_method, req_path, req_body, req_stripe_account, req_stripe_version,
					object_id, upstream_status, attempts, lease_owner, lease_until, created_at, updated_at,
					customer, dup_key, counted)
				VALUES (p_ids[i], kid, p_idempotency_keys[i], p_fingerprints[i], p_operations[i],
					p_amounts[i], p_currencies[i], p_micros[i], 0, 'reserved', v_day, v_month,
					p_methods[i], p_paths[i], p_bodies[i], p_stripe_accounts[i], p_stripe_versions[i],
					'', 0, 0, '', NULL, p_nows[i], p_nows[i],
					p_customers[i], p_dup_keys[i], gc.counted);
			ELSE
				accepted := accepted || i;
			END IF;
			status := 'ok';
			took := true;
			seen_keys := seen_keys || p_idempotency_keys[i];
			seen_ids := seen_ids || p_ids[i];
			c_day := c_day + p_micros[i]; c_month := c_month + p_micros[i]; c_total := c_total + p_micros[i];
			added := added + p_micros[i];
			RETURN NEXT;
		END LOOP;

		IF took THEN
			d_keys  := d_keys || ARRAY[kid, kid, kid];
			d_wins  := d_wins || ARRAY['daily', 'monthly', 'total'];
			d_bkts  := d_bkts || ARRAY[v_day, v_month, ''];
			d_delta := d_delta || ARRAY[added, added, added];
		END IF;
	END LOOP;

	IF array_length(accepted, 1) > 0 THEN
		INSERT INTO reservations (id, key_id, idempotency_key, fingerprint, operation,
			amount, currency, micros, settled_micros, state, day, month,
			req_method, req_path, req_body, req_stripe_account, req_stripe_version,
			object_id, upstream_status, attempts, lease_owner, lease_until, created_at, updated_at,
			customer, dup_key)
		SELECT p_ids[a.i], p_key_ids[a.i], p_idempotency_keys[a.i], p_fingerprints[a.i], p_operations[a.i],
			p_amounts[a.i], p_currencies[a.i], p_micros[a.i], 0, 'reserved', p_days[a.i], p_months[a.i],
			p_methods[a.i], p_paths[a.i], p_bodies[a.i], p_stripe_accounts[a.i], p_stripe_versions[a.i],
			'', 0, 0, '', NULL, p_nows[a.i], p_nows[a.i],
			p_customers[a.i], p_dup_keys[a.i]
		FROM unnest(accepted) WITH ORDINALITY AS a(i, n)
		ORDER BY a.n;
	END IF;
	-- The order of keybrake_settle_batch's counter writes.
	IF array_length(d_keys, 1) > 0 THEN
		INSERT INTO spend_counters AS c (key_id, window_name, bucket, micros)
		SELECT d.k, d.w, d.b, sum(d.m)
		FROM unnest(d_keys, d_wins, d_bkts, d_delta) AS d(k, w, b, m)
		GROUP BY d.k, d.w, d.b
		ORDER BY d.k, d.w, d.b
		ON CONFLICT (key_id, window_name, bucket) DO UPDATE SET micros = c.micros + EXCLUDED.micros;
	END IF;
END
$$;
