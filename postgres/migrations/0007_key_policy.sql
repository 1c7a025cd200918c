-- 0007_key_policy: a key reads secrets (issuing card numbers, treasury
-- account numbers, apps secrets) only if allow_secret_reads says so; keys
-- made before it may not.
--
-- An empty allowed_endpoints used to allow every operation; it now allows
-- none, and '*' allows all. Keys made before keep what they could do,
-- written out as {'*'}. The keys_notify trigger announces each change, so
-- replicas still running the old code drop their cached copies.
ALTER TABLE keys ADD COLUMN allow_secret_reads boolean NOT NULL DEFAULT false;

UPDATE keys SET allowed_endpoints = ARRAY['*']
	WHERE allowed_endpoints IS NULL OR cardinality(allowed_endpoints) = 0;
