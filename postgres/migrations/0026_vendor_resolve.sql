-- 0026_vendor_resolve: what the resolver of Twilio's lost answers and held
-- prices reads, without scanning the reservations.
--
-- Who already accounts for an upstream object (a Twilio sid), so a lost
-- answer is never settled against a message another reservation holds.
CREATE INDEX reservations_object ON reservations (object_id)
	WHERE object_id <> '';

-- The open reservations of one operation in a time window: the identical
-- sends a lost answer may be confused with.
CREATE INDEX reservations_open_operation ON reservations (operation, created_at)
	WHERE state IN ('reserved', 'uncertain');

-- The held reservations of one operation by due time (the lease), what
-- LeaseHeld reads: a pass reads what is due, not every held reservation.
CREATE INDEX reservations_held_due ON reservations (operation, lease_until NULLS FIRST, seq)
	WHERE state = 'held';
