-- 0002_one_round_trip: Reserve and Settle as functions, so each is one
-- statement, one round trip and one implicit transaction, and the key row
-- lock is held only while the server runs the function and commits, never
-- across a network round trip to the proxy.
--
-- Both run at READ COMMITTED (the store sets default_transaction_isolation on
-- its connections). They are VOLATILE, so every statement in them takes a
-- fresh snapshot: the statements after SELECT … FOR NO KEY UPDATE on the key see
-- everything the previous holder of the lock committed.
--
-- Errors the caller must tell apart are raised with keybrake's own SQLSTATEs:
-- KB404 (no such key or reservation), KB401 (key revoked or expired), KB409
-- (reservation already final). Raising aborts the implicit transaction, so
-- nothing is recorded.

-- keybrake_reserve checks every cap of the key against its counters and
-- records the reservation with its counters, under the key row lock. status is
-- 'ok' (recorded), 'replay' (the key already has a reservation for the
-- Idempotency-Key: replay_id names it, nothing counted) or 'over' (nothing
-- recorded; win, cap and spent describe the first window exceeded, in the
-- order per_request, daily, monthly, total). The caller computes the day and
-- month buckets from the key's timezone, which never changes.
CREATE FUNCTION keybrake_reserve(
	p_id text, p_key_id text, p_idempotency_key text, p_fingerprint text, p_operation text,
	p_amount bigint, p_currency text, p_micros bigint, p_day text, p_month text,
	p_method text, p_path text, p_body bytea, p_stripe_account text, p_stripe_version text,
	p_now timestamptz,
	OUT status text, OUT win text, OUT cap bigint, OUT spent bigint, OUT replay_id text)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	k       keys%ROWTYPE;
	c_day   bigint;
	c_month bigint;
	c_total bigint;
BEGIN
	-- FOR NO KEY UPDATE, not FOR UPDATE: it serialises reservations and
	-- policy changes of the key (an UPDATE of keys takes the same lock) but
	-- not the FOR KEY SHARE lock that a settlement inserting a new counter
	-- row takes through the foreign key; with FOR UPDATE that settlement,
	-- holding a counter row this reservation wants, would deadlock with it.
	SELECT * INTO k FROM keys WHERE id = p_key_id FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'No such key: %.', p_key_id USING ERRCODE = 'KB404';
	END IF;
	IF (k.revoked_at IS NOT NULL AND p_now >= k.revoked_at) OR (k.expires_at IS NOT NULL AND p_now >= k.expires_at) THEN
		RAISE EXCEPTION 'Vault key % can no longer be used.', p_key_id USING ERRCODE = 'KB401';
	END IF;

	-- A statement of its own after the lock is granted: a fresh snapshot.
	SELECT
		(SELECT id FROM reservations WHERE key_id = p_key_id AND idempotency_key = p_idempotency_key),
		COALESCE((SELECT micros FROM spend_counters WHERE key_id = p_key_id AND window_name = 'daily' AND bucket = p_day), 0),
		COALESCE((SELECT micros FROM spend_counters WHERE key_id = p_key_id AND window_name = 'monthly' AND bucket = p_month), 0),
		COALESCE((SELECT micros FROM spend_counters WHERE key_id = p_key_id AND window_name = 'total' AND bucket = ''), 0)
	INTO replay_id, c_day, c_month, c_total;

	-- A replay was counted when first reserved: return it, never refuse it.
	IF replay_id IS NOT NULL THEN
		status := 'replay';
		RETURN;
	END IF;

	-- amount > cap - spent is spent + amount > cap without overflow.
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

	INSERT INTO reservations (id, key_id, idempotency_key, fingerprint, operation,
		amount, currency, micros, settled_micros, state, day, month,
		req_method, req_path, req_body, req_stripe_account, req_stripe_version,
		object_id, upstream_status, attempts, lease_owner, lease_until, created_at, updated_at)
	VALUES (p_id, p_key_id, p_idempotency_key, p_fingerprint, p_operation,
		p_amount, p_currency, p_micros, 0, 'reserved', p_day, p_month,
		p_method, p_path, p_body, p_stripe_account, p_stripe_version,
		'', 0, 0, '', NULL, p_now, p_now);
	-- Rows in a fixed order (daily, monthly, total, uncertain, as in
	-- keybrake_settle), so concurrent upserts never deadlock.
	INSERT INTO spend_counters AS c (key_id, window_name, bucket, micros)
	VALUES (p_key_id, 'daily', p_day, p_micros), (p_key_id, 'monthly', p_month, p_micros),
	       (p_key_id, 'total', '', p_micros)
	ON CONFLICT (key_id, window_name, bucket) DO UPDATE SET micros = c.micros + EXCLUDED.micros;
	status := 'ok';
	win := NULL; cap := NULL; spent := NULL;
END
$$;

-- keybrake_counted is what a reservation in a state counts against its key's
-- caps, and how much of that is uncertain.
CREATE FUNCTION keybrake_counted(r reservations, OUT total bigint, OUT uncertain bigint)
LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE r.state WHEN 'settled' THEN r.settled_micros WHEN 'released' THEN 0 ELSE r.micros END,
	       CASE r.state WHEN 'uncertain' THEN r.micros ELSE 0 END
$$;

-- keybrake_settle moves a reservation to settled, released or uncertain and
-- adjusts the counters of its own buckets by the change in what it counts.
-- It returns the updated reservation.
--
-- It locks the reservation row, not the key row. The counters change only by
-- deltas, each applied by an upsert that locks the counter row and adds to
-- its latest version, so no change is ever lost. What a settlement does to
-- a reservation being checked at the same moment is safe either way: a
-- decrease (release, or settled below the reserved amount) that the check
-- does not see yet leaves the check stricter than it needs to be, never
-- looser; an increase (settled above the reserved amount) is money that has
-- already moved upstream, which no lock could prevent. And the common
-- settlement, of exactly the amount reserved, changes no counter at all, so
-- it never waits behind the key's reservations: on a hot key that halves
-- the work serialised by the key lock.
CREATE FUNCTION keybrake_settle(
	p_id text, p_state text, p_settled_micros bigint, p_amount bigint, p_currency text,
	p_object_id text, p_upstream_status integer, p_now timestamptz)
RETURNS SETOF reservations
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	r      reservations%ROWTYPE;
	before record;
	after  record;
BEGIN
	-- The row lock serialises settlements of one reservation and a
	-- resolver's lease of it, so none writes back a stale state or lease.
	SELECT * INTO r FROM reservations WHERE id = p_id FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'No such reservation: %.', p_id USING ERRCODE = 'KB404';
	END IF;
	IF r.state IN ('settled', 'released') THEN
		RAISE EXCEPTION 'Reservation % is already %.', r.id, r.state USING ERRCODE = 'KB409';
	END IF;

	before := keybrake_counted(r);
	IF p_state = 'settled' THEN
		r.settled_micros := p_settled_micros;
		r.amount := p_amount;
		IF p_currency <> '' THEN r.currency := p_currency; END IF;
		r.lease_owner := ''; r.lease_until := NULL;
	ELSIF p_state = 'released' THEN
		r.settled_micros := 0;
		r.lease_owner := ''; r.lease_until := NULL;
	END IF;
	r.state := p_state;
	IF p_object_id <> '' THEN r.object_id := p_object_id; END IF;
	IF p_upstream_status <> 0 THEN r.upstream_status := p_upstream_status; END IF;
	r.updated_at := p_now;
	after := keybrake_counted(r);

	UPDATE reservations SET state = r.state, settled_micros = r.settled_micros, amount = r.amount,
		currency = r.currency, object_id = r.object_id, upstream_status = r.upstream_status,
		lease_owner = r.lease_owner, lease_until = r.lease_until, updated_at = r.updated_at
	WHERE id = p_id;
	IF after.total <> before.total OR after.uncertain <> before.uncertain THEN
		INSERT INTO spend_counters AS c (key_id, window_name, bucket, micros)
		VALUES (r.key_id, 'daily', r.day, after.total - before.total), (r.key_id, 'monthly', r.month, after.total - before.total),
		       (r.key_id, 'total', '', after.total - before.total), (r.key_id, 'uncertain', '', after.uncertain - before.uncertain)
		ON CONFLICT (key_id, window_name, bucket) DO UPDATE SET micros = c.micros + EXCLUDED.micros;
	END IF;
	RETURN NEXT r;
END
$$;
