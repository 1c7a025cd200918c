-- 0006_holds: holds on objects that can still move money (keybrake.HoldService).
--
-- A reservation may now be 'held': the object it created upstream (a payment
-- intent awaiting confirmation, an uncaptured authorization) can still move
-- money without passing keybrake, so its amount stays counted in full
-- (keybrake_counted counts every state but settled and released at micros).
-- Settling to 'held' grows the hold to what the object can move and never
-- shrinks it; keybrake_settle and keybrake_settle_batch learn that, and may
-- now settle a held reservation.

ALTER TABLE reservations DROP CONSTRAINT reservations_state_check;
ALTER TABLE reservations ADD CONSTRAINT reservations_state_check
	CHECK (state IN ('reserved', 'settled', 'released', 'uncertain', 'held'));

-- The held part of a key's spend.
CREATE INDEX reservations_held ON reservations (key_id) WHERE state = 'held';

-- holds links a key's upstream object to the reservation that holds it, and
-- carries the object's lock: writes to one object through keybrake run one
-- at a time, across replicas. reservation_id is '' while a lock exists before
-- any hold.
CREATE TABLE holds (
	key_id         text NOT NULL REFERENCES keys (id),
	object_id      text NOT NULL,
	reservation_id text NOT NULL,
	hold_until     timestamptz,
	lock_owner     text NOT NULL,
	lock_until     timestamptz,
	PRIMARY KEY (key_id, object_id)
);

CREATE INDEX holds_until ON holds (hold_until) WHERE hold_until IS NOT NULL;

-- Locks are the object's, whichever key takes them: a lock checks the
-- object's rows of every key.
CREATE INDEX holds_object ON holds (object_id);

CREATE OR REPLACE FUNCTION keybrake_settle(
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
	ELSIF p_state = 'held' THEN
		-- A hold grows to what the object can move, never shrinks.
		IF p_settled_micros > r.micros THEN
			r.micros := p_settled_micros;
			IF p_currency <> '' THEN r.amount := p_amount; r.currency := p_currency; END IF;
		END IF;
		r.settled_micros := 0;
		r.lease_owner := ''; r.lease_until := NULL;
	END IF;
	r.state := p_state;
	IF p_object_id <> '' THEN r.object_id := p_object_id; END IF;
	IF p_upstream_status <> 0 THEN r.upstream_status := p_upstream_status; END IF;
	r.updated_at := p_now;
	after := keybrake_counted(r);

	UPDATE reservations SET state = r.state, settled_micros = r.settled_micros, micros = r.micros, amount = r.amount,
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

CREATE OR REPLACE FUNCTION keybrake_settle_batch(
	p_ids text[], p_states text[], p_settled_micros bigint[], p_amounts bigint[], p_currencies text[],
	p_object_ids text[], p_upstream_statuses integer[], p_nows timestamptz[])
RETURNS TABLE (ord integer, status text, message text, res reservations)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	r       reservations%ROWTYPE;
	before  record;
	after   record;
	d_keys  text[] := '{}';
	d_wins  text[] := '{}';
	d_bkts  text[] := '{}';
	d_delta bigint[] := '{}';
	i       integer;
BEGIN
	FOR i IN 1 .. coalesce(array_length(p_ids, 1), 0) LOOP
		ord := i; status := NULL; message := NULL; res := NULL;

		SELECT * INTO r FROM reservations WHERE id = p_ids[i] FOR UPDATE;
		IF NOT FOUND THEN
			status := 'notfound'; message := format('No such reservation: %s.', p_ids[i]);
			RETURN NEXT;
			CONTINUE;
		END IF;
		IF r.state IN ('settled', 'released') THEN
			status := 'conflict'; message := format('Reservation %s is already %s.', r.id, r.state);
			RETURN NEXT;
			CONTINUE;
		END IF;

		before := keybrake_counted(r);
		IF p_states[i] = 'settled' THEN
			r.settled_micros := p_settled_micros[i];
			r.amount := p_amounts[i];
			IF p_currencies[i] <> '' THEN r.currency := p_currencies[i]; END IF;
			r.lease_owner := ''; r.lease_until := NULL;
		ELSIF p_states[i] = 'released' THEN
			r.settled_micros := 0;
			r.lease_owner := ''; r.lease_until := NULL;
		ELSIF p_states[i] = 'held' THEN
			-- A hold grows to what the object can move, never shrinks.
			IF p_settled_micros[i] > r.micros THEN
				r.micros := p_settled_micros[i];
				IF p_currencies[i] <> '' THEN r.amount := p_amounts[i]; r.currency := p_currencies[i]; END IF;
			END IF;
			r.settled_micros := 0;
			r.lease_owner := ''; r.lease_until := NULL;
		END IF;
		r.state := p_states[i];
		IF p_object_ids[i] <> '' THEN r.object_id := p_object_ids[i]; END IF;
		IF p_upstream_statuses[i] <> 0 THEN r.upstream_status := p_upstream_statuses[i]; END IF;
		r.updated_at := p_nows[i];
		after := keybrake_counted(r);

		UPDATE reservations SET state = r.state, settled_micros = r.settled_micros, micros = r.micros, amount = r.amount,
			currency = r.currency, object_id = r.object_id, upstream_status = r.upstream_status,
			lease_owner = r.lease_owner, lease_until = r.lease_until, updated_at = r.updated_at
		WHERE id = r.id;
		IF after.total <> before.total OR after.uncertain <> before.uncertain THEN
			d_keys  := d_keys || ARRAY[r.key_id, r.key_id, r.key_id, r.key_id];
			d_wins  := d_wins || ARRAY['daily', 'monthly', 'total', 'uncertain'];
			d_bkts  := d_bkts || ARRAY[r.day, r.month, '', ''];
			d_delta := d_delta || ARRAY[after.total - before.total, after.total - before.total,
			                            after.total - before.total, after.uncertain - before.uncertain];
		END IF;
		status := 'ok'; res := r;
		RETURN NEXT;
	END LOOP;

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
