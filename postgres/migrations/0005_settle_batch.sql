-- 0005_settle_batch: group commit of settlements. keybrake_settle_batch
-- settles several reservations, in the order given, in one statement (one
-- round trip, one implicit transaction, one commit), each exactly as
-- keybrake_settle would: it locks the reservation row, refuses a final one,
-- updates it, and counts the change in what it counts. Outcomes are returned
-- per element instead of raised, so one unknown or final reservation does
-- not abort the others: status is 'ok' (res is the updated reservation),
-- 'notfound' or 'conflict' (res is the final reservation), with the message
-- keybrake_settle would raise.
--
-- Locks are taken in a fixed order, so batches never deadlock with one
-- another or with keybrake_settle and keybrake_reserve(_batch): the store
-- passes the reservations sorted by ID (a reservation settled twice in one
-- batch keeps its arrival order, and the second sees the first), and the
-- counter changes of the whole batch are summed and upserted once at the
-- end, rows sorted by key, window and bucket, which for one key is the order
-- daily, monthly, total, uncertain of the single-row functions.
CREATE FUNCTION keybrake_settle_batch(
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
		END IF;
		r.state := p_states[i];
		IF p_object_ids[i] <> '' THEN r.object_id := p_object_ids[i]; END IF;
		IF p_upstream_statuses[i] <> 0 THEN r.upstream_status := p_upstream_statuses[i]; END IF;
		r.updated_at := p_nows[i];
		after := keybrake_counted(r);

		UPDATE reservations SET state = r.state, settled_micros = r.settled_micros, amount = r.amount,
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
