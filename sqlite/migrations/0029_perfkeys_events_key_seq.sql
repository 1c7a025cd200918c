-- 0029 (branch perfkeys): drop events_key_seq (key_id, seq). Every audit
-- event wrote an entry of it, and with many keys busy each event of a batch
-- a page of its own (one a key: ~1 WAL frame a charge over 1,000 keys,
-- docs/performance.md "1,000 keys against one"). Only PruneEvents read it;
-- it now reads events_key_id (key_id, id), seq following ID within a key
-- (sqlite/audit_chain.go). PostgreSQL keeps its index: its prune is
-- unchanged.
DROP INDEX IF EXISTS events_key_seq;
