package stripe

// aliasGroups are Stripe writes that are one operation under several
// names: a current path and the legacy paths Stripe still serves. A policy
// naming one (an approval, a field rule, a velocity limit) must name them
// all, or the legacy path is a way around it.
var aliasGroups = [][]string{
	{"refunds.create", "charges.refund", "charges.refunds.create"},
	{"refunds.update", "charges.refunds.update"},
	{"disputes.update", "charges.dispute.update"},
	{"disputes.close", "charges.dispute.close"},
	{"application_fees.refunds.create", "application_fees.refund"},
	{"subscriptions.update", "customers.subscriptions.update"},
	{"subscriptions.delete", "customers.subscriptions.delete"},
	{"subscriptions.discount.delete", "customers.subscriptions.discount.delete"},
	{"customers.sources.create", "customers.cards.create", "customers.bank_accounts.create"},
	{"customers.sources.update", "customers.cards.update", "customers.bank_accounts.update"},
	{"customers.sources.delete", "customers.cards.delete", "customers.bank_accounts.delete"},
	{"customers.sources.verify", "customers.bank_accounts.verify"},
	{"accounts.external_accounts.create", "accounts.bank_accounts.create"},
	{"accounts.external_accounts.update", "accounts.bank_accounts.update", "external_accounts.update"},
	{"accounts.external_accounts.delete", "accounts.bank_accounts.delete"},
	{"accounts.persons.create", "accounts.people.create"},
	{"accounts.persons.update", "accounts.people.update"},
	{"accounts.persons.delete", "accounts.people.delete"},
	{"financial_connections.sessions.create", "link_account_sessions.create"},
	{"financial_connections.accounts.disconnect", "linked_accounts.disconnect"},
	{"financial_connections.accounts.refresh", "linked_accounts.refresh"},
}

var aliasesOf = func() map[string][]string {
	m := map[string][]string{}
	for _, g := range aliasGroups {
		for _, name := range g {
			m[name] = g
		}
	}
	return m
}()

// Aliases returns every name of the operation name, itself included, in a
// fixed order (the current name first), or nil when it has no other:
// Aliases("charges.refund") is refunds.create, charges.refund and
// charges.refunds.create.
func Aliases(name string) []string {
	return append([]string(nil), aliasesOf[name]...)
}

// AliasGroups returns every group of names of one operation (see
// Aliases), for migrations of policies stored before a group was known.
func AliasGroups() [][]string {
	out := make([][]string, len(aliasGroups))
	for i, g := range aliasGroups {
		out[i] = append([]string(nil), g...)
	}
	return out
}
