-- 0012_guards2: the guards' windows are counted, not searched. Each
-- reservation of a guarded key records the counters it counts in
-- (counted: JSON [[scope, bucket, expires], …], keybrake.EncodeCounters),
-- and the triggers below keep guard_counters equal, per counter, to the
-- number and amount of its reservations that count: every one but a
-- request Stripe refused before processing it (released, not a 402).
-- Velocity limits and the spend-rate rule sum a window's buckets (at most
-- 61) instead of its reservations.
--
-- Reservations made before this migration count in no counter: limits
-- start counting when it runs.
ALTER TABLE reservations ADD COLUMN counted TEXT NOT NULL DEFAULT '';

--
-- A counter is the sum of its slots: slot '' holds what reservations added
-- when made, a reservation's own slot (its id) what it changed since
-- (released, re-armed, grown). So only a reservation's writer touches its
-- slot: on PostgreSQL a release takes no lock that a reservation waits for
-- (postgres/migrations/0016_guards2.sql); here it keeps the stores alike.
CREATE TABLE guard_counters (
	key_id  TEXT    NOT NULL,
	scope   TEXT    NOT NULL,
	bucket  INTEGER NOT NULL, -- Unix second the bucket starts at
	slot    TEXT    NOT NULL,
	expires INTEGER NOT NULL, -- no window reads it after this second
	n       INTEGER NOT NULL,
	micros  INTEGER NOT NULL,
	PRIMARY KEY (key_id, scope, bucket, slot)
) STRICT, WITHOUT ROWID;
CREATE INDEX guard_counters_expires ON guard_counters (expires);

CREATE TRIGGER reservations_guard_insert AFTER INSERT ON reservations
WHEN NEW.counted <> '' AND (NEW.state <> 'released' OR NEW.upstream_status = 402)
BEGIN
	INSERT INTO guard_counters (key_id, scope, bucket, slot, expires, n, micros)
	SELECT NEW.key_id, value ->> 0, value ->> 1, '', value ->> 2, 1, NEW.micros FROM json_each(NEW.counted)
	WHERE true
	ON CONFLICT (key_id, scope, bucket, slot) DO UPDATE SET n = n + 1, micros = micros + excluded.micros;
END;

-- A change of what a reservation counts (released, re-armed, a hold grown,
-- new counters) takes out what it counted and adds what it counts.
CREATE TRIGGER reservations_guard_update AFTER UPDATE OF state, micros, counted, upstream_status ON reservations
WHEN (OLD.counted <> '' OR NEW.counted <> '')
  AND (OLD.counted <> NEW.counted OR OLD.micros <> NEW.micros
       OR (OLD.state <> 'released' OR OLD.upstream_status = 402) <> (NEW.state <> 'released' OR NEW.upstream_status = 402))
BEGIN
	INSERT INTO guard_counters (key_id, scope, bucket, slot, expires, n, micros)
	SELECT OLD.key_id, value ->> 0, value ->> 1, OLD.id, value ->> 2, -1, -OLD.micros FROM json_each(NULLIF(OLD.counted, ''))
	WHERE OLD.state <> 'released' OR OLD.upstream_status = 402
	ON CONFLICT (key_id, scope, bucket, slot) DO UPDATE SET n = n + excluded.n, micros = micros + excluded.micros;
	INSERT INTO guard_counters (key_id, scope, bucket, slot, expires, n, micros)
	SELECT NEW.key_id, value ->> 0, value ->> 1, NEW.id, value ->> 2, 1, NEW.micros FROM json_each(NULLIF(NEW.counted, ''))
	WHERE NEW.state <> 'released' OR NEW.upstream_status = 402
	ON CONFLICT (key_id, scope, bucket, slot) DO UPDATE SET n = n + excluded.n, micros = micros + excluded.micros;
END;

-- Velocity limits no longer search reservations by customer.
DROP INDEX reservations_customer;
