-- 0004_reserve_batch: group commit of reservations. keybrake_reserve_batch
-- runs several reservations of one key, in order, under one acquisition of
-- the key row lock and in one statement (one round trip, one implicit
-- transaction, one commit). On a hot key the lock is then held once per
-- batch rather than once per reservation, for the batch's execution and
-- its single commit.
--
-- Each element is decided exactly as keybrake_reserve would decide it, in
-- the order given, as if the elements ran one after the other at the moment
-- the lock is granted: the replay lookups and the counters are read once,
-- right after the lock (a fresh snapshot), and each accepted element adds to
-- the running counters and to the known Idempotency-Keys that the elements
-- after it check. The accepted reservations are then inserted, and the
-- counters upserted, once for the batch: writing the hot counter rows once
-- per element is what made a long batch slow (each update of a row adds a
-- version that the next lookup of the row walks past). All elements share
-- the day and month buckets (the store groups them so). A settlement that
-- commits while the batch runs is applied after it, which is one of the
-- orders it could have had anyway (see keybrake_settle). Outcomes a caller must tell apart are
-- returned per element instead of raised, so one refusal or replay does not
-- abort the others: status is 'ok', 'replay' (replay_id), 'over' (win, cap,
-- spent) or 'unusable' (the key is revoked or expired at that element's
-- p_nows). Anything else raises and rolls back the whole batch (no such key,
-- KB404; a reservation ID already taken, 23505), and the store then runs
-- the batch's reservations one by one through keybrake_reserve, so each
-- gets the error it would have got alone.
CREATE FUNCTION keybrake_reserve_batch(
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
