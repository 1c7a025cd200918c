-- 0017_retention: indexes retention (keybrake.RetentionService) deletes by,
-- so each batch reads only what it deletes.

-- Final reservations by age: PruneReservations' scan.
CREATE INDEX reservations_final ON reservations (updated_at) WHERE state IN ('settled', 'released');

-- Which reservation a holds row links to: a linked reservation is kept.
CREATE INDEX holds_reservation ON holds (reservation_id);

-- Alerts by age: PruneAlerts' scan.
CREATE INDEX alerts_created ON alerts (created_at);

-- Deliveries by alert: PruneAlerts deletes an alert's deliveries with it.
CREATE INDEX alert_deliveries_alert ON alert_deliveries (alert_id);

-- Retention deletes a day's worth of the two largest tables each day: at
-- the default 20% autovacuum would let them bloat by a fifth before reusing
-- the space. 2% keeps the steady state within a few percent of what is live.
ALTER TABLE events SET (autovacuum_vacuum_scale_factor = 0.02);
ALTER TABLE reservations SET (autovacuum_vacuum_scale_factor = 0.02);
