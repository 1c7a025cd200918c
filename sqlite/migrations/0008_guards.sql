-- 0008_guards: guards are policy on the key (one JSON column, '' for none),
-- decided by Reserve in the same transaction as the caps. A breaker rule
-- suspends a key (suspended_at) until an operator resumes it.
--
-- Reservations keep what the guards compare: the customer (or payment
-- method) the request names, and the duplicate guard's match (dup_key).
-- Both are '' on keys without guards, so the partial indexes stay empty
-- for them.
ALTER TABLE keys ADD COLUMN guards TEXT NOT NULL DEFAULT '';
-- suspended_at comes from 0005_prod (operators suspend keys too).
ALTER TABLE keys ADD COLUMN suspended_reason TEXT NOT NULL DEFAULT '';

ALTER TABLE reservations ADD COLUMN customer TEXT NOT NULL DEFAULT '';
ALTER TABLE reservations ADD COLUMN dup_key TEXT NOT NULL DEFAULT '';

CREATE INDEX reservations_key_time ON reservations (key_id, created_at);
CREATE INDEX reservations_dup ON reservations (key_id, dup_key, created_at) WHERE dup_key <> '';
CREATE INDEX reservations_customer ON reservations (key_id, customer, created_at) WHERE customer <> '';
CREATE INDEX reservations_fingerprint ON reservations (key_id, fingerprint, created_at);

-- guard_refusals are the recent cap and policy refusals of keys whose
-- breaker counts them (refusal_burst, and repeat_body: a refused repeat is
-- still a repeat); rows older than the longest window are deleted as new
-- ones come.
CREATE TABLE guard_refusals (
	key_id      TEXT    NOT NULL REFERENCES keys (id),
	at          INTEGER NOT NULL,
	fingerprint TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX guard_refusals_key ON guard_refusals (key_id, at);
