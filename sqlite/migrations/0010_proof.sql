-- 0010_proof: the audit log becomes a hash chain per key (audit.go).
--
-- Each event records its position in its key's chain (seq), the hash of
-- the event before it (prev_hash) and its own hash. Events written before
-- this migration keep seq 0: they are counted, not verified.
--
-- audit_heads holds each key's last link; AddEvents reads and moves it in
-- the transaction that inserts the events. audit_anchors holds, for each
-- key whose oldest events were pruned, the first kept seq and the hash of
-- the pruned event before it.
ALTER TABLE events ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN prev_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN hash TEXT NOT NULL DEFAULT '';

CREATE TABLE audit_heads (
	key_id TEXT    NOT NULL PRIMARY KEY,
	seq    INTEGER NOT NULL,
	hash   TEXT    NOT NULL,
	time   INTEGER NOT NULL
) STRICT;

CREATE TABLE audit_anchors (
	key_id    TEXT    NOT NULL PRIMARY KEY,
	seq       INTEGER NOT NULL,
	prev_hash TEXT    NOT NULL,
	time      INTEGER NOT NULL
) STRICT;

CREATE INDEX events_time ON events (time);
CREATE INDEX events_key_seq ON events (key_id, seq);
