-- 0029 (branch perfkeys): fewer pages a charge when many keys are busy
-- (docs/performance.md, "1,000 keys against one (perfkeys)"). With 1,000
-- keys charged in turn, every key-prefixed B-tree takes a page of its own
-- for each key in a group commit, where one hot key appends to one page.
--
-- 1. Drop events_key_seq (key_id, seq): every audit event wrote an entry,
--    ~1 WAL frame a charge over 1,000 keys, for PruneEvents alone, which
--    now reads events_key_id (key_id, id): seq follows ID within a key
--    (sqlite/audit_chain.go). PostgreSQL keeps its index and its prune.
DROP INDEX IF EXISTS events_key_seq;

-- 2. The Idempotency-Key constraint as UNIQUE (idempotency_key, key_id)
--    instead of (key_id, idempotency_key): the same constraint, and the
--    replay lookup (both columns equal) reads it as before, but keybrake's
--    own keys (kb_ and a time-ordered reservation ID, http/idem_key.go) now
--    append at one end of the index whatever the key, instead of at the end
--    of each key's range (~0.8 WAL frames a charge over 1,000 keys). Random
--    keys (the SDKs') land on random pages either way. A constraint cannot
--    be altered in SQLite, so the table is rebuilt as 0002 did, with every
--    index and trigger it had (copied from a database migrated to 0028);
--    legacy_alter_table keeps the rename from rewriting the triggers of
--    other tables (events_alert_drift, keys_repeat_guards) that name it.
--    It reads and writes the whole table once: on a large file, see
--    docs/operations.md, "Upgrading a large SQLite database".
PRAGMA legacy_alter_table = ON;
CREATE TABLE reservations_new (
	id              TEXT    PRIMARY KEY,
	key_id          TEXT    NOT NULL REFERENCES keys (id),
	idempotency_key TEXT    NOT NULL,
	fingerprint     TEXT    NOT NULL,
	operation       TEXT    NOT NULL,
	amount          INTEGER NOT NULL,
	currency        TEXT    NOT NULL,
	micros          INTEGER NOT NULL CHECK (micros >= 0),
	settled_micros  INTEGER NOT NULL CHECK (settled_micros >= 0),
	state           TEXT    NOT NULL CHECK (state IN ('reserved', 'settled', 'released', 'uncertain', 'held')),
	day             TEXT    NOT NULL,
	month           TEXT    NOT NULL,
	req_method      TEXT    NOT NULL,
	req_path        TEXT    NOT NULL,
	req_body        TEXT    NOT NULL,
	req_account     TEXT    NOT NULL,
	req_version     TEXT    NOT NULL,
	object_id       TEXT    NOT NULL,
	upstream_status INTEGER NOT NULL,
	attempts        INTEGER NOT NULL,
	lease_owner     TEXT    NOT NULL,
	lease_until     INTEGER,
	created_at      INTEGER NOT NULL,
	updated_at      INTEGER NOT NULL,
	customer        TEXT    NOT NULL DEFAULT '',
	dup_key         TEXT    NOT NULL DEFAULT '',
	counted         TEXT    NOT NULL DEFAULT '',
	count_kind      TEXT    NOT NULL DEFAULT '',
	count           INTEGER NOT NULL DEFAULT 0,
	UNIQUE (idempotency_key, key_id)
) STRICT, WITHOUT ROWID;

INSERT INTO reservations_new SELECT * FROM reservations;

DROP TABLE reservations;

ALTER TABLE reservations_new RENAME TO reservations;

CREATE INDEX reservations_open ON reservations (state, created_at)
	WHERE state IN ('reserved', 'uncertain');

CREATE INDEX reservations_uncertain ON reservations (key_id)
	WHERE state = 'uncertain';

CREATE INDEX reservations_held ON reservations (key_id)
	WHERE state = 'held';

CREATE INDEX reservations_key_time ON reservations (key_id, created_at);

CREATE INDEX reservations_dup ON reservations (key_id, dup_key, created_at) WHERE dup_key <> '';

CREATE INDEX reservations_escrow ON reservations (object_id)
	WHERE operation = 'keybrake.escrow' AND state = 'held';

CREATE INDEX reservations_final ON reservations (updated_at) WHERE state IN ('settled', 'released');

CREATE INDEX reservations_held_due ON reservations (operation, lease_until, created_at)
	WHERE state = 'held';

CREATE INDEX reservations_counted ON reservations (key_id, count_kind, month, day) WHERE count_kind <> '';

CREATE INDEX reservations_object ON reservations (object_id)
	WHERE object_id <> '' AND operation LIKE 'twilio.%';

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

CREATE TRIGGER reservations_refuse_suspended BEFORE INSERT ON reservations
WHEN (SELECT suspended_at FROM keys WHERE id = NEW.key_id) IS NOT NULL
BEGIN SELECT RAISE(ABORT, 'keybrake: vault key suspended'); END;

CREATE TRIGGER reservations_rearm_suspended BEFORE UPDATE OF state ON reservations
WHEN OLD.state = 'released' AND NEW.state = 'reserved' AND (SELECT suspended_at FROM keys WHERE id = NEW.key_id) IS NOT NULL
BEGIN SELECT RAISE(ABORT, 'keybrake: vault key suspended'); END;

CREATE TRIGGER reservations_guard_update AFTER UPDATE OF state, micros, counted, upstream_status ON reservations
WHEN (OLD.counted <> '' OR NEW.counted <> '')
  AND (OLD.counted <> NEW.counted OR OLD.micros <> NEW.micros
       OR (OLD.state <> 'released' OR OLD.upstream_status = 402) <> (NEW.state <> 'released' OR NEW.upstream_status = 402))
BEGIN
	INSERT INTO guard_counters (key_id, scope, bucket, slot, expires, n, micros)
	SELECT OLD.key_id, value ->> 0, value ->> 1, OLD.id, value ->> 2, -1, -OLD.micros FROM json_each(NULLIF(OLD.counted, ''))
	WHERE OLD.state <> 'released' OR OLD.upstream_status = 402
	ON CONFLICT (key_id, scope, bucket, slot) DO UPDATE SET n = n + excluded.n, micros = micros + excluded.micros;
	INSERT INTO guard_counters (key_id, scope, bucket, slot, expires, n, micros)
	SELECT NEW.key_id, value ->> 0, value ->> 1, NEW.id, value ->> 2, 1, NEW.micros FROM json_each(NULLIF(NEW.counted, ''))
	WHERE NEW.state <> 'released' OR NEW.upstream_status = 402
	ON CONFLICT (key_id, scope, bucket, slot) DO UPDATE SET n = n + excluded.n, micros = micros + excluded.micros;
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

CREATE TRIGGER reservations_repeat_insert AFTER INSERT ON reservations
WHEN NEW.fingerprint <> '' AND (SELECT repeat_rule FROM keys WHERE id = NEW.key_id) = 1
BEGIN
	INSERT INTO repeat_fingerprints (key_id, fingerprint, created_at, id)
	VALUES (NEW.key_id, NEW.fingerprint, NEW.created_at, NEW.id);
END;

CREATE TRIGGER reservations_repeat_update AFTER UPDATE OF fingerprint, created_at ON reservations
WHEN OLD.fingerprint <> NEW.fingerprint OR OLD.created_at <> NEW.created_at
BEGIN
	DELETE FROM repeat_fingerprints
	WHERE key_id = OLD.key_id AND fingerprint = OLD.fingerprint AND created_at = OLD.created_at AND id = OLD.id;
	INSERT INTO repeat_fingerprints (key_id, fingerprint, created_at, id)
	SELECT NEW.key_id, NEW.fingerprint, NEW.created_at, NEW.id FROM keys
	WHERE id = NEW.key_id AND repeat_rule = 1 AND NEW.fingerprint <> '';
END;

CREATE TRIGGER reservations_repeat_delete AFTER DELETE ON reservations
BEGIN
	DELETE FROM repeat_fingerprints
	WHERE key_id = OLD.key_id AND fingerprint = OLD.fingerprint AND created_at = OLD.created_at AND id = OLD.id;
END;

PRAGMA legacy_alter_table = OFF;
