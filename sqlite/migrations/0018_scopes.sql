-- 0018_scopes: a key's vendor scope (keybrake.Scope: Twilio destinations and
-- senders, Resend senders, recipient domains and recipients per email) as
-- one JSON object, '' for none; and an index for the monthly count caps,
-- which sum a key's unreleased reservations of one kind and month in
-- Reserve's write transaction as the daily caps do per day.
ALTER TABLE keys ADD COLUMN scope TEXT NOT NULL DEFAULT '';
CREATE INDEX reservations_counted_month ON reservations (key_id, count_kind, month) WHERE count_kind <> '';
