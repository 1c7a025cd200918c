-- 0041_breaker_admin_event: a key the breaker suspends gets its entry in the
-- admin audit log, in the transaction that suspends it, like a suspension
-- by an operator or the drift watch (ChangeKey). The breaker trips inside
-- keybrake_reserve and CountRefusal; the trigger covers every such write.
-- Its reasons start with "breaker " (an operator's are "suspended by admin
-- …", the drift watch's "drift …", both with entries of their own); a child
-- suspended with its parent (suspended_by set) is recorded by its parent's
-- entry.
CREATE FUNCTION keybrake_breaker_admin_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO admin_events (time, actor, action, target, detail, client)
	VALUES (NEW.suspended_at, 'breaker', 'key.suspend', NEW.id, left(NEW.suspended_reason, 1000), '');
	RETURN NULL;
END
$$;

CREATE TRIGGER keys_breaker_admin_event AFTER UPDATE OF suspended_at ON keys
FOR EACH ROW WHEN (OLD.suspended_at IS NULL AND NEW.suspended_at IS NOT NULL AND NEW.suspended_by = ''
	AND left(NEW.suspended_reason, 8) = 'breaker ')
EXECUTE FUNCTION keybrake_breaker_admin_event();
