package stripe

// LegacyParam is a top-level parameter that an older or preview Stripe API
// version takes on a write whose current parameters (params.txt) lack it,
// and that keybrake has reviewed. A client chooses the version with
// Stripe-Version, so Stripe reads these names if sent. Any other name the
// current API does not document is refused on a free or priced write
// (CheckParams).
type LegacyParam struct {
	Operation string // the write, as ParseOperation names it
	Name      string // the top-level parameter
	Class     Class  // ClassWrite: it moves no money; ClassUnpriced: it makes the write unpriced
	Reason    string // what it did, in the versions that take it
}

// legacyParams are the reviewed names. A ClassUnpriced one is never on a
// write keybrake prices itself (a priced write with an unreviewed or
// money-moving legacy name is refused, not forwarded uncounted); the test
// of this table checks that.
var legacyParams = []LegacyParam{
	{"customers.create", "account_balance", ClassUnpriced, "the name of balance before 2019-10-17: billed on, or credited against, the next invoice"},
	{"customers.create", "plan", ClassUnpriced, "in versions from before 2018, subscribes the customer and charges the first invoice at once"},
	{"customers.create", "quantity", ClassUnpriced, "the quantity of plan's subscription"},
	{"customers.create", "trial_end", ClassUnpriced, "when plan's subscription starts charging"},
	{"customers.create", "tax_percent", ClassUnpriced, "the tax plan's subscription adds to what it charges"},
	{"customers.create", "coupon", ClassWrite, "a discount on the new customer's invoices: lowers what they charge (removed in 2025-03-31.basil)"},
	{"customers.create", "promotion_code", ClassWrite, "as coupon"},
	{"customers.create", "card", ClassWrite, "the name of source in versions from before 2015: attaches a payment source, as source does"},
	{"customers.update", "account_balance", ClassUnpriced, "as on customers.create"},
	{"customers.update", "plan", ClassUnpriced, "as on customers.create: changes the subscription, and charges"},
	{"customers.update", "quantity", ClassUnpriced, "as on customers.create"},
	{"customers.update", "trial_end", ClassUnpriced, "as on customers.create"},
	{"customers.update", "tax_percent", ClassUnpriced, "as on customers.create"},
	{"customers.update", "coupon", ClassUnpriced, "replacing or removing (coupon=) the customer's discount raises what its subscriptions charge"},
	{"customers.update", "promotion_code", ClassUnpriced, "as coupon"},
	{"accounts.update", "bank_account", ClassUnpriced, "in versions from before 2015, replaces the account's payout bank account"},
	{"accounts.update", "payout_schedule", ClassUnpriced, "settings[payouts][schedule] before 2019-02-19: when the balance is paid out"},
	{"accounts.update", "payout_statement_descriptor", ClassUnpriced, "settings[payouts][statement_descriptor] before 2019-02-19"},
	{"accounts.update", "debit_negative_balances", ClassUnpriced, "settings[payouts][debit_negative_balances] before 2019-02-19: debits the account's bank account"},
	{"accounts.update", "transfer_schedule", ClassUnpriced, "payout_schedule before 2017-04-06"},
	{"accounts.update", "transfer_statement_descriptor", ClassUnpriced, "payout_statement_descriptor before 2017-04-06"},
	{"accounts.update", "risk_controls", ClassUnpriced, "a preview version's: risk_controls[payouts][pause_requested]=false unpauses payouts the platform paused (charges' likewise)"},
}

// LegacyParams returns the reviewed legacy and preview parameters, in the
// order docs/money-model.md lists them.
func LegacyParams() []LegacyParam {
	return append([]LegacyParam(nil), legacyParams...)
}

// legacyByOp indexes legacyParams: write -> name -> class.
var legacyByOp = func() map[string]map[string]Class {
	m := map[string]map[string]Class{}
	for _, p := range legacyParams {
		if m[p.Operation] == nil {
			m[p.Operation] = map[string]Class{}
		}
		if _, dup := m[p.Operation][p.Name]; dup {
			panic("stripe: two legacy entries for " + p.Operation + " " + p.Name)
		}
		m[p.Operation][p.Name] = p.Class
	}
	return m
}()

// legacyParam returns the class of the reviewed legacy parameter name of
// the write op, and whether it is one.
func legacyParam(op, name string) (Class, bool) {
	c, ok := legacyByOp[op][name]
	return c, ok
}

// legacyUnpriced reports whether form sends a reviewed legacy parameter of
// op that makes it unpriced.
func legacyUnpriced(op string, form *Form) bool {
	for name, c := range legacyByOp[op] {
		if c == ClassUnpriced && form.Has(name) {
			return true
		}
	}
	return false
}
