-- 0030_object_twilio: reservations_object indexes Twilio's reservations
-- only (issue 16), as SQLite's 0025 does.
--
-- Every settlement of a Stripe charge added its charge ID (random) to the
-- index: an entry at a random place of a B-tree as large as the
-- reservations' count. Only the Twilio lookup reads it ("is this sid
-- taken?"), and a Twilio sid is only ever named by a Twilio reservation, so
-- FindReservations{ObjectID} now looks among Twilio's reservations
-- (keybrake.ReservationFilter.ObjectID) and the index holds only those.
DROP INDEX reservations_object;
CREATE INDEX reservations_object ON reservations (object_id)
	WHERE object_id <> '' AND operation LIKE 'twilio.%';
