-- 0001_store: vault keys, the spend ledger and the audit log of the proxy.
--
-- Money is INTEGER USD micros. Times are INTEGER unix microseconds (UTC), the
-- precision PostgreSQL keeps too, so both stores round-trip the same values.
-- Lists and metadata are JSON text; 'null' and '[]' are kept apart.

CREATE TABLE keys (
	id                 TEXT    PRIMARY KEY,
	vendor             TEXT    NOT NULL,
	label              TEXT    NOT NULL,
	secret_hash        TEXT    NOT NULL UNIQUE,
	secret_prefix      TEXT    NOT NULL,
	cap_per_request    INTEGER,           -- NULL: no cap
	cap_daily          INTEGER,
	cap_monthly        INTEGER,
	cap_total          INTEGER,
	allowed_endpoints  TEXT    NOT NULL,  -- JSON array or 'null'
	allowed_customers  TEXT    NOT NULL,
	allowed_accounts   TEXT    NOT NULL,
	allowed_currencies TEXT    NOT NULL,
	timezone           TEXT    NOT NULL,
	allow_unpriced     INTEGER NOT NULL,
	metadata           TEXT    NOT NULL,  -- JSON object or 'null'
	expires_at         INTEGER,
	revoked_at         INTEGER,
	created_at         INTEGER NOT NULL,
	updated_at         INTEGER NOT NULL
) STRICT;

CREATE INDEX keys_created_at ON keys (created_at, id);

-- One row per money-moving request. (key_id, idempotency_key) is unique so a
-- replayed Idempotency-Key can never be counted twice. IDs start with the
-- creation time, so new rows append to the primary key's b-tree. Every index
-- costs a page write per commit on the hot path, so there are only three:
-- the primary key, the idempotency key (which also serves lookups by key)
-- and two small partial indexes of unresolved rows.
CREATE TABLE reservations (
	id              TEXT    PRIMARY KEY,
	key_id          TEXT    NOT NULL REFERENCES keys (id),
	idempotency_key TEXT    NOT NULL,
	fingerprint     TEXT    NOT NULL,
	operation       TEXT    NOT NULL,
	amount          INTEGER NOT NULL,
	currency        TEXT    NOT NULL,
	micros          INTEGER NOT NULL CHECK (micros >= 0),
	settled_micros  INTEGER NOT NULL CHECK (settled_micros >= 0),
	state           TEXT    NOT NULL CHECK (state IN ('reserved', 'settled', 'released', 'uncertain')),
	day             TEXT    NOT NULL,
	month           TEXT    NOT NULL,
	req_method      TEXT    NOT NULL,     -- the upstream request, replayed by the resolver
	req_path        TEXT    NOT NULL,
	req_body        TEXT    NOT NULL,     -- exactly as forwarded
	req_account     TEXT    NOT NULL,
	req_version     TEXT    NOT NULL,
	object_id       TEXT    NOT NULL,
	upstream_status INTEGER NOT NULL,
	attempts        INTEGER NOT NULL,
	lease_owner     TEXT    NOT NULL,
	lease_until     INTEGER,
	created_at      INTEGER NOT NULL,
	updated_at      INTEGER NOT NULL,
	UNIQUE (key_id, idempotency_key)
) STRICT, WITHOUT ROWID;

-- Only unresolved reservations, what the resolver leases: settled and
-- released rows leave the index, so it stays small.
CREATE INDEX reservations_open ON reservations (state, created_at)
	WHERE state IN ('reserved', 'uncertain');

-- The uncertain part of a key's spend.
CREATE INDEX reservations_uncertain ON reservations (key_id)
	WHERE state = 'uncertain';

-- The running sums the caps are checked against: for each key one row
-- ('total', ''), one per local day ('daily', '2026-11-29') and one per local
-- month ('monthly', '2026-11'). Each holds settled + reserved + uncertain.
CREATE TABLE spend_counters (
	key_id TEXT    NOT NULL REFERENCES keys (id),
	period TEXT    NOT NULL CHECK (period IN ('total', 'daily', 'monthly')),
	bucket TEXT    NOT NULL,
	micros INTEGER NOT NULL,
	PRIMARY KEY (key_id, period, bucket)
) STRICT, WITHOUT ROWID;

-- The counters follow the reservations through triggers, so no code path can
-- change what a reservation counts without moving the counters with it, and a
-- settlement is one UPDATE statement. What a reservation counts: reserved and
-- uncertain hold micros, settled holds settled_micros, released nothing.
CREATE TRIGGER reservations_count_insert AFTER INSERT ON reservations
BEGIN
	INSERT INTO spend_counters (key_id, period, bucket, micros)
	VALUES (NEW.key_id, 'total', '', NEW.micros), (NEW.key_id, 'daily', NEW.day, NEW.micros), (NEW.key_id, 'monthly', NEW.month, NEW.micros)
	ON CONFLICT (key_id, period, bucket) DO UPDATE SET micros = micros + excluded.micros;
END;

CREATE TRIGGER reservations_count_update AFTER UPDATE OF state, micros, settled_micros ON reservations
WHEN (CASE NEW.state WHEN 'settled' THEN NEW.settled_micros WHEN 'released' THEN 0 ELSE NEW.micros END)
  <> (CASE OLD.state WHEN 'settled' THEN OLD.settled_micros WHEN 'released' THEN 0 ELSE OLD.micros END)
BEGIN
	INSERT INTO spend_counters (key_id, period, bucket, micros)
	SELECT NEW.key_id, p.period, p.bucket,
		(CASE NEW.state WHEN 'settled' THEN NEW.settled_micros WHEN 'released' THEN 0 ELSE NEW.micros END)
		- (CASE OLD.state WHEN 'settled' THEN OLD.settled_micros WHEN 'released' THEN 0 ELSE OLD.micros END)
	FROM (SELECT 'total' AS period, '' AS bucket UNION ALL SELECT 'daily', OLD.day UNION ALL SELECT 'monthly', OLD.month) AS p
	WHERE true
	ON CONFLICT (key_id, period, bucket) DO UPDATE SET micros = micros + excluded.micros;
END;

-- The audit log. Append-only, so INTEGER PRIMARY KEY ids only ever grow. No
-- foreign key: requests with an unknown vault key are audited too.
CREATE TABLE events (
	id              INTEGER PRIMARY KEY,
	key_id          TEXT    NOT NULL,
	time            INTEGER NOT NULL,
	operation       TEXT    NOT NULL,
	method          TEXT    NOT NULL,
	path            TEXT    NOT NULL,
	amount          INTEGER NOT NULL,
	currency        TEXT    NOT NULL,
	micros          INTEGER NOT NULL,
	decision        TEXT    NOT NULL,
	reason          TEXT    NOT NULL,
	upstream_status INTEGER NOT NULL,
	object_id       TEXT    NOT NULL,
	request_id      TEXT    NOT NULL,
	idempotency_key TEXT    NOT NULL,
	reservation_id  TEXT    NOT NULL
) STRICT;

CREATE INDEX events_key_id ON events (key_id, id);
