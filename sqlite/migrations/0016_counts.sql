-- 0016_counts: daily count caps (messages, calls, emails) beside the USD
-- caps. A key's caps are one JSON object (keybrake.CountCaps, '' for none);
-- a reservation records what it counts. What a key has used in a day is
-- the sum of its reservations of that kind and day that are not released:
-- a release gives the count back, a settlement never changes it, and a new
-- day starts at zero. Reserve reads the sum in its write transaction.
ALTER TABLE keys ADD COLUMN count_caps TEXT NOT NULL DEFAULT '';
ALTER TABLE reservations ADD COLUMN count_kind TEXT NOT NULL DEFAULT '';
ALTER TABLE reservations ADD COLUMN count INTEGER NOT NULL DEFAULT 0;
CREATE INDEX reservations_counted ON reservations (key_id, count_kind, day) WHERE count_kind <> '';
