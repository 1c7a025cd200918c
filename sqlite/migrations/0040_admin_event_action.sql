-- 0040_admin_event_action: every admin audit event names its action. A key
-- change and the event recording it commit together (ChangeKey), so an
-- event the database refuses leaves the key as it was; the conformance
-- suite relies on this refusal to prove it. SQLite cannot add a CHECK to
-- an existing table, hence the trigger.
CREATE TRIGGER admin_events_action BEFORE INSERT ON admin_events
WHEN NEW.action = ''
BEGIN SELECT RAISE(ABORT, 'keybrake: admin event without an action'); END;
