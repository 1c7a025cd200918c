-- 0017_drift: an alert for each drift finding the drift watch audits.
--
-- alert_rules gains the kind drift (rebuilt as 0014 did: SQLite cannot
-- change a CHECK constraint, and legacy_alter_table keeps the rename from
-- rewriting the triggers that read alert_rules by name).
PRAGMA legacy_alter_table = ON;

CREATE TABLE alert_rules_new (
	id          TEXT    PRIMARY KEY,
	key_id      TEXT    NOT NULL,
	kind        TEXT    NOT NULL CHECK (kind IN ('threshold', 'expiring', 'refusal_burst', 'uncertain', 'amount_mismatch', 'approval_required', 'drift')),
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

INSERT INTO alert_rules_new SELECT * FROM alert_rules;
DROP TABLE alert_rules;
ALTER TABLE alert_rules_new RENAME TO alert_rules;
CREATE INDEX alert_rules_kind ON alert_rules (kind, key_id);

PRAGMA legacy_alter_table = OFF;

-- On for every key by default (and for findings that name no key); a key
-- opts out with one disabled rule.
INSERT INTO alert_rules VALUES ('alr_default_drift', '', 'drift', '', 0, 0, 0, 0, 0, 1, 0, 0);

-- What a drift alert names: the finding (unseen, amount, missing), the
-- upstream object (charges, …) and its id, its amount upstream and what
-- keybrake reserved, in the object's minor units.
ALTER TABLE alerts ADD COLUMN finding           TEXT    NOT NULL DEFAULT '';
ALTER TABLE alerts ADD COLUMN upstream_object   TEXT    NOT NULL DEFAULT '';
ALTER TABLE alerts ADD COLUMN object_id         TEXT    NOT NULL DEFAULT '';
ALTER TABLE alerts ADD COLUMN amount            INTEGER NOT NULL DEFAULT 0;
ALTER TABLE alerts ADD COLUMN currency          TEXT    NOT NULL DEFAULT '';
ALTER TABLE alerts ADD COLUMN reserved_amount   INTEGER NOT NULL DEFAULT 0;
ALTER TABLE alerts ADD COLUMN reserved_currency TEXT    NOT NULL DEFAULT '';

-- drift: written in the transaction of the finding's audit event (decision
-- 'drift', operation 'drift.<finding>', path '/v1/<object>'), once per
-- finding: the alert key is the finding and its object (the upstream id, or
-- the reservation for a missing object), so replicas that each audit the
-- finding, and later runs, alert once.
CREATE TRIGGER events_alert_drift AFTER INSERT ON events
WHEN NEW.decision = 'drift'
BEGIN
	INSERT INTO alerts (id, alert_key, kind, key_id, window_name, bucket, percent, cap_micros, threshold_micros,
		spent_micros, reserved_micros, reservation_id, count, endpoint_id, detail, created_at,
		finding, upstream_object, object_id, amount, currency, reserved_amount, reserved_currency)
	SELECT 'alt_' || lower(hex(randomblob(12))),
		'drift:' || substr(NEW.operation, 7) || ':' || (CASE WHEN NEW.object_id <> '' THEN NEW.object_id ELSE NEW.reservation_id END),
		'drift', NEW.key_id, '', '', 0, 0, 0, 0, 0, NEW.reservation_id, 0, '', NEW.reason, NEW.time,
		substr(NEW.operation, 7), substr(NEW.path, 5), NEW.object_id, NEW.amount, NEW.currency,
		COALESCE((SELECT v.amount FROM reservations v WHERE v.id = NEW.reservation_id), 0),
		COALESCE((SELECT v.currency FROM reservations v WHERE v.id = NEW.reservation_id), '')
	FROM alert_rules r
	WHERE r.kind = 'drift' AND r.enabled = 1
	AND r.key_id = (CASE WHEN EXISTS (SELECT 1 FROM alert_rules x WHERE x.kind = 'drift' AND x.key_id = NEW.key_id) THEN NEW.key_id ELSE '' END)
	LIMIT 1
	ON CONFLICT (alert_key) DO NOTHING;
END;
