-- 0002_holds: holds on objects that can still move money (keybrake.HoldService).
--
-- A reservation may now be 'held': the object it created upstream (a payment
-- intent awaiting confirmation, an uncaptured authorization) can still move
-- money without passing keybrake, so its amount stays counted in full. SQLite
-- cannot change a CHECK constraint in place, so reservations is rebuilt with
-- the new state allowed; its indexes and triggers are recreated as they were.

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
	UNIQUE (key_id, idempotency_key)
) STRICT, WITHOUT ROWID;

INSERT INTO reservations_new SELECT * FROM reservations;
DROP TABLE reservations;
ALTER TABLE reservations_new RENAME TO reservations;

CREATE INDEX reservations_open ON reservations (state, created_at)
	WHERE state IN ('reserved', 'uncertain');

CREATE INDEX reservations_uncertain ON reservations (key_id)
	WHERE state = 'uncertain';

-- The held part of a key's spend.
CREATE INDEX reservations_held ON reservations (key_id)
	WHERE state = 'held';

-- What a reservation counts: reserved, uncertain and held hold micros,
-- settled holds settled_micros, released nothing.
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

-- holds links a key's upstream object to the reservation that holds it, and
-- carries the object's lock: writes to one object through keybrake run one
-- at a time. reservation_id is '' while a lock exists before any hold.
CREATE TABLE holds (
	key_id         TEXT    NOT NULL REFERENCES keys (id),
	object_id      TEXT    NOT NULL,
	reservation_id TEXT    NOT NULL,
	hold_until     INTEGER,          -- keybrake ends the hold then if the object has not moved
	lock_owner     TEXT    NOT NULL,
	lock_until     INTEGER,
	PRIMARY KEY (key_id, object_id)
) STRICT, WITHOUT ROWID;

CREATE INDEX holds_until ON holds (hold_until) WHERE hold_until IS NOT NULL;

-- Locks are the object's, whichever key takes them: a lock checks the
-- object's rows of every key.
CREATE INDEX holds_object ON holds (object_id);
