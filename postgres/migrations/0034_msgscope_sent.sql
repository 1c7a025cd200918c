-- 0034_msgscope_sent: which vault key sent each message, call and email
-- through keybrake (keybrake.SentService), as SQLite's 0031 does.
--
-- Every vault key of a vendor shares keybrake's one credential upstream,
-- which reads, changes and cancels any of the account's objects by id: one
-- key read another's one-time codes (Resend emails.get, Twilio
-- messages.fetch) or canceled its scheduled email. A key now reads or acts
-- on an object by id only when a row names it (or a key minted under it)
-- as the sender. Rows are made from the create's answer, so ids sent
-- before this migration have none and are refused (docs/money-model.md).
-- A row outlives its reservation (PruneReservations): the message can
-- still be read long after its money is final.
CREATE TABLE sent_objects (
	vendor         text        NOT NULL,
	object_id      text        NOT NULL,
	key_id         text        NOT NULL REFERENCES keys (id),
	reservation_id text        NOT NULL,
	created_at     timestamptz NOT NULL,
	PRIMARY KEY (vendor, object_id, key_id)
);
