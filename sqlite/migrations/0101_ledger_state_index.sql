-- 0101_ledger_state_index: drop ledger_entries_state.
--
-- No query of SQLite's reads it: the only state filter, FindEntries's
-- (?2 = '' OR state = ?2), cannot use an index on state, and SQLite scans
-- the primary key in key order instead. Every claim still inserted into it
-- and every outcome moved its entry (a delete and an insert), a third of
-- the b-tree pages each ledger write dirtied and the group commit wrote to
-- the WAL. PostgreSQL keeps its index: its custom plans fold the parameter
-- and use it.

DROP INDEX ledger_entries_state;
