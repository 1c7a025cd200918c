-- 0018_approve: an alert when a request waits for approval, the secret that
-- signs approve/deny links, and suspension cascading to child keys.
ALTER TABLE alert_rules DROP CONSTRAINT alert_rules_kind_check;
ALTER TABLE alert_rules ADD CONSTRAINT alert_rules_kind_check
	CHECK (kind IN ('threshold', 'expiring', 'refusal_burst', 'uncertain', 'amount_mismatch', 'approval_required'));

-- On for every key by default; a key opts out with one disabled rule.
INSERT INTO alert_rules VALUES ('alr_default_approval_required', '', 'approval_required', '', 0, 0, 0, 0, 0, true, 'epoch', 'epoch');

ALTER TABLE alerts ADD COLUMN approval_id text NOT NULL DEFAULT '';

-- approval_required: written in the transaction that creates the approval
-- (a retry under the same Idempotency-Key inserts nothing, so it fires once
-- per approval; alert_key is unique besides).
CREATE FUNCTION keybrake_alert_approval() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO alerts (id, alert_key, kind, key_id, window_name, bucket, percent, cap_micros, threshold_micros,
		spent_micros, reserved_micros, reservation_id, count, endpoint_id, detail, created_at, approval_id)
	SELECT keybrake_alert_id('alt_'), 'approval_required:' || NEW.id, 'approval_required', NEW.key_id,
		'', '', 0, 0, 0, NEW.micros, 0, '', 0, '', NEW.operation, NEW.created_at, NEW.id
	FROM alert_rules r
	WHERE r.kind = 'approval_required' AND r.enabled AND r.key_id = keybrake_rule_owner('approval_required', NEW.key_id)
	LIMIT 1
	ON CONFLICT (alert_key) DO NOTHING;
	RETURN NULL;
END
$$;

CREATE TRIGGER approvals_alert AFTER INSERT ON approvals
FOR EACH ROW EXECUTE FUNCTION keybrake_alert_approval();

-- Server-side secrets shared by every replica of the store. approval_links
-- keys the HMAC-SHA256 of the approve/deny links in approval_required alerts:
-- two random UUIDs (244 random bits from the server's CSPRNG), made here
-- once. Never shown or logged.
CREATE TABLE link_secrets (
	name   text PRIMARY KEY,
	secret text NOT NULL
);

INSERT INTO link_secrets VALUES ('approval_links', replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''));

-- suspended_by names the ancestor whose suspension suspended this key (''
-- for a key suspended on its own or not at all): resuming that ancestor
-- resumes exactly these keys.
ALTER TABLE keys ADD COLUMN suspended_by text NOT NULL DEFAULT '';
