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
