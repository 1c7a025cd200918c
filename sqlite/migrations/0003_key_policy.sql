-- 0003_key_policy: a key reads secrets (issuing card numbers, treasury
-- account numbers, apps secrets) only if allow_secret_reads says so; keys
-- made before it may not.
--
-- An empty allowed_endpoints used to allow every operation; it now allows
-- none, and "*" allows all. Keys made before keep what they could do,
-- written out as ["*"].
ALTER TABLE keys ADD COLUMN allow_secret_reads INTEGER NOT NULL DEFAULT 0;

UPDATE keys SET allowed_endpoints = '["*"]' WHERE allowed_endpoints IN ('null', '[]');
