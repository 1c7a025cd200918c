package http_test

import (
	"fmt"
	"strings"
	"testing"
)

// A key limited to connected account acct_1 (allowed_accounts), allowed
// unpriced operations, routed a checkout session's, a subscription
// schedule's or a payment link's funds to acct_2: the scope read only the
// top-level destination, destination[account], transfer_data[destination]
// and on_behalf_of, not the same parameters nested under
// payment_intent_data, subscription_data, phases[] or default_settings,
// nor the account an account session or onboarding link acts as. Each is
// refused now, before Stripe sees it.
func TestAttackScope_NestedDestination(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"],"allowed_accounts":["acct_1"],"allow_unpriced":true}`)
		acct := Header{"Stripe-Account", "acct_1"}
		for _, c := range []struct{ path, body string }{
			{"/v1/checkout/sessions", "mode=payment&line_items[0][price]=price_1&line_items[0][quantity]=1&payment_intent_data[transfer_data][destination]=acct_2"},
			{"/v1/checkout/sessions", "mode=payment&line_items[0][price]=price_1&line_items[0][quantity]=1&payment_intent_data[on_behalf_of]=acct_2"},
			{"/v1/checkout/sessions", "mode=subscription&line_items[0][price]=price_1&line_items[0][quantity]=1&subscription_data[transfer_data][destination]=acct_2"},
			{"/v1/subscription_schedules", "customer=cus_1&phases[0][items][0][price]=price_1&phases[0][transfer_data][destination]=acct_2"},
			{"/v1/subscription_schedules", "customer=cus_1&phases[0][items][0][price]=price_1&default_settings[transfer_data][destination]=acct_2"},
			{"/v1/subscription_schedules", "customer=cus_1&phases[0][items][0][price]=price_1&phases[0][on_behalf_of]=acct_2"},
			{"/v1/account_sessions", "account=acct_2&components[payouts][enabled]=true"},
			{"/v1/account_links", "account=acct_2&type=account_onboarding&refresh_url=https://x.test&return_url=https://x.test"},
		} {
			a.must(t, 403, "POST", c.path, c.body, acct)
		}
	})
}

// A payout's destination is one of the paying account's own bank accounts
// or cards (ba_, card_), not a connected account: read as one, it refused
// every payout to a named bank account on a key that sets
// allowed_accounts. The account a payout leaves is the Stripe-Account it
// is made on, which the scope checks.
func TestAttackScope_PayoutDestination(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"],"allowed_accounts":["acct_1"]}`)
		a.must(t, 200, "POST", "/v1/payouts", "amount=1000&currency=usd&destination=ba_1", Header{"Stripe-Account", "acct_1"})
		a.must(t, 403, "POST", "/v1/payouts", "amount=1000&currency=usd&destination=ba_1", Header{"Stripe-Account", "acct_2"})
		a.must(t, 403, "POST", "/v1/payouts", "amount=1000&currency=usd&destination=ba_1")
		a.must(t, 403, "POST", "/v1/transfers", "amount=1000&currency=usd&destination=acct_2", Header{"Stripe-Account", "acct_1"})
		if got := e.Spend(t, a.keyID).Total; got != 10_000_000 {
			t.Fatalf("spend %s, want the one payout's 10.00", got)
		}
	})
}

// A capped key without allow_unpriced created a webhook endpoint (a free
// write) to its own URL: Stripe then sent it every event, with the client
// secret of every confirmable payment intent in them, straight from
// Stripe, never through keybrake's redaction; a browser with the
// publishable key confirmed those intents past every cap of the key.
// Creating an endpoint, or pointing one elsewhere, is now unpriced: refused
// unless the key sets allow_unpriced. Disabling one stays free.
func TestAttackSecret_WebhookEndpoint(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"]}`)
		v := a.must(t, 403, "POST", "/v1/webhook_endpoints", "url=https://attacker.test/hook&enabled_events[]=*")
		if msg := fmt.Sprint(v); !strings.Contains(msg, "allow_unpriced") {
			t.Fatalf("refusal does not say how to allow it: %s", msg)
		}
		a.must(t, 403, "POST", "/v1/webhook_endpoints/we_1", "url=https://attacker.test/hook")
		a.must(t, 403, "POST", "/v1/webhook_endpoints/we_1", "disabled=false")
		a.must(t, 403, "POST", "/v1/webhook_endpoints/we_1", "enabled_events[]=payment_intent.created")
		for _, body := range []string{"disabled=true", "description=x&metadata[a]=b"} {
			if status, v := a.call(t, "POST", "/v1/webhook_endpoints/we_1", body); status == 403 {
				t.Fatalf("update %q refused: %v", body, v)
			}
		}
		if status, v := a.call(t, "DELETE", "/v1/webhook_endpoints/we_1", ""); status == 403 {
			t.Fatalf("delete refused: %v", v)
		}
		b := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"],"allow_unpriced":true}`)
		if status, v := b.call(t, "POST", "/v1/webhook_endpoints", "url=https://example.test/hook&enabled_events[]=*"); status == 403 {
			t.Fatalf("a key with allow_unpriced refused: %v", v)
		}
	})
}
