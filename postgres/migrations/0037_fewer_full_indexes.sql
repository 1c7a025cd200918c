-- 0037_fewer_full_indexes: a charge writes no entry into indexes that only
-- rare reads use (issue 16, docs/performance.md "PostgreSQL: fewer writes
-- per charge"). The settlement of a charge is not a HOT update (it changes
-- state, which partial indexes read), so every index over every row took
-- two entries a charge, one for the insert and one for the settlement.
--
-- reservations_seq_key (UNIQUE (seq)): seq is an identity column, unique
-- by its sequence; no query looks a reservation up by seq, and the scans
-- in seq order read partial indexes of their own (reservations_open for
-- the resolver, reservations_held_due) or a key's rows (below).
ALTER TABLE reservations DROP CONSTRAINT reservations_seq_key;

-- reservations_key (key_id, seq): a key's reservations in seq order
-- (FindReservations{KeyID}) are read through (key_id, created_at) or
-- (key_id, idempotency_key), which both lead with the key, and sorted.
DROP INDEX reservations_key;

-- reservations_open_operation: only the Twilio lookup of identical sends
-- reads it (FindReservations{Operation: "twilio.…", Open: true}), which
-- now names the literal term; other open reservations are found through
-- reservations_open. SQLite's store has no such index (its 0023).
DROP INDEX reservations_open_operation;
CREATE INDEX reservations_open_operation ON reservations (operation, created_at)
	WHERE state IN ('reserved', 'uncertain') AND operation LIKE 'twilio.%';
