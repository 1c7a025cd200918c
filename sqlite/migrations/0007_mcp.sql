-- 0007_mcp: an audit event records the interface a request came through
-- ("mcp" for a tool call on /mcp, "" for the REST proxy) and, for MCP, the
-- session and the client name it gave when it initialized.
ALTER TABLE events ADD COLUMN via TEXT NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN mcp_session TEXT NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN mcp_client TEXT NOT NULL DEFAULT '';
