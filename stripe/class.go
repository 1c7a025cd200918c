package stripe

// priced are the operations that move money and that Pricer can price.
var priced = map[string]bool{
	"charges.create":          true,
	"charges.capture":         true,
	"charges.refund":          true, // the legacy POST /v1/charges/{id}/refund
	"charges.refunds.create":  true, // the legacy POST /v1/charges/{id}/refunds
	"payment_intents.create":  true, // only with confirm; see Classify
	"payment_intents.confirm": true,
	"payment_intents.capture": true,
	"refunds.create":          true,
	"transfers.create":        true,
	"payouts.create":          true,
}

// cautious are writes that move money only for some bodies; ParseOperation
// calls them ClassUnpriced and Classify narrows them to ClassWrite.
var cautious = map[string]bool{
	"payment_intents.update": true, // with confirm
	"subscriptions.cancel":   true, // with invoice_now
	"subscriptions.delete":   true, // the legacy cancel, with invoice_now
}

// moneyFree are the writes known to move no money. Every other write is
// ClassUnpriced: an operation keybrake does not know is assumed to spend.
var moneyFree = map[string]bool{
	"account_links.create": true, "accounts.create": true, "accounts.update": true,
	"accounts.login_links.create": true,

	"billing_portal.configurations.create": true, "billing_portal.configurations.update": true,
	"billing_portal.sessions.create": true,

	"charges.update": true,

	"checkout.sessions.expire": true,

	"coupons.create": true, "coupons.update": true, "coupons.delete": true,

	"customers.create": true, "customers.update": true, "customers.delete": true,
	"customers.sources.create": true, "customers.sources.update": true,
	"customers.sources.delete": true, "customers.sources.verify": true,
	"customers.tax_ids.create": true, "customers.tax_ids.delete": true,
	"customers.discount.delete": true, "customers.cash_balance.update": true,

	"disputes.update": true,

	"ephemeral_keys.create": true, "ephemeral_keys.delete": true,

	"file_links.create": true, "file_links.update": true, "files.create": true,

	"invoices.create": true, "invoices.update": true, "invoices.delete": true,
	"invoices.finalize": true, "invoices.send": true, "invoices.void": true,
	"invoices.mark_uncollectible": true, "invoices.add_lines": true,
	"invoices.remove_lines": true, "invoices.update_lines": true,

	"payment_intents.cancel": true,

	"payment_links.update": true,

	"payment_methods.create": true, "payment_methods.update": true,
	"payment_methods.attach": true, "payment_methods.detach": true,

	"payouts.update": true, "payouts.cancel": true,

	"plans.create": true, "plans.update": true, "plans.delete": true,

	"prices.create": true, "prices.update": true,

	"products.create": true, "products.update": true, "products.delete": true,

	"promotion_codes.create": true, "promotion_codes.update": true,

	"quotes.create": true, "quotes.update": true, "quotes.cancel": true, "quotes.finalize": true,

	"refunds.update": true, "refunds.cancel": true,

	"setup_intents.create": true, "setup_intents.update": true, "setup_intents.confirm": true,
	"setup_intents.cancel": true, "setup_intents.verify_microdeposits": true,

	"shipping_rates.create": true, "shipping_rates.update": true,

	"tax_rates.create": true, "tax_rates.update": true,

	"tokens.create": true,

	"topups.update": true, "topups.cancel": true,

	"transfers.update": true, "transfers.reversals.update": true,
	"application_fees.refunds.update": true,

	"webhook_endpoints.create": true, "webhook_endpoints.update": true, "webhook_endpoints.delete": true,
}

// classOf is the cautious class of an operation, before its body is known.
func classOf(method, name string) Class {
	switch {
	case method == "GET" || method == "HEAD":
		return ClassRead
	case method != "POST" && method != "DELETE":
		return ClassUnpriced
	case priced[name]:
		return ClassPriced
	case cautious[name]:
		return ClassUnpriced
	case moneyFree[name]:
		return ClassWrite
	}
	return ClassUnpriced
}
