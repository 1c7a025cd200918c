-- 0033_key_version: every keys row carries a version, different after
-- every UPDATE of the row, so a reservation decided on a key read before
-- an operator narrowed it is refused as stale (ReserveArgs.KeyVersion,
-- ReserveResult.Stale) and the proxy decides again on the key as it is now.
-- A trigger bumps it, so every writer of keys (later migrations included)
-- changes it without knowing of it; an UPDATE that sets version itself
-- (the trigger's own) does not fire it again. version + 1, not
-- OLD.version + 1: another trigger's nested UPDATE of the same row (0026)
-- must not leave it where the outer one put it.
ALTER TABLE keys ADD COLUMN version INTEGER NOT NULL DEFAULT 1;

CREATE TRIGGER keys_version AFTER UPDATE ON keys
WHEN NEW.version = OLD.version
BEGIN
	UPDATE keys SET version = version + 1 WHERE id = NEW.id;
END;
