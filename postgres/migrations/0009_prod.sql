-- 0009_prod: named admin tokens and the admin audit log; key suspension
-- and rotation.
CREATE TABLE admin_tokens (
	name       text        PRIMARY KEY,
	role       text        NOT NULL CHECK (role IN ('admin', 'viewer')),
	token_hash text        NOT NULL UNIQUE,
	prefix     text        NOT NULL,
	created_by text        NOT NULL,
	created_at timestamptz NOT NULL,
	revoked_at timestamptz
);

CREATE TABLE admin_events (
	id     bigserial   PRIMARY KEY,
	time   timestamptz NOT NULL,
	actor  text        NOT NULL,
	action text        NOT NULL,
	target text        NOT NULL,
	detail text        NOT NULL,
	client text        NOT NULL
);

CREATE INDEX admin_events_time ON admin_events (time);

-- A suspended key is refused until resumed. A rotated key keeps its
-- previous secret's hash until prev_secret_until, then refuses it.
ALTER TABLE keys ADD COLUMN suspended_at timestamptz;
ALTER TABLE keys ADD COLUMN prev_secret_hash text;
ALTER TABLE keys ADD COLUMN prev_secret_until timestamptz;
CREATE UNIQUE INDEX keys_prev_secret_hash ON keys (prev_secret_hash) WHERE prev_secret_hash IS NOT NULL;

-- The backstop of suspension, as keybrake_reserve's own check is of
-- revocation: a new reservation (or a released one reserved again) of a
-- suspended key is refused in the statement that would make it. Reserve
-- holds the key's row lock, which suspending also takes, so a suspension
-- committed before applies to the very next reservation on every replica.
CREATE FUNCTION keybrake_refuse_suspended() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM keys WHERE id = NEW.key_id AND suspended_at IS NOT NULL) THEN
		RAISE EXCEPTION 'This vault key is suspended; an admin can resume it.' USING ERRCODE = 'KB403';
	END IF;
	RETURN NEW;
END
$$;

CREATE TRIGGER reservations_refuse_suspended BEFORE INSERT ON reservations
	FOR EACH ROW EXECUTE FUNCTION keybrake_refuse_suspended();

CREATE TRIGGER reservations_rearm_suspended BEFORE UPDATE OF state ON reservations
	FOR EACH ROW WHEN (OLD.state = 'released' AND NEW.state = 'reserved')
	EXECUTE FUNCTION keybrake_refuse_suspended();
