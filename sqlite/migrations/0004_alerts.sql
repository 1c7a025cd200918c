-- 0004_alerts: alert rules, webhook endpoints and the alert outbox.
--
-- Alerts are written by triggers in the transaction of the change that causes
-- them, so none is lost and none fires twice (alerts.alert_key is unique):
--   - a spend counter crossing a threshold of its cap (reserve, settle, rearm),
--   - a settlement above what was reserved (amount_mismatch),
--   - a refusal completing a burst (refusal_burst).
-- Each new alert gets, by a trigger on alerts, one pending delivery per
-- enabled endpoint that takes its key's alerts. Times are unix microseconds;
-- created_at of trigger-written alerts is the database's clock.

-- A rule with key_id '' is a default for every key without a rule of its own
-- of the same kind.
CREATE TABLE alert_rules (
	id          TEXT    PRIMARY KEY,
	key_id      TEXT    NOT NULL,
	kind        TEXT    NOT NULL CHECK (kind IN ('threshold', 'expiring', 'refusal_burst', 'uncertain', 'amount_mismatch')),
	window_name TEXT    NOT NULL CHECK (window_name IN ('', 'daily', 'monthly', 'total')),
	percent     INTEGER NOT NULL CHECK (percent BETWEEN 0 AND 100),
	hours       INTEGER NOT NULL,
	count       INTEGER NOT NULL,
	seconds     INTEGER NOT NULL,
	minutes     INTEGER NOT NULL,
	enabled     INTEGER NOT NULL,
	created_at  INTEGER NOT NULL,
	updated_at  INTEGER NOT NULL
) STRICT;

CREATE INDEX alert_rules_kind ON alert_rules (kind, key_id);

INSERT INTO alert_rules VALUES
	('alr_default_threshold_50',  '', 'threshold',       '', 50,  0,  0,  0,  0, 1, 0, 0),
	('alr_default_threshold_80',  '', 'threshold',       '', 80,  0,  0,  0,  0, 1, 0, 0),
	('alr_default_threshold_100', '', 'threshold',       '', 100, 0,  0,  0,  0, 1, 0, 0),
	('alr_default_expiring',      '', 'expiring',        '', 0,   24, 0,  0,  0, 1, 0, 0),
	('alr_default_refusal_burst', '', 'refusal_burst',   '', 0,   0,  10, 60, 0, 1, 0, 0),
	('alr_default_uncertain',     '', 'uncertain',       '', 0,   0,  0,  0, 15, 1, 0, 0),
	('alr_default_amount',        '', 'amount_mismatch', '', 0,   0,  0,  0,  0, 1, 0, 0);

CREATE TABLE alert_endpoints (
	id         TEXT    PRIMARY KEY,
	url        TEXT    NOT NULL,
	format     TEXT    NOT NULL CHECK (format IN ('keybrake', 'slack')),
	key_id     TEXT    NOT NULL,   -- '' for every key
	secret     TEXT    NOT NULL,   -- signs deliveries; kept in clear to sign
	enabled    INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL
) STRICT;

-- The outbox. claimed turns 1 once a sender has logged and counted it.
CREATE TABLE alerts (
	id               TEXT    PRIMARY KEY,
	alert_key        TEXT    NOT NULL UNIQUE,
	kind             TEXT    NOT NULL,
	key_id           TEXT    NOT NULL,
	window_name      TEXT    NOT NULL,
	bucket           TEXT    NOT NULL,
	percent          INTEGER NOT NULL,
	cap_micros       INTEGER NOT NULL,
	threshold_micros INTEGER NOT NULL,
	spent_micros     INTEGER NOT NULL,
	reserved_micros  INTEGER NOT NULL,
	reservation_id   TEXT    NOT NULL,
	count            INTEGER NOT NULL,
	endpoint_id      TEXT    NOT NULL,
	detail           TEXT    NOT NULL,
	claimed          INTEGER NOT NULL DEFAULT 0,
	created_at       INTEGER NOT NULL
) STRICT;

CREATE INDEX alerts_key ON alerts (key_id, created_at);
CREATE INDEX alerts_unclaimed ON alerts (created_at) WHERE claimed = 0;

CREATE TABLE alert_deliveries (
	id               TEXT    PRIMARY KEY,
	alert_id         TEXT    NOT NULL REFERENCES alerts (id),
	endpoint_id      TEXT    NOT NULL,
	state            TEXT    NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
	attempts         INTEGER NOT NULL,
	next_attempt_at  INTEGER NOT NULL,
	first_attempt_at INTEGER,
	last_status      INTEGER NOT NULL,
	last_error       TEXT    NOT NULL,
	lease_owner      TEXT    NOT NULL,
	lease_until      INTEGER,
	seq              INTEGER NOT NULL,  -- orders deliveries newest first
	created_at       INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL,
	UNIQUE (alert_id, endpoint_id)
) STRICT;

CREATE INDEX alert_deliveries_due ON alert_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX alert_deliveries_seq ON alert_deliveries (seq);

CREATE TABLE alert_attempts (
	delivery_id TEXT    NOT NULL REFERENCES alert_deliveries (id),
	n           INTEGER NOT NULL,
	at          INTEGER NOT NULL,
	status      INTEGER NOT NULL,
	latency_us  INTEGER NOT NULL,
	error       TEXT    NOT NULL,
	PRIMARY KEY (delivery_id, n)
) STRICT, WITHOUT ROWID;

-- Fan-out: one pending delivery per enabled endpoint taking the alert.
CREATE TRIGGER alerts_fan_out AFTER INSERT ON alerts
BEGIN
	INSERT INTO alert_deliveries (id, alert_id, endpoint_id, state, attempts, next_attempt_at, first_attempt_at,
		last_status, last_error, lease_owner, lease_until, seq, created_at, updated_at)
	SELECT 'ald_' || lower(hex(randomblob(12))), NEW.id, e.id, 'pending', 0, 0, NULL, 0, '', '', NULL,
		COALESCE((SELECT MAX(seq) FROM alert_deliveries), 0) + 1, NEW.created_at, NEW.created_at
	FROM alert_endpoints e
	WHERE e.enabled = 1 AND (e.key_id = '' OR e.key_id = NEW.key_id) AND (NEW.endpoint_id = '' OR e.id = NEW.endpoint_id);
END;

-- Thresholds: a counter of a capped window moving from below a rule's share
-- of the cap to at or above it. The key's own threshold rules replace the
-- defaults. The threshold is ceil(cap * percent / 100) without overflow.
CREATE TRIGGER spend_counters_alert_insert AFTER INSERT ON spend_counters
WHEN NEW.micros > 0 AND NEW.period IN ('daily', 'monthly', 'total')
BEGIN
	INSERT INTO alerts (id, alert_key, kind, key_id, window_name, bucket, percent, cap_micros, threshold_micros,
		spent_micros, reserved_micros, reservation_id, count, endpoint_id, detail, created_at)
	SELECT 'alt_' || lower(hex(randomblob(12))),
		'threshold:' || NEW.key_id || ':' || NEW.period || ':' || NEW.bucket || ':' || t.percent,
		'threshold', NEW.key_id, NEW.period, NEW.bucket, t.percent, t.cap, t.threshold, NEW.micros, 0, '', 0, '', '',
		CAST(unixepoch('subsec') * 1000000 AS INTEGER)
	FROM (
		SELECT r.percent AS percent, k.cap AS cap, (k.cap / 100) * r.percent + ((k.cap % 100) * r.percent + 99) / 100 AS threshold
		FROM alert_rules r,
			(SELECT CASE NEW.period WHEN 'daily' THEN cap_daily WHEN 'monthly' THEN cap_monthly ELSE cap_total END AS cap
			 FROM keys WHERE id = NEW.key_id) AS k
		WHERE r.kind = 'threshold' AND r.enabled = 1 AND r.window_name IN ('', NEW.period) AND k.cap IS NOT NULL
		AND r.key_id = (CASE WHEN EXISTS (SELECT 1 FROM alert_rules x WHERE x.kind = 'threshold' AND x.key_id = NEW.key_id) THEN NEW.key_id ELSE '' END)
	) AS t
	WHERE t.threshold > 0 AND NEW.micros >= t.threshold
	ON CONFLICT (alert_key) DO NOTHING;
END;

CREATE TRIGGER spend_counters_alert_update AFTER UPDATE OF micros ON spend_counters
WHEN NEW.micros > OLD.micros AND NEW.period IN ('daily', 'monthly', 'total')
BEGIN
	INSERT INTO alerts (id, alert_key, kind, key_id, window_name, bucket, percent, cap_micros, threshold_micros,
		spent_micros, reserved_micros, reservation_id, count, endpoint_id, detail, created_at)
	SELECT 'alt_' || lower(hex(randomblob(12))),
		'threshold:' || NEW.key_id || ':' || NEW.period || ':' || NEW.bucket || ':' || t.percent,
		'threshold', NEW.key_id, NEW.period, NEW.bucket, t.percent, t.cap, t.threshold, NEW.micros, 0, '', 0, '', '',
		CAST(unixepoch('subsec') * 1000000 AS INTEGER)
	FROM (
		SELECT r.percent AS percent, k.cap AS cap, (k.cap / 100) * r.percent + ((k.cap % 100) * r.percent + 99) / 100 AS threshold
		FROM alert_rules r,
			(SELECT CASE NEW.period WHEN 'daily' THEN cap_daily WHEN 'monthly' THEN cap_monthly ELSE cap_total END AS cap
			 FROM keys WHERE id = NEW.key_id) AS k
		WHERE r.kind = 'threshold' AND r.enabled = 1 AND r.window_name IN ('', NEW.period) AND k.cap IS NOT NULL
		AND r.key_id = (CASE WHEN EXISTS (SELECT 1 FROM alert_rules x WHERE x.kind = 'threshold' AND x.key_id = NEW.key_id) THEN NEW.key_id ELSE '' END)
	) AS t
	WHERE t.threshold > 0 AND OLD.micros < t.threshold AND NEW.micros >= t.threshold
	ON CONFLICT (alert_key) DO NOTHING;
END;

-- Amount mismatch: a settlement above the reservation, or a hold grown past
-- it (the proxy's ALARM), in the settlement's transaction.
CREATE TRIGGER reservations_alert_mismatch AFTER UPDATE OF state, micros, settled_micros ON reservations
WHEN (NEW.state = 'settled' AND OLD.state <> 'settled' AND NEW.settled_micros > OLD.micros)
  OR (NEW.state = 'held' AND NEW.micros > OLD.micros)
BEGIN
	INSERT INTO alerts (id, alert_key, kind, key_id, window_name, bucket, percent, cap_micros, threshold_micros,
		spent_micros, reserved_micros, reservation_id, count, endpoint_id, detail, created_at)
	SELECT 'alt_' || lower(hex(randomblob(12))), 'amount_mismatch:' || NEW.id, 'amount_mismatch', NEW.key_id, '', '', 0, 0, 0,
		CASE NEW.state WHEN 'settled' THEN NEW.settled_micros ELSE NEW.micros END, OLD.micros, NEW.id, 0, '',
		NEW.operation || ' ' || NEW.object_id, NEW.updated_at
	FROM alert_rules r
	WHERE r.kind = 'amount_mismatch' AND r.enabled = 1
	AND r.key_id = (CASE WHEN EXISTS (SELECT 1 FROM alert_rules x WHERE x.kind = 'amount_mismatch' AND x.key_id = NEW.key_id) THEN NEW.key_id ELSE '' END)
	LIMIT 1
	ON CONFLICT (alert_key) DO NOTHING;
END;

-- Refusal bursts: count refusals of the key within each rule's seconds; one
-- alert per key, rule length and period of that length.
CREATE INDEX events_refused ON events (key_id, time) WHERE decision = 'deny';

CREATE TRIGGER events_alert_burst AFTER INSERT ON events
WHEN NEW.decision = 'deny' AND NEW.key_id <> ''
BEGIN
	INSERT INTO alerts (id, alert_key, kind, key_id, window_name, bucket, percent, cap_micros, threshold_micros,
		spent_micros, reserved_micros, reservation_id, count, endpoint_id, detail, created_at)
	SELECT 'alt_' || lower(hex(randomblob(12))),
		'refusal_burst:' || NEW.key_id || ':' || r.seconds || ':' || (NEW.time / (r.seconds * 1000000)),
		'refusal_burst', NEW.key_id, '', '', 0, 0, 0, 0, 0, '', r.count, '', NEW.reason, NEW.time
	FROM alert_rules r
	WHERE r.kind = 'refusal_burst' AND r.enabled = 1
	AND r.key_id = (CASE WHEN EXISTS (SELECT 1 FROM alert_rules x WHERE x.kind = 'refusal_burst' AND x.key_id = NEW.key_id) THEN NEW.key_id ELSE '' END)
	AND r.count <= (SELECT COUNT(*) FROM events e WHERE e.key_id = NEW.key_id AND e.decision = 'deny'
		AND e.time > NEW.time - r.seconds * 1000000 AND e.time <= NEW.time)
	ON CONFLICT (alert_key) DO NOTHING;
END;
