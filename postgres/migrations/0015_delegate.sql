-- 0015_delegate: child keys carved from a parent's budget, and requests
-- that wait for a person's approval (delegate.go, approval.go).
--
-- A child names its parent; its budget is an escrow reservation of the
-- parent (operation 'keybrake.escrow', state 'held', object_id the child's
-- ID), minted under the parent's row lock like keybrake_reserve.
ALTER TABLE keys ADD COLUMN parent_id text NOT NULL DEFAULT '';
ALTER TABLE keys ADD COLUMN mint boolean NOT NULL DEFAULT false;
ALTER TABLE keys ADD COLUMN approval jsonb; -- ApprovalPolicy, NULL for none

CREATE INDEX keys_parent ON keys (parent_id) WHERE parent_id <> '';

CREATE INDEX reservations_escrow ON reservations (object_id)
	WHERE operation = 'keybrake.escrow' AND state = 'held';

CREATE TABLE approvals (
	id              text PRIMARY KEY,
	key_id          text NOT NULL REFERENCES keys (id),
	idempotency_key text NOT NULL,
	fingerprint     text NOT NULL,
	operation       text NOT NULL,
	method          text NOT NULL,
	path            text NOT NULL,
	account         text NOT NULL,
	amount          bigint NOT NULL,
	currency        text NOT NULL,
	micros          bigint NOT NULL,
	reason          text NOT NULL,
	state           text NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'used')),
	decided_by      text NOT NULL,
	decided_at      timestamptz,
	reservation_id  text NOT NULL,
	expires_at      timestamptz NOT NULL,
	created_at      timestamptz NOT NULL,
	updated_at      timestamptz NOT NULL,
	UNIQUE (key_id, idempotency_key)
);

CREATE INDEX approvals_state ON approvals (state, created_at);
