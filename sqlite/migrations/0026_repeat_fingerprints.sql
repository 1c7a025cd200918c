-- 0026_repeat_fingerprints: the repeat rule's fingerprints are kept for
-- the keys that have the rule, not for every reservation (issue 16).
--
-- reservations_fingerprint (key_id, fingerprint, created_at) took an entry
-- for every reservation, though only the breaker's repeat_body rule reads
-- it. A fingerprint is a hash of the request, so each entry went to a
-- random place of the key's part of the index: a page per reservation to
-- read and write once a key's reservations outgrow the cache (36 of the 97
-- WAL frames of a 64-reservation commit with the Stripe SDKs' requests).
-- The rule counts every reservation of the key in its window, including
-- those made before the rule was set, so the table below holds, for each key
-- whose guards have the rule, every reservation of that key (with a
-- fingerprint), and nothing for other keys:
--   - a reservation of such a key is added when made (trigger below);
--   - a re-armed reservation (new request, new time) moves;
--   - a deleted (pruned) one goes;
--   - when a key's guards gain the rule, its reservations are copied in
--     (every one of them, in the transaction that changes the guards: a key
--     with a million reservations takes seconds of the writer, once);
--     when they lose it, its rows go.
-- keys.repeat_rule says whether the key's guards have the rule, kept by
-- triggers from the guards column (keybrake.Guards as JSON, '' for none;
-- sqlite/guards.go, encodeGuards), so that a reservation reads a flag, not
-- JSON. CASE, not AND, keeps json_extract from reading '' (SQLite does not
-- promise to stop at a false AND term).
ALTER TABLE keys ADD COLUMN repeat_rule INTEGER NOT NULL DEFAULT 0;
UPDATE keys SET repeat_rule = 1 WHERE COALESCE(json_extract(CASE WHEN json_valid(guards) THEN guards END, '$.breaker.repeat_body'), 0) > 0;

CREATE TRIGGER keys_repeat_rule AFTER INSERT ON keys
WHEN COALESCE(json_extract(CASE WHEN json_valid(NEW.guards) THEN NEW.guards END, '$.breaker.repeat_body'), 0) > 0
BEGIN
	UPDATE keys SET repeat_rule = 1 WHERE id = NEW.id;
END;

CREATE TABLE repeat_fingerprints (
	key_id      TEXT    NOT NULL,
	fingerprint TEXT    NOT NULL,
	created_at  INTEGER NOT NULL,
	id          TEXT    NOT NULL,
	PRIMARY KEY (key_id, fingerprint, created_at, id)
) STRICT, WITHOUT ROWID;

INSERT INTO repeat_fingerprints (key_id, fingerprint, created_at, id)
SELECT r.key_id, r.fingerprint, r.created_at, r.id FROM keys k JOIN reservations r ON r.key_id = k.id
WHERE k.repeat_rule = 1 AND r.fingerprint <> '';

DROP INDEX reservations_fingerprint;

CREATE TRIGGER reservations_repeat_insert AFTER INSERT ON reservations
WHEN NEW.fingerprint <> '' AND (SELECT repeat_rule FROM keys WHERE id = NEW.key_id) = 1
BEGIN
	INSERT INTO repeat_fingerprints (key_id, fingerprint, created_at, id)
	VALUES (NEW.key_id, NEW.fingerprint, NEW.created_at, NEW.id);
END;

-- Rearm (sqlite/rearm.go) gives a released reservation a new request and
-- time; settlements change neither, so this never runs for them.
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

CREATE TRIGGER keys_repeat_guards AFTER UPDATE OF guards ON keys
WHEN (COALESCE(json_extract(CASE WHEN json_valid(NEW.guards) THEN NEW.guards END, '$.breaker.repeat_body'), 0) > 0) <> OLD.repeat_rule
BEGIN
	UPDATE keys SET repeat_rule = 1 - OLD.repeat_rule WHERE id = NEW.id;
	DELETE FROM repeat_fingerprints WHERE key_id = NEW.id;
	INSERT INTO repeat_fingerprints (key_id, fingerprint, created_at, id)
	SELECT key_id, fingerprint, created_at, id FROM reservations
	WHERE key_id = NEW.id AND fingerprint <> '' AND OLD.repeat_rule = 0;
END;
