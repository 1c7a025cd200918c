package stripe

//go:generate go run ./internal/opsgen -o testdata/operations.txt -params params.txt

// WriteRule is what keybrake knows of one Stripe write (a POST or DELETE):
// its class and why. The invariant behind every rule: a write is free
// (ClassWrite) only if it is known to be unable to move money, or to make
// money movable later without passing keybrake again, for that body.
// Charging a customer (now, or later by Stripe on its own), refunding,
// paying out, transferring, spending a balance or a card, and redirecting
// where payouts go all count as moving money.
type WriteRule struct {
	Name   string // the operation, as ParseOperation names it
	Family string // the group it is listed under in docs/money-model.md
	Class  Class  // the class for the most cautious body: ClassWrite, ClassPriced or ClassUnpriced
	Free   string // when set, the bodies for which Classify narrows Class to ClassWrite
	Reason string // why, in one line
	Own    bool   // priced or classified by keybrake's own payment rules (cost.go, Classify), not by this table

	free func(*Form) bool // reports whether the body is one that Free describes
}

// WriteRules returns the rule of every write in Stripe's API, grouped by
// family in the order docs/money-model.md lists them. A write that has no
// rule is ClassUnpriced: an operation keybrake does not know is assumed to
// move money.
func WriteRules() []WriteRule {
	return append([]WriteRule(nil), writeRules...)
}

// ruleByName indexes writeRules.
var ruleByName = func() map[string]WriteRule {
	m := make(map[string]WriteRule, len(writeRules))
	for _, r := range writeRules {
		if _, dup := m[r.Name]; dup {
			panic("stripe: two write rules for " + r.Name)
		}
		m[r.Name] = r
	}
	return m
}()

// classOf is the cautious class of an operation, before its body is known.
func classOf(method, name string) Class {
	switch {
	case method == "GET" || method == "HEAD":
		return ClassRead
	case method != "POST" && method != "DELETE":
		return ClassUnpriced
	}
	if r, ok := ruleByName[name]; ok {
		return r.Class
	}
	return ClassUnpriced
}

// Classify returns op's class for the request body form (nil for no body).
// It narrows the cautious class ParseOperation gave to what this body does.
// payment_intents.create is ClassPriced with or without confirm (an
// unconfirmed intent can be confirmed with its client secret, without
// keybrake, so its amount is held when it is created); payment_intents.update
// is ClassPriced (it may raise the intent's hold) and ClassUnpriced if it
// tries to confirm. Every other write with a WriteRule.Free is
// ClassWrite for the bodies it describes (subscriptions.delete without
// invoice_now, invoices.create that cannot advance by itself, ...) and
// ClassUnpriced for any other body. In these rules an empty or malformed
// boolean counts as its money-moving value. A reviewed legacy or preview
// parameter that moves money (LegacyParams) makes any write unpriced; a
// parameter keybrake has not reviewed is refused by CheckParams.
func Classify(op Operation, form *Form) Class {
	if op.Class == ClassRead {
		return ClassRead
	}
	if form == nil {
		form = &Form{}
	}
	switch op.Name {
	case "payment_intents.update":
		if form.Has("confirm") {
			return ClassUnpriced
		}
		return ClassPriced
	}
	if op.Class == ClassWrite && legacyUnpriced(op.Name, form) {
		// A reviewed legacy or preview parameter that moves money
		// (LegacyParams); on a freeIf write its body rule refuses it too.
		return ClassUnpriced
	}
	if r, ok := ruleByName[op.Name]; ok && r.free != nil && op.Class == r.Class && r.free(form) && !legacyUnpriced(op.Name, form) {
		return ClassWrite
	}
	return op.Class
}

// truthy reports whether the boolean parameter name was sent as anything but
// false. An empty or malformed value counts as true: when in doubt, assume
// money moves.
func truthy(form *Form, name string) bool {
	if !form.Has(name) {
		return false
	}
	v, ok := form.Get(name)
	return !ok || v != "false"
}

// present reports whether anything was sent at the nested path:
// present(form, "settings", "payouts") for settings[payouts][schedule]=...
func present(form *Form, path ...string) bool {
	var node any = form.Tree
	for _, seg := range path {
		m, ok := node.(map[string]any)
		if !ok {
			return false
		}
		if node, ok = m[seg]; !ok {
			return false
		}
	}
	return true
}

// only reports whether every top-level parameter sent is one of allowed, so
// that a parameter keybrake has not reviewed (or one Stripe adds later)
// makes the body unpriced.
func only(form *Form, allowed ...string) bool {
	for k := range form.Tree {
		found := false
		for _, a := range allowed {
			if k == a {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// oneOf reports whether the parameter name is absent or exactly one of values.
func oneOf(form *Form, name string, values ...string) bool {
	if !form.Has(name) {
		return true
	}
	v, ok := form.Get(name)
	if !ok {
		return false
	}
	for _, x := range values {
		if v == x {
			return true
		}
	}
	return false
}

// The body rules: each returns true for the bodies its WriteRule.Free
// describes.

func noInvoiceNow(f *Form) bool { return !truthy(f, "invoice_now") }

// noBalance also refuses account_balance, the name of balance before API
// version 2019-10-17, and the parameters that subscribed the customer to a
// plan in older versions (plan, with quantity, trial_end and tax_percent:
// the first invoice is charged at once), which a client can still choose
// with Stripe-Version.
func noBalance(f *Form) bool {
	for _, name := range []string{"balance", "account_balance", "cash_balance", "plan", "quantity", "trial_end", "tax_percent"} {
		if f.Has(name) {
			return false
		}
	}
	return true
}

// customerUpdateFree is noBalance without source (or its aliases card,
// from before 2015, and bank_account): a new source makes Stripe retry, at
// once, the latest open invoice of every past_due subscription that bills
// automatically.
func customerUpdateFree(f *Form) bool {
	return noBalance(f) && !f.Has("source") && !f.Has("card") && !f.Has("bank_account")
}

// invoiceStaysDraft requires auto_advance=false said explicitly: its
// default has changed between API versions, and a client chooses the
// version with Stripe-Version, so an absent auto_advance may mean true.
// It requires pending_invoice_items_behavior=exclude said explicitly too:
// a draft that takes the customer's pending items takes them from the next
// invoice, a subscription's renewal included, and a pending credit parked
// on a draft that never advances raises what that invoice collects by
// itself, as deleting the credit does (invoiceitems.delete). Before API
// version 2022-08-01 an absent pending_invoice_items_behavior included
// them.
func invoiceStaysDraft(f *Form) bool {
	v, ok := f.Get("auto_advance")
	p, sent := f.Get("pending_invoice_items_behavior")
	return ok && v == "false" && sent && p == "exclude" && !f.Has("automatically_finalizes_at") && !f.Has("from_invoice")
}

func invoiceUpdateFree(f *Form) bool {
	return only(f, "account_tax_ids", "auto_advance", "collection_method", "custom_fields",
		"days_until_due", "default_payment_method", "default_source", "description", "due_date",
		"effective_at", "expand", "footer", "metadata", "number", "payment_settings", "rendering",
		"shipping_details", "statement_descriptor") &&
		!truthy(f, "auto_advance") && oneOf(f, "collection_method", "send_invoice")
}

func subscriptionUpdateFree(f *Form) bool {
	return only(f, "cancel_at_period_end", "cancellation_details", "description", "expand", "metadata") &&
		oneOf(f, "cancel_at_period_end", "true")
}

// noPayoutChange also refuses payout_schedule, payout_statement_descriptor
// and debit_negative_balances, the top-level names of settings[payouts]
// before API version 2019-02-19, and transfer_schedule and
// transfer_statement_descriptor, their names before 2017-04-06 (when
// payouts were still transfers), which a client can still choose with
// Stripe-Version; and risk_controls, which a preview Stripe-Version takes:
// risk_controls[payouts][pause_requested]=false (or charges') unpauses
// what the platform paused, as accounts.unreject re-enables it.
func noPayoutChange(f *Form) bool {
	for _, name := range []string{"external_account", "bank_account", "payout_schedule", "payout_statement_descriptor", "debit_negative_balances",
		"transfer_schedule", "transfer_statement_descriptor", "risk_controls"} {
		if f.Has(name) {
			return false
		}
	}
	return !present(f, "settings", "payouts")
}

func setupMode(f *Form) bool {
	v, ok := f.Get("mode")
	return ok && v == "setup"
}

func customerComponentsFree(f *Form) bool {
	c, ok := f.Tree["components"].(map[string]any)
	if !ok {
		return !f.Has("components")
	}
	for k := range c {
		switch k {
		case "payment_element", "mobile_payment_element", "customer_sheet", "active_entitlements":
		default:
			return false
		}
	}
	return true
}

func noIssuingCard(f *Form) bool { return !f.Has("issuing_card") && !f.Has("nonce") }

func deactivatesLink(f *Form) bool {
	return only(f, "active", "expand", "inactive_message", "metadata") && oneOf(f, "active", "false")
}

func metadataOnly(f *Form) bool { return only(f, "description", "expand", "metadata") }

func priceUpdateFree(f *Form) bool { return only(f, "active", "expand", "metadata", "nickname") }

func cardDeactivated(f *Form) bool {
	return only(f, "cancellation_reason", "expand", "metadata", "status") && oneOf(f, "status", "inactive", "canceled")
}

func cardholderDeactivated(f *Form) bool {
	return only(f, "expand", "metadata", "preferred_locales", "status") && oneOf(f, "status", "inactive")
}

func tokenDeactivated(f *Form) bool { return oneOf(f, "status", "deleted", "suspended") }

func noImmediateInvoice(f *Form) bool {
	return oneOf(f, "proration_behavior", "none", "create_prorations") && !f.Has("payment_behavior")
}

// keepsCancelDate requires preserve_cancel_date=true said explicitly.
func keepsCancelDate(f *Form) bool {
	v, ok := f.Get("preserve_cancel_date")
	return ok && v == "true"
}

// skipsTipping requires collect_config[skip_tipping]=true said explicitly:
// otherwise a reader configured for tipping adds the tip to the intent.
func skipsTipping(f *Form) bool {
	v, ok := f.Get("collect_config", "skip_tipping")
	return ok && v == "true"
}

func noLookupKeyTransfer(f *Form) bool { return !truthy(f, "transfer_lookup_key") }

func shippingRateUpdateFree(f *Form) bool { return only(f, "active", "expand", "metadata") }

func financialAccountUpdateFree(f *Form) bool { return only(f, "expand", "metadata", "nickname") }

// webhookDisabled requires disabled=true when disabled is sent: an
// enabled endpoint delivers events, and the secrets in them, outside keybrake.
func webhookDisabled(f *Form) bool {
	return only(f, "description", "disabled", "expand", "metadata") && oneOf(f, "disabled", "true")
}

func noForwarding(f *Form) bool { return !f.Has("forwarding_settings") }

// featuresOff allows a features write that only turns features off (every
// requested=false) or asks for deposit insurance. Turning on card_issuing
// lets the cards attached to the account draw its funds again, with no
// request through keybrake (authorizations within the cards' spending
// controls are approved by Stripe); financial_addresses lets an outside
// party pull its funds by ACH debit. Both are what the features parameter
// of treasury.financial_accounts.update, unpriced, does.
func featuresOff(f *Form) bool {
	for name, v := range f.Tree {
		switch name {
		case "expand":
			continue
		case "deposit_insurance":
			if _, ok := f.Get(name, "requested"); ok && len(f.Map(name)) == 1 {
				continue
			}
			return false
		}
		if !allRequestedFalse(v) {
			return false
		}
	}
	return true
}

// allRequestedFalse reports whether every leaf under v is a requested=false.
func allRequestedFalse(v any) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	for k, c := range m {
		if s, ok := c.(string); ok {
			if k != "requested" || s != "false" {
				return false
			}
			continue
		}
		if !allRequestedFalse(c) {
			return false
		}
	}
	return true
}
