-- 0011_delegate: child keys carved from a parent's budget, and requests
-- that wait for a person's approval (delegate.go, approval.go).
--
-- A child names its parent; its budget is an escrow reservation of the
-- parent (operation 'keybrake.escrow', state 'held', object_id the child's
-- ID), so the counters and triggers of 0001 count it like any hold.
ALTER TABLE keys ADD COLUMN parent_id TEXT NOT NULL DEFAULT '';
ALTER TABLE keys ADD COLUMN mint INTEGER NOT NULL DEFAULT 0;
ALTER TABLE keys ADD COLUMN approval TEXT NOT NULL DEFAULT ''; -- JSON ApprovalPolicy, '' for none

CREATE INDEX keys_parent ON keys (parent_id) WHERE parent_id <> '';

-- The escrows still held, what ReturnEscrows scans.
CREATE INDEX reservations_escrow ON reservations (object_id)
	WHERE operation = 'keybrake.escrow' AND state = 'held';

-- One row per request that needed approval; (key_id, idempotency_key) is
-- unique, so a retry finds its approval and never makes a second.
CREATE TABLE approvals (
	id              TEXT    PRIMARY KEY,
	key_id          TEXT    NOT NULL REFERENCES keys (id),
	idempotency_key TEXT    NOT NULL,
	fingerprint     TEXT    NOT NULL,
	operation       TEXT    NOT NULL,
	method          TEXT    NOT NULL,
	path            TEXT    NOT NULL,
	account         TEXT    NOT NULL,
	amount          INTEGER NOT NULL,
	currency        TEXT    NOT NULL,
	micros          INTEGER NOT NULL,
	reason          TEXT    NOT NULL,
	state           TEXT    NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'used')),
	decided_by      TEXT    NOT NULL,
	decided_at      INTEGER,
	reservation_id  TEXT    NOT NULL,
	expires_at      INTEGER NOT NULL,
	created_at      INTEGER NOT NULL,
	updated_at      INTEGER NOT NULL,
	UNIQUE (key_id, idempotency_key)
) STRICT;

CREATE INDEX approvals_state ON approvals (state, created_at);
