-- 0024_threshold_prefilter: the threshold alerts of a new reservation are
-- looked for only when a counter it moved crossed a whole percent of its cap
-- (issue 16).
--
-- 0023 ran the threshold-alert INSERT ... SELECT (the alert rules joined
-- with the key and its three counters) in the counting trigger, for every
-- reservation: with the three default rules enabled it was a third of the
-- reservation INSERT's CPU, though an alert fires at most once per rule,
-- window and bucket. A rule of p% fires when a counter moves from below
-- ceil(cap * p / 100) to at or above it, that is when before * 100 < cap * p
-- <= after * 100 for an integer p in 1..100; that can only happen when
-- after * 100 / cap and before * 100 / cap (integer division) differ and
-- before < cap. The trigger below checks that first (one primary-key read of
-- the key and of each counter, no rules), and runs 0023's statement,
-- unchanged, only then. Counters so large that * 100 could overflow run it
-- always. The alerts are the same.
--
-- The statement must read the counters after this reservation moved them,
-- so the counters move in a BEFORE INSERT trigger, and the alerts are looked
-- for in an AFTER INSERT one: SQLite runs BEFORE triggers, then the insert,
-- then AFTER triggers (the order of two triggers of the same kind is not
-- specified). A failed insert (a duplicate Idempotency-Key, the suspension
-- backstop) aborts the statement, and with it what its triggers changed.
DROP TRIGGER reservations_count_insert;

CREATE TRIGGER reservations_count_insert BEFORE INSERT ON reservations
BEGIN
	INSERT INTO spend_counters (key_id, period, bucket, micros)
	VALUES (NEW.key_id, 'total', '', NEW.micros), (NEW.key_id, 'daily', NEW.day, NEW.micros), (NEW.key_id, 'monthly', NEW.month, NEW.micros)
	ON CONFLICT (key_id, period, bucket) DO UPDATE SET micros = micros + excluded.micros;
END;

CREATE TRIGGER reservations_threshold_insert AFTER INSERT ON reservations
WHEN NEW.micros > 0 AND EXISTS (
	SELECT 1 FROM spend_counters c CROSS JOIN keys k
		WHERE c.key_id = NEW.key_id AND c.period = 'daily' AND c.bucket = NEW.day AND k.id = NEW.key_id
		AND k.cap_daily > 0 AND c.micros - NEW.micros < k.cap_daily
		AND (c.micros >= 92233720368547758 OR (c.micros * 100) / k.cap_daily <> ((c.micros - NEW.micros) * 100) / k.cap_daily)
	UNION ALL
	SELECT 1 FROM spend_counters c CROSS JOIN keys k
		WHERE c.key_id = NEW.key_id AND c.period = 'monthly' AND c.bucket = NEW.month AND k.id = NEW.key_id
		AND k.cap_monthly > 0 AND c.micros - NEW.micros < k.cap_monthly
		AND (c.micros >= 92233720368547758 OR (c.micros * 100) / k.cap_monthly <> ((c.micros - NEW.micros) * 100) / k.cap_monthly)
	UNION ALL
	SELECT 1 FROM spend_counters c CROSS JOIN keys k
		WHERE c.key_id = NEW.key_id AND c.period = 'total' AND c.bucket = '' AND k.id = NEW.key_id
		AND k.cap_total > 0 AND c.micros - NEW.micros < k.cap_total
		AND (c.micros >= 92233720368547758 OR (c.micros * 100) / k.cap_total <> ((c.micros - NEW.micros) * 100) / k.cap_total))
BEGIN
	INSERT INTO alerts (id, alert_key, kind, key_id, window_name, bucket, percent, cap_micros, threshold_micros,
		spent_micros, reserved_micros, reservation_id, count, endpoint_id, detail, created_at)
	SELECT 'alt_' || lower(hex(randomblob(12))),
		'threshold:' || NEW.key_id || ':' || t.period || ':' || t.bucket || ':' || t.percent,
		'threshold', NEW.key_id, t.period, t.bucket, t.percent, t.cap, t.threshold, t.micros, 0, '', 0, '', '',
		CAST(unixepoch('subsec') * 1000000 AS INTEGER)
	FROM (
		SELECT w.*, (w.cap / 100) * w.percent + ((w.cap % 100) * w.percent + 99) / 100 AS threshold
		FROM (
			SELECT c.period AS period, c.bucket AS bucket, c.micros AS micros, r.percent AS percent,
				(CASE c.period WHEN 'daily' THEN k.cap_daily WHEN 'monthly' THEN k.cap_monthly ELSE k.cap_total END) AS cap
			FROM alert_rules r CROSS JOIN keys k CROSS JOIN spend_counters c
			WHERE r.kind = 'threshold' AND r.enabled = 1
			AND r.key_id = (CASE WHEN EXISTS (SELECT 1 FROM alert_rules x WHERE x.kind = 'threshold' AND x.key_id = NEW.key_id) THEN NEW.key_id ELSE '' END)
			AND k.id = NEW.key_id AND c.key_id = NEW.key_id
			AND ((c.period = 'total' AND c.bucket = '') OR (c.period = 'daily' AND c.bucket = NEW.day) OR (c.period = 'monthly' AND c.bucket = NEW.month))
			AND r.window_name IN ('', c.period)
		) AS w
	) AS t
	WHERE NEW.micros > 0 AND t.cap IS NOT NULL AND t.threshold > 0
	AND t.micros - NEW.micros < t.threshold AND t.micros >= t.threshold
	ON CONFLICT (alert_key) DO NOTHING;
END;
