package http

import (
	"context"
	"net/url"
	"sort"
	"strings"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

// Decide applies the key's Stripe scopes to the request: the refusal of
// secret reads the key did not ask for, the Connect account and customer
// scopes (also of the existing object acted on, looked up), the currency
// scope of an unpriced operation, and the key's field rules. It returns
// EFORBIDDEN naming what was attempted and what is allowed.
func (v *stripeVendor) Decide(ctx context.Context, k *keybrake.Key, req *VendorRequest) error {
	sr, ok := req.Parsed.(*stripeRequest)
	if !ok {
		return nil // keybrake's own key endpoint
	}
	op, form, class, account := sr.op, sr.form, sr.class, req.Account
	if what, ok := stripe.SecretRead(op, form); ok && !k.AllowSecretReads {
		return keybrake.Errorf(keybrake.EFORBIDDEN, "This vault key may not read secrets: the request asks for %s. An operator can set allow_secret_reads on the key to permit it.", what)
	}
	if len(k.AllowedAccounts) > 0 && !contains(k.AllowedAccounts, account) {
		acct := account
		if acct == "" {
			acct = "the platform account (no Stripe-Account header)"
		}
		return keybrake.Errorf(keybrake.EFORBIDDEN, "This vault key may not act on %s. Allowed Stripe-Account values: %s.", acct, strings.Join(k.AllowedAccounts, ", "))
	}
	if len(k.AllowedAccounts) > 0 && pathAccount(op) != "" && !contains(k.AllowedAccounts, pathAccount(op)) {
		return keybrake.Errorf(keybrake.EFORBIDDEN, "This vault key may not act on account %s. Allowed accounts: %s.", pathAccount(op), strings.Join(k.AllowedAccounts, ", "))
	}
	scope := stripe.ScopeOf(op, form)
	if len(k.AllowedAccounts) > 0 {
		for _, a := range scope.Accounts {
			if !contains(k.AllowedAccounts, a) {
				return keybrake.Errorf(keybrake.EFORBIDDEN, "This vault key may not move money to account %s. Allowed accounts: %s.", a, strings.Join(k.AllowedAccounts, ", "))
			}
		}
	}
	if len(k.AllowedCustomers) > 0 {
		if err := checkCustomer(k, op, scope.Customers, class); err != nil {
			return err
		}
		if err := v.checkObjectCustomer(ctx, k, sr, account); err != nil {
			return err
		}
	}
	if err := v.resolveRefundSubject(ctx, k, req, account); err != nil {
		return err
	}
	// A priced operation's currency is checked once priced (Price), since
	// it may come from a lookup; an unpriced one has only the body's.
	if class == stripe.ClassUnpriced {
		for _, cur := range scope.Currencies {
			if err := checkCurrency(k, cur); err != nil {
				return err
			}
		}
	}
	return v.checkRules(k, sr, account) // field rules (fieldrules.go)
}

// endpointAllowed reports whether op matches an allowlist entry: an
// operation name (charges.create) or a path prefix on a segment boundary
// (/v1/charges covers /v1/charges/ch_1/capture, not /v1/chargesx), or "*"
// for every operation. An empty allowlist allows none: the admin API never
// stores one, and keys made before "*" existed were migrated to it.
func endpointAllowed(allowed []string, name, path string) bool {
	for _, a := range allowed {
		if a == keybrake.AllEndpoints {
			return true
		}
		if strings.HasPrefix(a, "/") {
			if path == a || strings.HasPrefix(path, a+"/") {
				return true
			}
		} else if a == name {
			return true
		}
	}
	return false
}

func allowedList(allowed []string) string {
	if len(allowed) == 0 {
		return "no operation"
	}
	return strings.Join(allowed, ", ")
}

// checkCustomer applies the customer allowlist. Operations on a customer
// must name an allowed one; money-moving operations must name a customer at
// all, since a charge with no customer could go to any card.
func checkCustomer(k *keybrake.Key, op stripe.Operation, customers []string, class stripe.Class) error {
	for _, customer := range customers {
		if !contains(k.AllowedCustomers, customer) {
			return keybrake.Errorf(keybrake.EFORBIDDEN, "This vault key may not act on customer %s. Allowed customers: %s.", customer, strings.Join(k.AllowedCustomers, ", "))
		}
	}
	switch {
	case len(customers) == 0 && (class == stripe.ClassPriced || class == stripe.ClassUnpriced) && needsCustomer(op):
		return keybrake.Errorf(keybrake.EFORBIDDEN, "This vault key is limited to customers %s; %s must name one with the customer parameter.", strings.Join(k.AllowedCustomers, ", "), op.Name)
	case op.Name == "customers.create":
		return keybrake.Errorf(keybrake.EFORBIDDEN, "This vault key is limited to existing customers (%s) and may not create new ones.", strings.Join(k.AllowedCustomers, ", "))
	}
	return nil
}

// needsCustomer reports whether an operation creates a new payment that
// must be tied to a customer. Confirming, capturing and refunding act on an
// object created earlier (under the same scope).
func needsCustomer(op stripe.Operation) bool {
	return op.Action == "create" && (op.Resource == "charges" || op.Resource == "payment_intents")
}

// pathAccount is the connected account an /v1/accounts/{id}/… path acts
// on, "" for other paths.
func pathAccount(op stripe.Operation) string {
	if op.Resource == "accounts" || strings.HasPrefix(op.Resource, "accounts.") {
		return op.ID
	}
	return ""
}

// customerObjects are the resources whose objects belong to a customer,
// by the path they are retrieved at: a money-moving write to one of them
// (in its path, or named by the parameter of the same name in
// customerObjectParams) moves that customer's money.
var customerObjects = []string{
	"/v1/payment_intents", "/v1/charges", "/v1/invoices", "/v1/invoiceitems", "/v1/subscriptions",
	"/v1/subscription_items", "/v1/subscription_schedules", "/v1/quotes", "/v1/checkout/sessions",
	"/v1/credit_notes", "/v1/setup_intents",
}

// customerObjectParams are the top-level parameters that name another
// customer's object a money-moving write acts on (a credit note of an
// invoice, an item added to a subscription), with where it is retrieved.
var customerObjectParams = map[string]string{"invoice": "/v1/invoices", "subscription": "/v1/subscriptions", "quote": "/v1/quotes"}

// checkObjectCustomer applies the customer allowlist to the existing object
// a request acts on: the payment intent or charge in its path (confirm,
// capture, update, cancel, increment), the charge or payment intent a
// refund names, and for any priced or unpriced write the customer's object
// in its path (an invoice paid, a subscription resumed: customerObjects)
// or named by a parameter (customerObjectParams). The object's customer is
// looked up upstream with the real key; an object without a customer
// (one keybrake cannot tell the customer of, such as a subscription
// item), or with another one, is refused.
func (v *stripeVendor) checkObjectCustomer(ctx context.Context, k *keybrake.Key, sr *stripeRequest, account string) error {
	var ids, paths []string
	switch op, form := sr.op, sr.form; {
	case stripe.HoldsObject(op):
		ids = append(ids, op.ID)
	case op.Name == "charges.refund", op.Name == "charges.refunds.create":
		ids = append(ids, op.ID)
	case op.Name == "refunds.create" && form != nil:
		for _, param := range []string{"charge", "payment_intent"} {
			if v, ok := form.Get(param); ok && v != "" {
				ids = append(ids, v)
			}
		}
	case sr.class == stripe.ClassPriced || sr.class == stripe.ClassUnpriced:
		if p := customerObjectPath(op); p != "" {
			paths = append(paths, p)
		}
		for param, base := range customerObjectParams {
			if v, ok := form.Get(param); ok && v != "" {
				paths = append(paths, base+"/"+url.PathEscape(v))
			}
		}
		sort.Strings(paths)
	}
	for _, id := range ids {
		p, err := paymentObjectPath(id)
		if err != nil {
			return err
		}
		paths = append(paths, p)
	}
	for _, p := range paths {
		customer, err := v.pathCustomer(ctx, p, account)
		if err != nil {
			return err
		}
		if customer == "" || !contains(k.AllowedCustomers, customer) {
			who := "no customer keybrake can tell"
			if customer != "" {
				who = "customer " + customer
			}
			return keybrake.Errorf(keybrake.EFORBIDDEN, "This vault key is limited to customers %s; %s acts on %s, which belongs to %s.", strings.Join(k.AllowedCustomers, ", "), sr.op.Name, p, who)
		}
	}
	return nil
}

// customerObjectPath is the path the object in op's path is retrieved at, when it
// is one of customerObjects ("/v1/invoices/in_1" for POST
// /v1/invoices/in_1/pay), else "". It reads the path decoded, as Stripe
// does and as op.ID is: op.Path is as the client escaped it, and
// /v1/invoices/in_%311/pay is the invoice in_11 to Stripe
// (TestAttackStripe_EscapedObjectIDDodgesCustomerScope). The path returned
// is escaped once, for the lookup.
func customerObjectPath(op stripe.Operation) string {
	if op.ID == "" {
		return ""
	}
	// ParseOperation refused malformed escapes and escaped separators, so
	// decoding makes no new segment.
	dec, err := url.PathUnescape(op.Path)
	if err != nil {
		return ""
	}
	for _, base := range customerObjects {
		rest, ok := strings.CutPrefix(dec, base+"/"+op.ID)
		if ok && (rest == "" || rest[0] == '/') {
			return base + "/" + url.PathEscape(op.ID)
		}
	}
	return ""
}

// resolveRefundSubject counts a refund by a charge (its charge parameter,
// or a legacy path's URL) under the payment intent that made the charge,
// read upstream, so that a payment's refunds are one guard subject whether
// they name its charge or its intent: refunded once by each, it passed a
// limit of one refund a payment and the duplicate guard
// (TestAttackRules_RefundByChargeAndIntentTwoSubjects). A charge made
// without an intent stays its own subject. Only keys whose guards compare
// subjects pay the read; a failed read refuses the refund (fail closed).
func (v *stripeVendor) resolveRefundSubject(ctx context.Context, k *keybrake.Key, req *VendorRequest, account string) error {
	if req.Subject == "" || strings.HasPrefix(req.Subject, "pi_") || !comparesSubjects(k.Guards) {
		return nil
	}
	obj, err := (&upstreamLookup{s: v.s}).object(ctx, "/v1/charges/"+url.PathEscape(req.Subject), account)
	if err != nil {
		return err
	}
	if pi := expandedID(obj.PaymentIntent); pi != "" {
		req.Subject = pi
	}
	return nil
}

// comparesSubjects reports whether g tells requests apart by their
// subject: the duplicate guard or a per-customer velocity limit.
func comparesSubjects(g *keybrake.Guards) bool {
	if g == nil {
		return false
	}
	if g.Duplicate != nil {
		return true
	}
	for _, l := range g.Velocity {
		if l.Per == keybrake.PerCustomer {
			return true
		}
	}
	return false
}
