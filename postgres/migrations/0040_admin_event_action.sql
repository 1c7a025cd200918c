-- 0040_admin_event_action: every admin audit event names its action. A key
-- change and the event recording it commit together (ChangeKey), so an
-- event the database refuses leaves the key as it was; the conformance
-- suite relies on this refusal to prove it. NOT VALID: rows written before
-- are not scanned (keybrake never wrote one without an action).
ALTER TABLE admin_events ADD CONSTRAINT admin_events_action CHECK (action <> '') NOT VALID;
