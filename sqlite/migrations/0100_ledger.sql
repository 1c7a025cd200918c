-- 0100_ledger: the billing ledger of the exactly-once billing consumer.
--
-- One row per billing event, keyed by its content idempotency key, written
-- (pending, leased) before Stripe is called. Times are INTEGER unix
-- microseconds (UTC); lease_until is 0 when nobody holds the lease.

CREATE TABLE ledger_entries (
	key              TEXT    PRIMARY KEY,
	state            TEXT    NOT NULL CHECK (state IN ('pending', 'charged', 'declined', 'failed')),
	amount           INTEGER NOT NULL CHECK (amount > 0),
	currency         TEXT    NOT NULL,
	customer         TEXT    NOT NULL,
	fingerprint      TEXT    NOT NULL,
	charge_id        TEXT    NOT NULL,
	reason           TEXT    NOT NULL,
	attempts         INTEGER NOT NULL,
	lease_owner      TEXT    NOT NULL,
	lease_until      INTEGER NOT NULL,
	first_attempt_at INTEGER NOT NULL,
	created_at       INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL,
	CHECK (state <> 'charged' OR charge_id <> ''),
	CHECK (state = 'pending' OR lease_owner = '')
) STRICT;

CREATE INDEX ledger_entries_state ON ledger_entries (state, key);

-- Events that arrived under an existing key with another fingerprint: failed,
-- never charged. One row per (key, fingerprint), counting deliveries.
CREATE TABLE ledger_conflicts (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	key         TEXT    NOT NULL REFERENCES ledger_entries (key),
	fingerprint TEXT    NOT NULL,
	amount      INTEGER NOT NULL,
	currency    TEXT    NOT NULL,
	customer    TEXT    NOT NULL,
	reason      TEXT    NOT NULL,
	deliveries  INTEGER NOT NULL,
	created_at  INTEGER NOT NULL,
	updated_at  INTEGER NOT NULL,
	UNIQUE (key, fingerprint)
) STRICT;
