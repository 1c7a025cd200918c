-- 0031_velocity_aliases: velocity limits saved before their
-- operation lists named each operation's aliases (stripe.Aliases) name them
-- now, as saving them again through the admin API would (http/aliases.go,
-- withAliases: each name followed by the other names of its operation, each
-- name once), as sqlite/migrations/0027_velocity_aliases.sql does.
-- A limit naming refunds.create stored before did not count
-- POST /v1/charges/{id}/refund (charges.refund), the same refund by its
-- legacy path, so a key limited to one refund an hour refunded at will.
--
-- A limit whose list changes counts under a new scope (VelocityLimit.Scope,
-- keybrake_velocity_scope): its count starts again when this runs, as it
-- does when an admin saves the limit again. The pairs below are
-- stripe/aliases.go's groups at the time of writing (group, place, name);
-- postgres/migrate_test.go fails when stripe.Aliases names one they lack.
-- Field rules and approval policies match aliases when they are evaluated
-- and are left as they are.
CREATE TEMP TABLE kb_aliases (grp integer NOT NULL, pos integer NOT NULL, name text PRIMARY KEY);
INSERT INTO kb_aliases (grp, pos, name) VALUES
	(1, 0, 'refunds.create'),
	(1, 1, 'charges.refund'),
	(1, 2, 'charges.refunds.create'),
	(2, 0, 'refunds.update'),
	(2, 1, 'charges.refunds.update'),
	(3, 0, 'disputes.update'),
	(3, 1, 'charges.dispute.update'),
	(4, 0, 'disputes.close'),
	(4, 1, 'charges.dispute.close'),
	(5, 0, 'application_fees.refunds.create'),
	(5, 1, 'application_fees.refund'),
	(6, 0, 'subscriptions.update'),
	(6, 1, 'customers.subscriptions.update'),
	(7, 0, 'subscriptions.delete'),
	(7, 1, 'customers.subscriptions.delete'),
	(8, 0, 'subscriptions.discount.delete'),
	(8, 1, 'customers.subscriptions.discount.delete'),
	(9, 0, 'customers.sources.create'),
	(9, 1, 'customers.cards.create'),
	(9, 2, 'customers.bank_accounts.create'),
	(10, 0, 'customers.sources.update'),
	(10, 1, 'customers.cards.update'),
	(10, 2, 'customers.bank_accounts.update'),
	(11, 0, 'customers.sources.delete'),
	(11, 1, 'customers.cards.delete'),
	(11, 2, 'customers.bank_accounts.delete'),
	(12, 0, 'customers.sources.verify'),
	(12, 1, 'customers.bank_accounts.verify'),
	(13, 0, 'accounts.external_accounts.create'),
	(13, 1, 'accounts.bank_accounts.create'),
	(14, 0, 'accounts.external_accounts.update'),
	(14, 1, 'accounts.bank_accounts.update'),
	(14, 2, 'external_accounts.update'),
	(15, 0, 'accounts.external_accounts.delete'),
	(15, 1, 'accounts.bank_accounts.delete'),
	(16, 0, 'accounts.persons.create'),
	(16, 1, 'accounts.people.create'),
	(17, 0, 'accounts.persons.update'),
	(17, 1, 'accounts.people.update'),
	(18, 0, 'accounts.persons.delete'),
	(18, 1, 'accounts.people.delete'),
	(19, 0, 'financial_connections.sessions.create'),
	(19, 1, 'link_account_sessions.create'),
	(20, 0, 'financial_connections.accounts.disconnect'),
	(20, 1, 'linked_accounts.disconnect'),
	(21, 0, 'financial_connections.accounts.refresh'),
	(21, 1, 'linked_accounts.refresh');

UPDATE keys k SET guards = jsonb_set(k.guards, '{velocity}', (
	SELECT jsonb_agg(CASE WHEN jsonb_typeof(v.value->'operations') = 'array' THEN
		jsonb_set(v.value, '{operations}', (
			SELECT coalesce(jsonb_agg(x.n ORDER BY x.p), '[]'::jsonb) FROM (
				SELECT coalesce(a.name, o.value) AS n, min((o.i - 1) * 100 + coalesce(a.pos, 0)) AS p
				FROM jsonb_array_elements_text(v.value->'operations') WITH ORDINALITY o(value, i)
				LEFT JOIN kb_aliases g ON g.name = o.value
				LEFT JOIN kb_aliases a ON a.grp = g.grp
				GROUP BY 1) x))
		ELSE v.value END ORDER BY v.i)
	FROM jsonb_array_elements(k.guards->'velocity') WITH ORDINALITY v(value, i)))
WHERE jsonb_typeof(k.guards->'velocity') = 'array';

DROP TABLE kb_aliases;
