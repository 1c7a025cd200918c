-- 0014_proof: the audit log becomes a hash chain per key (audit.go).
--
-- Each event records its position in its key's chain (seq), the hash of
-- the event before it (prev_hash) and its own hash. Events written before
-- this migration keep seq 0: they are counted, not verified.
--
-- audit_heads holds each key's last link. AddEvents locks the heads of the
-- batch's keys (SELECT … FOR UPDATE, in key order), chains the events and
-- moves the heads in one transaction, so replicas writing the same key's
-- events take turns and the key keeps one chain (docs/audit.md).
-- audit_anchors holds, for each key whose oldest events were pruned, the
-- first kept seq and the hash of the pruned event before it.
ALTER TABLE events ADD COLUMN seq bigint NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN prev_hash text NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN hash text NOT NULL DEFAULT '';

CREATE TABLE audit_heads (
	key_id text PRIMARY KEY,
	seq    bigint NOT NULL,
	hash   text NOT NULL,
	time   timestamptz NOT NULL
);

CREATE TABLE audit_anchors (
	key_id    text PRIMARY KEY,
	seq       bigint NOT NULL,
	prev_hash text NOT NULL,
	time      timestamptz NOT NULL
);

CREATE INDEX events_time ON events (time);
CREATE INDEX events_key_seq ON events (key_id, seq);
