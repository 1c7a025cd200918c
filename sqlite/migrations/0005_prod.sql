-- 0005_prod: named admin tokens and the admin audit log; key suspension
-- and rotation.
CREATE TABLE admin_tokens (
	name       TEXT    PRIMARY KEY,
	role       TEXT    NOT NULL CHECK (role IN ('admin', 'viewer')),
	token_hash TEXT    NOT NULL UNIQUE,
	prefix     TEXT    NOT NULL,
	created_by TEXT    NOT NULL,
	created_at INTEGER NOT NULL,
	revoked_at INTEGER
) STRICT;

CREATE TABLE admin_events (
	id     INTEGER PRIMARY KEY AUTOINCREMENT,
	time   INTEGER NOT NULL,
	actor  TEXT    NOT NULL,
	action TEXT    NOT NULL,
	target TEXT    NOT NULL,
	detail TEXT    NOT NULL,
	client TEXT    NOT NULL
) STRICT;

CREATE INDEX admin_events_time ON admin_events (time);

-- A suspended key is refused until resumed. A rotated key keeps its
-- previous secret's hash until prev_secret_until, then refuses it.
ALTER TABLE keys ADD COLUMN suspended_at INTEGER;
ALTER TABLE keys ADD COLUMN prev_secret_hash TEXT;
ALTER TABLE keys ADD COLUMN prev_secret_until INTEGER;
CREATE UNIQUE INDEX keys_prev_secret_hash ON keys (prev_secret_hash) WHERE prev_secret_hash IS NOT NULL;

-- The backstop of suspension, as Reserve's own check is of revocation: a
-- new reservation (or a released one reserved again) of a suspended key is
-- refused in the transaction that would make it.
CREATE TRIGGER reservations_refuse_suspended BEFORE INSERT ON reservations
WHEN (SELECT suspended_at FROM keys WHERE id = NEW.key_id) IS NOT NULL
BEGIN SELECT RAISE(ABORT, 'keybrake: vault key suspended'); END;

CREATE TRIGGER reservations_rearm_suspended BEFORE UPDATE OF state ON reservations
WHEN OLD.state = 'released' AND NEW.state = 'reserved' AND (SELECT suspended_at FROM keys WHERE id = NEW.key_id) IS NOT NULL
BEGIN SELECT RAISE(ABORT, 'keybrake: vault key suspended'); END;
