-- 0036_repeat_fingerprints: the repeat rule's fingerprints are indexed for
-- the keys that have the rule, not for every reservation (issue 16), as
-- SQLite's 0026 keeps them apart.
--
-- reservations_fingerprint (key_id, fingerprint, created_at) took an entry
-- for every reservation, twice (the settlement is not a HOT update), though
-- only the breaker's repeat_body rule reads it. It now holds the rows whose
-- repeat_rule is set. The rule counts every reservation of the key in its
-- window, including those made before the rule was set, so repeat_rule is
-- set on every reservation (with a fingerprint) of every key whose guards
-- have the rule:
--   - when a reservation is made or re-armed, from its key's guards, by the
--     BEFORE trigger that already reads the key's row to refuse a suspended
--     key (keybrake_refuse_suspended, 0009); every writer of reservations
--     holds the key's row lock (FOR NO KEY UPDATE), which a change of the
--     guards also takes, so the guards it reads are those in force;
--   - when a key's guards gain the rule, on the key's reservations not set
--     yet, in the transaction that changes the guards: it writes each of
--     them again (about 40 µs a reservation on the development machine, so
--     some 40 s for a key with a million, once, while that key's requests
--     wait on its row lock);
--   - a key that loses the rule keeps its rows set (they still only count
--     while the rule is there to read them, and retention removes them);
--   - a pruned reservation leaves the index with its row.
-- Settlements change neither the column nor the index's columns. (IF NOT
-- EXISTS and OR REPLACE let TestMigrate_RepeatFingerprints apply it again.)
ALTER TABLE reservations ADD COLUMN IF NOT EXISTS repeat_rule boolean NOT NULL DEFAULT false;

-- keybrake_repeat_rule says whether guards have the repeat rule, as
-- keybrake_guard_check reads them (breaker.repeat_body > 0).
CREATE OR REPLACE FUNCTION keybrake_repeat_rule(g jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE WHEN jsonb_typeof(g->'breaker') = 'object' AND jsonb_typeof(g->'breaker'->'repeat_body') = 'number'
		THEN (g->'breaker'->>'repeat_body')::numeric > 0 ELSE false END
$$;

-- In ID order, as keybrake_repeat_rule_set below.
UPDATE reservations SET repeat_rule = true WHERE id IN (
	SELECT r.id FROM reservations r JOIN keys k ON k.id = r.key_id
	WHERE keybrake_repeat_rule(k.guards) AND r.fingerprint <> '' AND NOT r.repeat_rule ORDER BY r.id FOR UPDATE OF r);

DROP INDEX IF EXISTS reservations_fingerprint;
CREATE INDEX reservations_fingerprint ON reservations (key_id, fingerprint, created_at) WHERE repeat_rule;

CREATE OR REPLACE FUNCTION keybrake_refuse_suspended() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
	v_suspended boolean;
	v_repeat    boolean;
BEGIN
	SELECT suspended_at IS NOT NULL, keybrake_repeat_rule(guards) INTO v_suspended, v_repeat FROM keys WHERE id = NEW.key_id;
	IF v_suspended THEN
		RAISE EXCEPTION 'This vault key is suspended; an admin can resume it.' USING ERRCODE = 'KB403';
	END IF;
	-- A row set stays set (see above); an unknown key fails its foreign key.
	NEW.repeat_rule := NEW.repeat_rule OR (coalesce(v_repeat, false) AND NEW.fingerprint <> '');
	RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION keybrake_repeat_rule_set() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	-- Rows locked in ID order, the order a settlement batch locks them in
	-- (settle_batch.go), so the two never wait on each other in a cycle.
	UPDATE reservations SET repeat_rule = true WHERE id IN (
		SELECT id FROM reservations WHERE key_id = NEW.id AND fingerprint <> '' AND NOT repeat_rule ORDER BY id FOR UPDATE);
	RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS keys_repeat_rule ON keys;
CREATE TRIGGER keys_repeat_rule AFTER UPDATE OF guards ON keys
	FOR EACH ROW WHEN (keybrake_repeat_rule(NEW.guards) AND NOT keybrake_repeat_rule(OLD.guards))
	EXECUTE FUNCTION keybrake_repeat_rule_set();

-- keybrake_guard_check as in 0023, reading the repeat rule's reservations
-- through the partial index (r.repeat_rule).
CREATE OR REPLACE FUNCTION keybrake_guard_check(k keys, p_fingerprint text, p_operation text, p_micros bigint,
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
			SELECT (SELECT count(*) FROM (SELECT 1 FROM reservations r WHERE r.key_id = k.id AND r.repeat_rule AND r.fingerprint = p_fingerprint AND r.created_at > p_now - win
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
			CONTINUE WHEN coalesce((v->>'requests')::boolean, false);
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

