-- 0003_key_notify: every change to a key is announced with NOTIFY, so that
-- each replica's cache of keys (Store.WatchKeys) drops it at once. The channel
-- is named after the keys table's schema, so several keybrake schemas in one
-- database do not hear each other; the payload is the key's ID. NOTIFY is
-- transactional: listeners hear of the change when it commits, never before,
-- and never of a change rolled back.
CREATE FUNCTION keybrake_notify_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify('keybrake_keys:' || TG_TABLE_SCHEMA, NEW.id);
	RETURN NULL;
END
$$;

CREATE TRIGGER keys_notify AFTER UPDATE ON keys
	FOR EACH ROW EXECUTE FUNCTION keybrake_notify_key();
