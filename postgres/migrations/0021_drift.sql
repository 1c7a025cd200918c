-- 0021_drift: an alert for each drift finding the drift watch audits.
ALTER TABLE alert_rules DROP CONSTRAINT alert_rules_kind_check;
ALTER TABLE alert_rules ADD CONSTRAINT alert_rules_kind_check
	CHECK (kind IN ('threshold', 'expiring', 'refusal_burst', 'uncertain', 'amount_mismatch', 'approval_required', 'drift'));

-- On for every key by default (and for findings that name no key); a key
-- opts out with one disabled rule.
INSERT INTO alert_rules VALUES ('alr_default_drift', '', 'drift', '', 0, 0, 0, 0, 0, true, 'epoch', 'epoch');

-- What a drift alert names: the finding (unseen, amount, missing), the
-- upstream object (charges, …) and its id, its amount upstream and what
-- keybrake reserved, in the object's minor units.
ALTER TABLE alerts
	ADD COLUMN finding           text   NOT NULL DEFAULT '',
	ADD COLUMN upstream_object   text   NOT NULL DEFAULT '',
	ADD COLUMN object_id         text   NOT NULL DEFAULT '',
	ADD COLUMN amount            bigint NOT NULL DEFAULT 0,
	ADD COLUMN currency          text   NOT NULL DEFAULT '',
	ADD COLUMN reserved_amount   bigint NOT NULL DEFAULT 0,
	ADD COLUMN reserved_currency text   NOT NULL DEFAULT '';

-- drift: written in the transaction of the finding's audit event (decision
-- 'drift', operation 'drift.<finding>', path '/v1/<object>'), once per
-- finding: the alert key is the finding and its object (the upstream id, or
-- the reservation for a missing object), so replicas that each audit the
-- finding, and later runs, alert once.
CREATE FUNCTION keybrake_alert_drift() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.decision <> 'drift' THEN
		RETURN NULL;
	END IF;
	INSERT INTO alerts (id, alert_key, kind, key_id, window_name, bucket, percent, cap_micros, threshold_micros,
		spent_micros, reserved_micros, reservation_id, count, endpoint_id, detail, created_at,
		finding, upstream_object, object_id, amount, currency, reserved_amount, reserved_currency)
	SELECT keybrake_alert_id('alt_'),
		'drift:' || substr(NEW.operation, 7) || ':' || (CASE WHEN NEW.object_id <> '' THEN NEW.object_id ELSE NEW.reservation_id END),
		'drift', NEW.key_id, '', '', 0, 0, 0, 0, 0, NEW.reservation_id, 0, '', NEW.reason, NEW.time,
		substr(NEW.operation, 7), substr(NEW.path, 5), NEW.object_id, NEW.amount, NEW.currency,
		COALESCE((SELECT v.amount FROM reservations v WHERE v.id = NEW.reservation_id), 0),
		COALESCE((SELECT v.currency FROM reservations v WHERE v.id = NEW.reservation_id), '')
	FROM alert_rules r
	WHERE r.kind = 'drift' AND r.enabled AND r.key_id = keybrake_rule_owner('drift', NEW.key_id)
	LIMIT 1
	ON CONFLICT (alert_key) DO NOTHING;
	RETURN NULL;
END
$$;

CREATE TRIGGER events_alert_drift AFTER INSERT ON events
FOR EACH ROW EXECUTE FUNCTION keybrake_alert_drift();
