-- 0027_threshold_fast: keybrake_alert_threshold as in 0008, with a fast
-- path. The trigger fires for every counter row a reservation or
-- settlement writes (three per reservation), and running its INSERT …
-- SELECT … ON CONFLICT each time, though it inserts nothing nearly always,
-- was most of what a reservation cost the server (0.4 of 1.1 ms measured
-- with pg_stat_statements; docs/performance.md).
--
-- A threshold rule of percent p fires when the counter moves from below
-- ceil(cap * p / 100) to at or above it. Those thresholds grow with p, so
-- the smallest percent whose threshold is above the old value,
-- p_lo = floor(100 * old / cap) + 1, has the smallest threshold that could
-- be crossed: if p_lo > 100, or its threshold is above the new value, no
-- rule of any percent can fire and the trigger returns without the
-- INSERT. Otherwise the INSERT runs exactly as before and decides which
-- rules fire. The test is exact (computed in numeric, no overflow), so the
-- alerts written are the same as 0008's.
CREATE OR REPLACE FUNCTION keybrake_alert_threshold() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
	old_micros bigint := 0;
	v_cap      bigint;
	p_lo       numeric;
BEGIN
	IF TG_OP = 'UPDATE' THEN
		old_micros := OLD.micros;
	END IF;
	IF NEW.window_name NOT IN ('daily', 'monthly', 'total') OR NEW.micros <= old_micros THEN
		RETURN NULL;
	END IF;
	SELECT CASE NEW.window_name WHEN 'daily' THEN daily_cap WHEN 'monthly' THEN monthly_cap ELSE total_cap END
	INTO v_cap FROM keys WHERE id = NEW.key_id;
	IF v_cap IS NULL THEN
		RETURN NULL;  -- an uncapped window has no thresholds (0008: k.cap IS NOT NULL)
	END IF;
	IF v_cap > 0 THEN
		p_lo := greatest(floor(100::numeric * old_micros / v_cap) + 1, 1);
		IF p_lo > 100 OR ceil(v_cap::numeric * p_lo / 100) > NEW.micros THEN
			RETURN NULL;
		END IF;
	END IF;
	INSERT INTO alerts (id, alert_key, kind, key_id, window_name, bucket, percent, cap_micros, threshold_micros,
		spent_micros, reserved_micros, reservation_id, count, endpoint_id, detail, created_at)
	SELECT keybrake_alert_id('alt_'),
		'threshold:' || NEW.key_id || ':' || NEW.window_name || ':' || NEW.bucket || ':' || t.percent,
		'threshold', NEW.key_id, NEW.window_name, NEW.bucket, t.percent, t.cap, t.threshold, NEW.micros, 0, '', 0, '', '', now()
	FROM (
		SELECT r.percent, k.cap, (k.cap / 100) * r.percent + ((k.cap % 100) * r.percent + 99) / 100 AS threshold
		FROM alert_rules r,
			(SELECT CASE NEW.window_name WHEN 'daily' THEN daily_cap WHEN 'monthly' THEN monthly_cap ELSE total_cap END AS cap
			 FROM keys WHERE id = NEW.key_id) AS k
		WHERE r.kind = 'threshold' AND r.enabled AND r.window_name IN ('', NEW.window_name) AND k.cap IS NOT NULL
		AND r.key_id = keybrake_rule_owner('threshold', NEW.key_id)
	) AS t
	WHERE t.threshold > 0 AND old_micros < t.threshold AND NEW.micros >= t.threshold
	ORDER BY t.percent
	ON CONFLICT (alert_key) DO NOTHING;
	RETURN NULL;
END
$$;
