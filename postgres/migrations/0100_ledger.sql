-- 0100_ledger: the billing ledger of the exactly-once billing consumer.
--
-- One row per billing event, keyed by its content idempotency key, written
-- (pending, leased) before Stripe is called. lease_until is NULL when nobody
-- holds the lease.

CREATE TABLE ledger_entries (
	key              text        PRIMARY KEY,
	state            text        NOT NULL CHECK (state IN ('pending', 'charged', 'declined', 'failed')),
	amount           bigint      NOT NULL CHECK (amount > 0),
	currency         text        NOT NULL,
	customer         text        NOT NULL,
	fingerprint      text        NOT NULL,
	charge_id        text        NOT NULL,
	reason           text        NOT NULL,
	attempts         integer     NOT NULL,
	lease_owner      text        NOT NULL,
	lease_until      timestamptz,
	first_attempt_at timestamptz NOT NULL,
	created_at       timestamptz NOT NULL,
	updated_at       timestamptz NOT NULL,
	CHECK (state <> 'charged' OR charge_id <> ''),
	CHECK (state = 'pending' OR lease_owner = '')
);

CREATE INDEX ledger_entries_state ON ledger_entries (state, key);

-- Events that arrived under an existing key with another fingerprint: failed,
-- never charged. One row per (key, fingerprint), counting deliveries.
CREATE TABLE ledger_conflicts (
	id          bigserial   PRIMARY KEY,
	key         text        NOT NULL REFERENCES ledger_entries (key),
	fingerprint text        NOT NULL,
	amount      bigint      NOT NULL,
	currency    text        NOT NULL,
	customer    text        NOT NULL,
	reason      text        NOT NULL,
	deliveries  integer     NOT NULL,
	created_at  timestamptz NOT NULL,
	updated_at  timestamptz NOT NULL,
	UNIQUE (key, fingerprint)
);
