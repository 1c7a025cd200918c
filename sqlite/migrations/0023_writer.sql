-- 0023_writer: a cheaper write of a reservation on the one writer (issue 16).
--
-- Threshold alerts move from spend_counters' row triggers into the
-- reservations' counting triggers. Each counted reservation moves three
-- counters (total, day, month); a trigger per counter row ran three times
-- per reservation, each run looking the key and the rules up again, and was
-- two thirds of an INSERT's CPU even with no rule defined. Now one statement
-- per reservation checks the three counters it just moved, and, with the
-- rules' table as the outer loop, stops at once when no threshold rule is
-- enabled. The alert is the same: a counter of a capped window moving from
-- below a rule's share of the cap to at or above it (before: OLD.micros,
-- now: the counter less what this reservation moved it by), once per
-- alert_key; the key's own threshold rules replace the defaults. Every
-- write of spend_counters besides compaction's deletes comes from the
-- counting triggers below, so no alert is lost.
DROP TRIGGER spend_counters_alert_insert;
DROP TRIGGER spend_counters_alert_update;
DROP TRIGGER reservations_count_insert;
DROP TRIGGER reservations_count_update;

CREATE TRIGGER reservations_count_insert AFTER INSERT ON reservations
BEGIN
	INSERT INTO spend_counters (key_id, period, bucket, micros)
	VALUES (NEW.key_id, 'total', '', NEW.micros), (NEW.key_id, 'daily', NEW.day, NEW.micros), (NEW.key_id, 'monthly', NEW.month, NEW.micros)
	ON CONFLICT (key_id, period, bucket) DO UPDATE SET micros = micros + excluded.micros;
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

CREATE TRIGGER reservations_count_update AFTER UPDATE OF state, micros, settled_micros ON reservations
WHEN (CASE NEW.state WHEN 'settled' THEN NEW.settled_micros WHEN 'released' THEN 0 ELSE NEW.micros END)
  < (CASE OLD.state WHEN 'settled' THEN OLD.settled_micros WHEN 'released' THEN 0 ELSE OLD.micros END)
BEGIN
	INSERT INTO spend_counters (key_id, period, bucket, micros)
	SELECT NEW.key_id, p.period, p.bucket,
		(CASE NEW.state WHEN 'settled' THEN NEW.settled_micros WHEN 'released' THEN 0 ELSE NEW.micros END)
		- (CASE OLD.state WHEN 'settled' THEN OLD.settled_micros WHEN 'released' THEN 0 ELSE OLD.micros END)
	FROM (SELECT 'total' AS period, '' AS bucket UNION ALL SELECT 'daily', OLD.day UNION ALL SELECT 'monthly', OLD.month) AS p
	WHERE true
	ON CONFLICT (key_id, period, bucket) DO UPDATE SET micros = micros + excluded.micros;
END;

-- A reservation counting more than before (a settlement above the amount
-- reserved, a hold growing, a re-arm) moves the counters up: only then can a
-- threshold be crossed. The two triggers' conditions exclude each other, so
-- their order does not matter.
CREATE TRIGGER reservations_count_raise AFTER UPDATE OF state, micros, settled_micros ON reservations
WHEN (CASE NEW.state WHEN 'settled' THEN NEW.settled_micros WHEN 'released' THEN 0 ELSE NEW.micros END)
  > (CASE OLD.state WHEN 'settled' THEN OLD.settled_micros WHEN 'released' THEN 0 ELSE OLD.micros END)
BEGIN
	INSERT INTO spend_counters (key_id, period, bucket, micros)
	SELECT NEW.key_id, p.period, p.bucket,
		(CASE NEW.state WHEN 'settled' THEN NEW.settled_micros WHEN 'released' THEN 0 ELSE NEW.micros END)
		- (CASE OLD.state WHEN 'settled' THEN OLD.settled_micros WHEN 'released' THEN 0 ELSE OLD.micros END)
	FROM (SELECT 'total' AS period, '' AS bucket UNION ALL SELECT 'daily', OLD.day UNION ALL SELECT 'monthly', OLD.month) AS p
	WHERE true
	ON CONFLICT (key_id, period, bucket) DO UPDATE SET micros = micros + excluded.micros;
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
			AND ((c.period = 'total' AND c.bucket = '') OR (c.period = 'daily' AND c.bucket = OLD.day) OR (c.period = 'monthly' AND c.bucket = OLD.month))
			AND r.window_name IN ('', c.period)
		) AS w
	) AS t
	WHERE ((CASE NEW.state WHEN 'settled' THEN NEW.settled_micros WHEN 'released' THEN 0 ELSE NEW.micros END)
		- (CASE OLD.state WHEN 'settled' THEN OLD.settled_micros WHEN 'released' THEN 0 ELSE OLD.micros END)) > 0 AND t.cap IS NOT NULL AND t.threshold > 0
	AND t.micros - ((CASE NEW.state WHEN 'settled' THEN NEW.settled_micros WHEN 'released' THEN 0 ELSE NEW.micros END)
		- (CASE OLD.state WHEN 'settled' THEN OLD.settled_micros WHEN 'released' THEN 0 ELSE OLD.micros END)) < t.threshold AND t.micros >= t.threshold
	ON CONFLICT (alert_key) DO NOTHING;
END;

-- The backstop trigger of suspension (0005) stays: Reserve and MintChild
-- refuse a suspended key in the same write transaction, but a future path
-- that inserts a reservation without that read must still be refused. Its
-- cost is one primary-key lookup per new reservation.

-- The open reservations of an operation in a time window (Twilio's lost
-- answers, 0022) are read through reservations_open (state, created_at),
-- which holds the same rows: one index fewer to write per reservation and
-- per settlement.
DROP INDEX reservations_open_operation;

-- The count caps' two partial indexes (0016 by day, 0018 by month) become
-- one: a day lies in its month, so the daily sum reads (key, kind, month,
-- day) and the monthly one its prefix.
DROP INDEX reservations_counted;
DROP INDEX reservations_counted_month;
CREATE INDEX reservations_counted ON reservations (key_id, count_kind, month, day) WHERE count_kind <> '';
