-- 0020_counts: daily count caps (messages, calls, emails) beside the USD
-- caps, as in sqlite/migrations/0016_counts.sql. A key's caps are one JSON
-- object (keybrake.CountCaps, NULL for none); a reservation records what it
-- counts. What a key has used in a day is the sum of its reservations of
-- that kind and day that are not released. keybrake_reserve is unchanged:
-- a reservation that counts is decided in a Go-side transaction
-- (postgres/counts.go) that takes the same key row lock first.
ALTER TABLE keys ADD COLUMN count_caps jsonb;
ALTER TABLE reservations ADD COLUMN count_kind text NOT NULL DEFAULT '';
ALTER TABLE reservations ADD COLUMN count bigint NOT NULL DEFAULT 0;
CREATE INDEX reservations_counted ON reservations (key_id, count_kind, day) WHERE count_kind <> '';
