-- 0041_breaker_admin_event: a key the breaker suspends gets its entry in the
-- admin audit log, in the transaction that suspends it, like a suspension
-- by an operator or the drift watch (ChangeKey). The breaker trips inside a
-- reservation's or a refusal's write (guards.go); the trigger covers every
-- such write. Its reasons start with "breaker " (an operator's are
-- "suspended by admin …", the drift watch's "drift …", both with entries of
-- their own); a child suspended with its parent (suspended_by set) is
-- recorded by its parent's entry.
CREATE TRIGGER keys_breaker_admin_event AFTER UPDATE OF suspended_at ON keys
WHEN OLD.suspended_at IS NULL AND NEW.suspended_at IS NOT NULL AND NEW.suspended_by = ''
	AND substr(NEW.suspended_reason, 1, 8) = 'breaker '
BEGIN
	INSERT INTO admin_events (time, actor, action, target, detail, client)
	VALUES (NEW.suspended_at, 'breaker', 'key.suspend', NEW.id, substr(NEW.suspended_reason, 1, 1000), '');
END;
