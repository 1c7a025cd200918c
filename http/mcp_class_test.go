package http_test

import (
	"testing"

	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/stripe"
)

// Each MCP tool's declared class, which decides whether keys without
// allow_unpriced see it, is the class keybrake's money model gives the
// request the tool builds: the table cannot drift from stripe.Classify.
func TestMCPToolClassesMatchMoneyModel(t *testing.T) {
	args := map[string]string{
		"create_customer":         `{"name":"Jo","metadata":{"a":"b"}}`,
		"list_customers":          `{}`,
		"create_product":          `{"name":"T"}`,
		"list_products":           `{}`,
		"create_price":            `{"product":"prod_1","unit_amount":100,"currency":"usd"}`,
		"list_prices":             `{}`,
		"create_payment_link":     `{"price":"price_1","quantity":1}`,
		"create_invoice":          `{"customer":"cus_1"}`,
		"create_invoice_item":     `{"customer":"cus_1","invoice":"in_1","amount":100,"currency":"usd"}`,
		"finalize_invoice":        `{"invoice":"in_1"}`,
		"retrieve_balance":        `{}`,
		"create_refund":           `{"payment_intent":"pi_1","amount":100}`,
		"list_payment_intents":    `{}`,
		"search_stripe_resources": `{"resource":"charges","query":"amount>1"}`,
	}
	for _, c := range khttp.MCPToolRequests(args) {
		if c.Err != nil {
			t.Fatalf("%s: %v", c.Name, c.Err)
		}
		op, err := stripe.ParseOperation(c.Method, c.Path)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		form, err := stripe.ParseForm(c.Body)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if got := stripe.Classify(op, form); got != c.Declared {
			t.Errorf("%s (%s %s %s): declared %s, classified %s", c.Name, c.Method, c.Path, c.Body, c.Declared, got)
		}
	}
}
