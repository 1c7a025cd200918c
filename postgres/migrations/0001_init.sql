-- Keys: a vault key's policy. The vault key itself is never stored, only its
-- hash. Lists and metadata are NULL when absent so nil and empty round-trip
-- distinctly. seq orders keys created in the same microsecond.
CREATE TABLE keys (
	id                 text PRIMARY KEY,
	seq                bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
	vendor             text NOT NULL,
	label              text NOT NULL,
	secret_hash        text NOT NULL UNIQUE,
	secret_prefix      text NOT NULL,
	per_request_cap    bigint,
	daily_cap          bigint,
	monthly_cap        bigint,
	total_cap          bigint,
	allowed_endpoints  text[],
	allowed_customers  text[],
	allowed_accounts   text[],
	allowed_currencies text[],
	timezone           text NOT NULL,
	allow_unpriced     boolean NOT NULL,
	metadata           jsonb,
	expires_at         timestamptz,
	revoked_at         timestamptz,
	created_at         timestamptz NOT NULL,
	updated_at         timestamptz NOT NULL
);

CREATE INDEX keys_created_at ON keys (created_at, seq);

-- Reservations: one per money-moving request, unique per (key, Idempotency-Key)
-- so a replay is found, never counted twice.
CREATE TABLE reservations (
	id                  text PRIMARY KEY,
	seq                 bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
	key_id              text NOT NULL REFERENCES keys (id),
	idempotency_key     text NOT NULL,
	fingerprint         text NOT NULL,
	operation           text NOT NULL,
	amount              bigint NOT NULL,
	currency            text NOT NULL,
	micros              bigint NOT NULL,
	settled_micros      bigint NOT NULL,
	state               text NOT NULL CHECK (state IN ('reserved', 'settled', 'released', 'uncertain')),
	day                 text NOT NULL,
	month               text NOT NULL,
	req_method          text NOT NULL,
	req_path            text NOT NULL,
	req_body            bytea NOT NULL,
	req_stripe_account  text NOT NULL,
	req_stripe_version  text NOT NULL,
	object_id           text NOT NULL,
	upstream_status     integer NOT NULL,
	attempts            integer NOT NULL,
	lease_owner         text NOT NULL,
	lease_until         timestamptz,
	created_at          timestamptz NOT NULL,
	updated_at          timestamptz NOT NULL,
	UNIQUE (key_id, idempotency_key)
);

CREATE INDEX reservations_key ON reservations (key_id, seq);
-- The resolver's scan: only unresolved reservations, a small set.
CREATE INDEX reservations_open ON reservations (seq) WHERE state IN ('reserved', 'uncertain');

-- Spend counters: what counts against the caps (reserved + uncertain +
-- settled) per key, window and bucket: ('daily', '2026-11-29'),
-- ('monthly', '2026-11') and ('total', ''). Only changed while the key row is
-- locked, so a reservation's check and its increment see no concurrent change.
CREATE TABLE spend_counters (
	key_id      text NOT NULL REFERENCES keys (id),
	window_name text NOT NULL,
	bucket      text NOT NULL,
	micros      bigint NOT NULL,
	PRIMARY KEY (key_id, window_name, bucket)
);

-- Events: the audit log, newest first per key.
CREATE TABLE events (
	id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	key_id           text NOT NULL,
	time             timestamptz NOT NULL,
	operation        text NOT NULL,
	method           text NOT NULL,
	path             text NOT NULL,
	amount           bigint NOT NULL,
	currency         text NOT NULL,
	micros           bigint NOT NULL,
	decision         text NOT NULL,
	reason           text NOT NULL,
	upstream_status  integer NOT NULL,
	object_id        text NOT NULL,
	request_id       text NOT NULL,
	idempotency_key  text NOT NULL,
	reservation_id   text NOT NULL
);

CREATE INDEX events_key ON events (key_id, id DESC);
