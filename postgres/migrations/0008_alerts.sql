-- 0008_alerts: alert rules, webhook endpoints and the alert outbox.
--
-- Alerts are written by triggers in the transaction of the change that causes
-- them, so none is lost and none fires twice (alerts.alert_key is unique; a
-- second replica's insert of the same key waits for the first and does
-- nothing):
--   - a spend counter crossing a threshold of its cap (reserve, settle, rearm;
--     the counter row's lock orders the crossings of one window),
--   - a settlement above what was reserved (amount_mismatch),
--   - a refusal completing a burst (refusal_burst).
-- Each new alert gets, by a trigger on alerts, one pending delivery per
-- enabled endpoint that takes its key's alerts. The SQLite store has the same
-- tables and triggers (sqlite/migrations/0004_alerts.sql).

CREATE TABLE alert_rules (
	id          text PRIMARY KEY,
	key_id      text NOT NULL,  -- '' for the defaults of every key
	kind        text NOT NULL CHECK (kind IN ('threshold', 'expiring', 'refusal_burst', 'uncertain', 'amount_mismatch')),
	window_name text NOT NULL CHECK (window_name IN ('', 'daily', 'monthly', 'total')),
	percent     integer NOT NULL CHECK (percent BETWEEN 0 AND 100),
	hours       integer NOT NULL,
	count       integer NOT NULL,
	seconds     integer NOT NULL,
	minutes     integer NOT NULL,
	enabled     boolean NOT NULL,
	created_at  timestamptz NOT NULL,
	updated_at  timestamptz NOT NULL
);

CREATE INDEX alert_rules_kind ON alert_rules (kind, key_id);

INSERT INTO alert_rules VALUES
	('alr_default_threshold_50',  '', 'threshold',       '', 50,  0,  0,  0,  0, true, 'epoch', 'epoch'),
	('alr_default_threshold_80',  '', 'threshold',       '', 80,  0,  0,  0,  0, true, 'epoch', 'epoch'),
	('alr_default_threshold_100', '', 'threshold',       '', 100, 0,  0,  0,  0, true, 'epoch', 'epoch'),
	('alr_default_expiring',      '', 'expiring',        '', 0,   24, 0,  0,  0, true, 'epoch', 'epoch'),
	('alr_default_refusal_burst', '', 'refusal_burst',   '', 0,   0,  10, 60, 0, true, 'epoch', 'epoch'),
	('alr_default_uncertain',     '', 'uncertain',       '', 0,   0,  0,  0, 15, true, 'epoch', 'epoch'),
	('alr_default_amount',        '', 'amount_mismatch', '', 0,   0,  0,  0,  0, true, 'epoch', 'epoch');

-- keybrake_rule_owner returns whose rules of kind apply to the key: its own
-- if it has any, else the defaults ('').
CREATE FUNCTION keybrake_rule_owner(p_kind text, p_key_id text) RETURNS text
LANGUAGE sql STABLE AS $$
	SELECT CASE WHEN EXISTS (SELECT 1 FROM alert_rules WHERE kind = p_kind AND key_id = p_key_id) THEN p_key_id ELSE '' END
$$;

CREATE TABLE alert_endpoints (
	id         text PRIMARY KEY,
	url        text NOT NULL,
	format     text NOT NULL CHECK (format IN ('keybrake', 'slack')),
	key_id     text NOT NULL,   -- '' for every key
	secret     text NOT NULL,   -- signs deliveries; kept in clear to sign
	enabled    boolean NOT NULL,
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL
);

CREATE TABLE alerts (
	id               text PRIMARY KEY,
	alert_key        text NOT NULL UNIQUE,
	kind             text NOT NULL,
	key_id           text NOT NULL,
	window_name      text NOT NULL,
	bucket           text NOT NULL,
	percent          integer NOT NULL,
	cap_micros       bigint NOT NULL,
	threshold_micros bigint NOT NULL,
	spent_micros     bigint NOT NULL,
	reserved_micros  bigint NOT NULL,
	reservation_id   text NOT NULL,
	count            integer NOT NULL,
	endpoint_id      text NOT NULL,
	detail           text NOT NULL,
	claimed          boolean NOT NULL DEFAULT false,
	created_at       timestamptz NOT NULL
);

CREATE INDEX alerts_key ON alerts (key_id, created_at);
CREATE INDEX alerts_unclaimed ON alerts (created_at) WHERE NOT claimed;

CREATE TABLE alert_deliveries (
	id               text PRIMARY KEY,
	seq              bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
	alert_id         text NOT NULL REFERENCES alerts (id),
	endpoint_id      text NOT NULL,
	state            text NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
	attempts         integer NOT NULL,
	next_attempt_at  timestamptz NOT NULL,
	first_attempt_at timestamptz,
	last_status      integer NOT NULL,
	last_error       text NOT NULL,
	lease_owner      text NOT NULL,
	lease_until      timestamptz,
	created_at       timestamptz NOT NULL,
	updated_at       timestamptz NOT NULL,
	UNIQUE (alert_id, endpoint_id)
);

CREATE INDEX alert_deliveries_due ON alert_deliveries (next_attempt_at) WHERE state = 'pending';

CREATE TABLE alert_attempts (
	delivery_id text NOT NULL REFERENCES alert_deliveries (id),
	n           integer NOT NULL,
	at          timestamptz NOT NULL,
	status      integer NOT NULL,
	latency_us  bigint NOT NULL,
	error       text NOT NULL,
	PRIMARY KEY (delivery_id, n)
);

CREATE FUNCTION keybrake_alert_id(p text) RETURNS text
LANGUAGE sql VOLATILE AS $$ SELECT p || substr(replace(gen_random_uuid()::text, '-', ''), 1, 24) $$;

-- Fan-out: one pending delivery per enabled endpoint taking the alert.
CREATE FUNCTION keybrake_alert_fan_out() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO alert_deliveries (id, alert_id, endpoint_id, state, attempts, next_attempt_at, first_attempt_at,
		last_status, last_error, lease_owner, lease_until, created_at, updated_at)
	SELECT keybrake_alert_id('ald_'), NEW.id, e.id, 'pending', 0, 'epoch', NULL, 0, '', '', NULL, NEW.created_at, NEW.created_at
	FROM alert_endpoints e
	WHERE e.enabled AND (e.key_id = '' OR e.key_id = NEW.key_id) AND (NEW.endpoint_id = '' OR e.id = NEW.endpoint_id)
	ORDER BY e.created_at, e.id;
	RETURN NULL;
END
$$;

CREATE TRIGGER alerts_fan_out AFTER INSERT ON alerts FOR EACH ROW EXECUTE FUNCTION keybrake_alert_fan_out();

-- Thresholds: a counter of a capped window moving from below a rule's share
-- of the cap to at or above it; ceil(cap * percent / 100) without overflow.
CREATE FUNCTION keybrake_alert_threshold() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
	old_micros bigint := 0;
BEGIN
	IF TG_OP = 'UPDATE' THEN
		old_micros := OLD.micros;
	END IF;
	IF NEW.window_name NOT IN ('daily', 'monthly', 'total') OR NEW.micros <= old_micros THEN
		RETURN NULL;
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

CREATE TRIGGER spend_counters_alert AFTER INSERT OR UPDATE OF micros ON spend_counters
FOR EACH ROW EXECUTE FUNCTION keybrake_alert_threshold();

-- Amount mismatch: a settlement above the reservation, or a hold grown past
-- it (the proxy's ALARM), in the settlement's transaction.
CREATE FUNCTION keybrake_alert_mismatch() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	IF NOT ((NEW.state = 'settled' AND OLD.state <> 'settled' AND NEW.settled_micros > OLD.micros)
		OR (NEW.state = 'held' AND NEW.micros > OLD.micros)) THEN
		RETURN NULL;
	END IF;
	INSERT INTO alerts (id, alert_key, kind, key_id, window_name, bucket, percent, cap_micros, threshold_micros,
		spent_micros, reserved_micros, reservation_id, count, endpoint_id, detail, created_at)
	SELECT keybrake_alert_id('alt_'), 'amount_mismatch:' || NEW.id, 'amount_mismatch', NEW.key_id, '', '', 0, 0, 0,
		CASE NEW.state WHEN 'settled' THEN NEW.settled_micros ELSE NEW.micros END, OLD.micros, NEW.id, 0, '',
		NEW.operation || ' ' || NEW.object_id, NEW.updated_at
	FROM alert_rules r
	WHERE r.kind = 'amount_mismatch' AND r.enabled AND r.key_id = keybrake_rule_owner('amount_mismatch', NEW.key_id)
	LIMIT 1
	ON CONFLICT (alert_key) DO NOTHING;
	RETURN NULL;
END
$$;

CREATE TRIGGER reservations_alert_mismatch AFTER UPDATE OF state, micros, settled_micros ON reservations
FOR EACH ROW EXECUTE FUNCTION keybrake_alert_mismatch();

-- Refusal bursts: refusals of the key within each rule's seconds; one alert
-- per key, rule length and period of that length.
CREATE INDEX events_refused ON events (key_id, time) WHERE decision = 'deny';

CREATE FUNCTION keybrake_alert_burst() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.decision <> 'deny' OR NEW.key_id = '' THEN
		RETURN NULL;
	END IF;
	INSERT INTO alerts (id, alert_key, kind, key_id, window_name, bucket, percent, cap_micros, threshold_micros,
		spent_micros, reserved_micros, reservation_id, count, endpoint_id, detail, created_at)
	SELECT keybrake_alert_id('alt_'),
		'refusal_burst:' || NEW.key_id || ':' || r.seconds || ':' || (floor(extract(epoch FROM NEW.time) * 1000000)::bigint / (r.seconds::bigint * 1000000)),
		'refusal_burst', NEW.key_id, '', '', 0, 0, 0, 0, 0, '', r.count, '', NEW.reason, NEW.time
	FROM alert_rules r
	WHERE r.kind = 'refusal_burst' AND r.enabled AND r.key_id = keybrake_rule_owner('refusal_burst', NEW.key_id)
	AND r.count <= (SELECT count(*) FROM events e WHERE e.key_id = NEW.key_id AND e.decision = 'deny'
		AND e.time > NEW.time - make_interval(secs => r.seconds) AND e.time <= NEW.time)
	ON CONFLICT (alert_key) DO NOTHING;
	RETURN NULL;
END
$$;

CREATE TRIGGER events_alert_burst AFTER INSERT ON events
FOR EACH ROW EXECUTE FUNCTION keybrake_alert_burst();
