package http

import (
	"net/http"
	"strings"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

// decide applies the key's policy to the operation: the endpoint allowlist,
// the refusal of secret reads the key did not ask for, the Connect account
// and customer scopes, and the refusal of money-moving
// operations keybrake cannot price. It returns EFORBIDDEN naming what was
// attempted and what is allowed.
func (p *proxy) decide(c *call, form *stripe.Form, class stripe.Class) error {
	k := c.key
	if !endpointAllowed(k.AllowedEndpoints, c.op) {
		return keybrake.Errorf(keybrake.EFORBIDDEN, "This vault key may not call %s (%s %s). Allowed: %s.", c.op.Name, methodOf(c.op), c.op.Path, allowedList(k.AllowedEndpoints))
	}
	if what, ok := stripe.SecretRead(c.op, form); ok && !k.AllowSecretReads {
		return keybrake.Errorf(keybrake.EFORBIDDEN, "This vault key may not read secrets: the request asks for %s. An operator can set allow_secret_reads on the key to permit it.", what)
	}
	if len(k.AllowedAccounts) > 0 && !contains(k.AllowedAccounts, c.account) {
		acct := c.account
		if acct == "" {
			acct = "the platform account (no Stripe-Account header)"
		}
		return keybrake.Errorf(keybrake.EFORBIDDEN, "This vault key may not act on %s. Allowed Stripe-Account values: %s.", acct, strings.Join(k.AllowedAccounts, ", "))
	}
	scope := stripe.ScopeOf(c.op, form)
	if len(k.AllowedAccounts) > 0 {
		for _, a := range scope.Accounts {
			if !contains(k.AllowedAccounts, a) {
				return keybrake.Errorf(keybrake.EFORBIDDEN, "This vault key may not move money to account %s. Allowed accounts: %s.", a, strings.Join(k.AllowedAccounts, ", "))
			}
		}
	}
	if len(k.AllowedCustomers) > 0 {
		if err := checkCustomer(k, c.op, scope.Customers, class); err != nil {
			return err
		}
	}
	// A priced operation's currency is checked once priced (reserve), since
	// it may come from a lookup; an unpriced one has only the body's.
	if class == stripe.ClassUnpriced {
		for _, cur := range scope.Currencies {
			if err := p.checkCurrency(k, cur); err != nil {
				return err
			}
		}
	}
	if class == stripe.ClassUnpriced && !k.AllowUnpriced {
		return keybrake.Errorf(keybrake.EFORBIDDEN, "keybrake cannot price %s, which may move money, so this capped vault key refuses it (fail closed). An operator can set allow_unpriced on the key to permit it without counting it.", c.op.Name)
	}
	return nil
}

// endpointAllowed reports whether op matches an allowlist entry: an
// operation name (charges.create) or a path prefix on a segment boundary
// (/v1/charges covers /v1/charges/ch_1/capture, not /v1/chargesx), or "*"
// for every operation. An empty allowlist allows none: the admin API never
// stores one, and keys made before "*" existed were migrated to it.
func endpointAllowed(allowed []string, op stripe.Operation) bool {
	for _, a := range allowed {
		if a == keybrake.AllEndpoints {
			return true
		}
		if strings.HasPrefix(a, "/") {
			if op.Path == a || strings.HasPrefix(op.Path, a+"/") {
				return true
			}
		} else if a == op.Name {
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

func methodOf(op stripe.Operation) string {
	switch op.Action {
	case "retrieve", "list", "search":
		return http.MethodGet
	case "delete":
		return http.MethodDelete
	}
	return http.MethodPost
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
