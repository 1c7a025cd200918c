-- 0014_approve: an alert when a request waits for approval, the secret that
-- signs approve/deny links, and suspension cascading to child keys.
--
-- alert_rules gains the kind approval_required. SQLite cannot change a CHECK
-- constraint, so the table is rebuilt; legacy_alter_table keeps the rename
-- from rewriting (or re-checking) the triggers of 0004 that read alert_rules
-- by name.
PRAGMA legacy_alter_table = ON;

CREATE TABLE alert_rules_new (
	id          TEXT    PRIMARY KEY,
	key_id      TEXT    NOT NULL,
	kind        TEXT    NOT NULL CHECK (kind IN ('threshold', 'expiring', 'refusal_burst', 'uncertain', 'amount_mismatch', 'approval_required')),
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

-- On for every key by default; a key opts out with one disabled rule.
INSERT INTO alert_rules VALUES ('alr_default_approval_required', '', 'approval_required', '', 0, 0, 0, 0, 0, 1, 0, 0);

ALTER TABLE alerts ADD COLUMN approval_id TEXT NOT NULL DEFAULT '';

-- approval_required: written in the transaction that creates the approval
-- (a retry under the same Idempotency-Key inserts nothing, so it fires once
-- per approval; alert_key is unique besides).
CREATE TRIGGER approvals_alert AFTER INSERT ON approvals
BEGIN
	INSERT INTO alerts (id, alert_key, kind, key_id, window_name, bucket, percent, cap_micros, threshold_micros,
		spent_micros, reserved_micros, reservation_id, count, endpoint_id, detail, created_at, approval_id)
	SELECT 'alt_' || lower(hex(randomblob(12))), 'approval_required:' || NEW.id, 'approval_required', NEW.key_id,
		'', '', 0, 0, 0, NEW.micros, 0, '', 0, '', NEW.operation, NEW.created_at, NEW.id
	FROM alert_rules r
	WHERE r.kind = 'approval_required' AND r.enabled = 1
	AND r.key_id = (CASE WHEN EXISTS (SELECT 1 FROM alert_rules x WHERE x.kind = 'approval_required' AND x.key_id = NEW.key_id) THEN NEW.key_id ELSE '' END)
	LIMIT 1
	ON CONFLICT (alert_key) DO NOTHING;
END;

-- Server-side secrets shared by every replica of the store. approval_links
-- keys the HMAC-SHA256 of the approve/deny links in approval_required alerts;
-- 32 random bytes, hex, made here once. Never shown or logged.
CREATE TABLE link_secrets (
	name   TEXT PRIMARY KEY,
	secret TEXT NOT NULL
) STRICT;

INSERT INTO link_secrets VALUES ('approval_links', lower(hex(randomblob(32))));

-- suspended_by names the ancestor whose suspension suspended this key (''
-- for a key suspended on its own or not at all): resuming that ancestor
-- resumes exactly these keys.
ALTER TABLE keys ADD COLUMN suspended_by TEXT NOT NULL DEFAULT '';
