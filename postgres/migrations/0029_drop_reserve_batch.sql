-- 0029_drop_reserve_batch: keybrake_reserve_batch (0004, redefined in 0012)
-- has had no caller since keybrake_reserve_many (0028) batches reservations
-- across keys, guarded keys included. A replica of an older version still
-- calling it during an upgrade gets an error for that batch and refuses its
-- requests (EUNAVAILABLE): nothing is forwarded, nothing is lost.
DROP FUNCTION keybrake_reserve_batch(
	text, text, text,
	text[], text[], text[], text[],
	bigint[], text[], bigint[],
	text[], text[], bytea[], text[], text[],
	timestamptz[]);
