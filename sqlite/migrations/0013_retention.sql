-- 0013_retention: indexes retention (keybrake.RetentionService) deletes by,
-- so each batch reads only what it deletes.

-- Final reservations by age: PruneReservations' scan.
CREATE INDEX reservations_final ON reservations (updated_at) WHERE state IN ('settled', 'released');

-- Which reservation a holds row links to: a linked reservation is kept.
CREATE INDEX holds_reservation ON holds (reservation_id);

-- Alerts by age: PruneAlerts' scan.
CREATE INDEX alerts_created ON alerts (created_at);
