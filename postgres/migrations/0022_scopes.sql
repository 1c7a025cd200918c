-- 0022_scopes: a key's vendor scope (keybrake.Scope) as one JSON object,
-- NULL for none, and an index for the monthly count caps, as in
-- sqlite/migrations/0018_scopes.sql.
ALTER TABLE keys ADD COLUMN scope jsonb;
CREATE INDEX reservations_counted_month ON reservations (key_id, count_kind, month) WHERE count_kind <> '';
