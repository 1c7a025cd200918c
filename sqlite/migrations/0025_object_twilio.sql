-- 0025_object_twilio: reservations_object indexes Twilio's reservations
-- only (issue 16).
--
-- 0022 indexed every reservation that names an upstream object, so every
-- settlement of a Stripe charge added its charge ID (random) to the index:
-- a page at a random place of a B-tree as large as the reservations'
-- count, 85% of the WAL frames of a 64-settlement commit on a database of
-- 1.1M reservations (91 of 108) and a page to read per settlement once the
-- index outgrows the cache. Only the Twilio lookup reads it ("is this sid
-- taken?"), and a Twilio sid is only ever named by a Twilio reservation,
-- so FindReservations{ObjectID} now looks among Twilio's reservations
-- (keybrake.ReservationFilter.ObjectID) and the index holds only those.
DROP INDEX reservations_object;
CREATE INDEX reservations_object ON reservations (object_id)
	WHERE object_id <> '' AND operation LIKE 'twilio.%';
