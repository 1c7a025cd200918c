-- 0038_sent_retention: retention prunes sent_objects (0034) by age
-- (PruneSent, serve --sent-retention), as SQLite's 0032 does: the table
-- grew by a row per message, call and email forever. The prune reads the
-- oldest rows first; without this index each batch scanned the whole
-- table.
CREATE INDEX sent_objects_created ON sent_objects (created_at);
