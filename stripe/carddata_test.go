package stripe_test

import (
	"testing"

	"github.com/keybrake/keybrake/stripe"
)

func TestCardData(t *testing.T) {
	for _, tc := range []struct {
		name  string
		body  string
		param string // "" when the body must pass
	}{
		{"ErrCardNumber", "amount=100&currency=usd&card[number]=4242424242424242&card[exp_month]=12", "card[number]"},
		{"ErrCardNumberFailsLuhn", "card[number]=4242424242424241", "card[number]"},
		{"ErrCVCAlone", "card[cvc]=123", "card[cvc]"},
		{"ErrCVV", "card[cvv]=123", "card[cvv]"},
		{"ErrSourceHash", "amount=100&currency=usd&source[object]=card&source[number]=4000056655665556", "source[number]"},
		{"ErrPaymentMethodData", "payment_method_data[type]=card&payment_method_data[card][number]=5555555555554444", "payment_method_data[card][number]"},
		{"ErrNetworkToken", "card[network_token][number]=4000000000000077", "card[network_token][number]"},
		{"ErrBankAccount", "bank_account[account_number]=000123456789&bank_account[routing_number]=110000000", "bank_account[account_number]"},
		{"ErrUSBankAccount", "payment_method_data[us_bank_account][account_number]=000123456789", "payment_method_data[us_bank_account][account_number]"},
		{"ErrExternalAccount", "external_account[object]=bank_account&external_account[account_number]=000123456789", "external_account[account_number]"},
		{"ErrIBAN", "sepa_debit[iban]=DE89370400440532013000", "sepa_debit[iban]"},
		{"ErrPANInMetadata", "amount=100&currency=usd&source=tok_visa&metadata[note]=4242424242424242", "metadata[note]"},
		{"ErrPANSpaced", "description=card+4242+4242+4242+4242+exp+12%2F30", "description"},
		{"ErrPANDashed", "metadata[c]=3782-822463-10005", "metadata[c]"},
		{"ErrPANInName", "metadata[4242424242424242]=x", "metadata[4242424242424242]"},
		{"ErrPANInGETQuery", "expand[]=customer&starting_after=6011111111111117", "starting_after"},
		// 16 digits in amount is not where a card number goes, but it is
		// a valid card number and Stripe refuses such an amount anyway:
		// refuse it too rather than store it.
		{"ErrPANAsAmount", "amount=4242424242424242&currency=usd", "amount"},

		{"OKToken", "amount=100&currency=usd&source=tok_visa", ""},
		{"OKPaymentMethod", "amount=100&currency=usd&payment_method=pm_card_visa&confirm=true", ""},
		{"OKInvoiceNumber", "customer=cus_1&number=2026-000042", ""},
		{"ErrPANAsInvoiceNumber", "customer=cus_1&number=4242424242424242", "number"},
		{"OKTopLevelNumber", "customer=cus_1&number=INV-0001", ""},
		{"OKEmptyCardNumber", "card[number]=", ""},
		{"OKRoutingNumberAlone", "us_bank_account[routing_number]=110000000", ""},
		{"OKOrderIDFailsLuhn", "metadata[order_id]=4242424242424241", ""},
		{"OKOrderIDNotANetwork", "metadata[order_id]=1234567812345670", ""},
		{"OKTwentyDigits", "metadata[ref]=42424242424242424242", ""},
		{"OKTwelveDigits", "metadata[ref]=424242424242", ""},
		{"OKTimestamp", "created[gte]=1764417600&limit=100", ""},
		{"OKPhone", "phone=%2B1+555-123-4567", ""},
		{"OKAmount", "amount=99999999&currency=usd", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := stripe.ParseForm(tc.body)
			if err != nil {
				t.Fatal(err)
			}
			param, found := stripe.CardData(f)
			if found != (tc.param != "") || param != tc.param {
				t.Fatalf("CardData = %q, %v; want %q", param, found, tc.param)
			}
		})
	}
}

func TestLooksLikePAN(t *testing.T) {
	for s, want := range map[string]bool{
		"4242424242424242":        true,
		"4242 4242 4242 4242":     true,
		"4242-4242-4242-4242":     true,
		"378282246310005":         true, // Amex, 15 digits
		"6011111111111117":        true,
		"2223003122003222":        true, // Mastercard 2-series
		"call 4242424242424242.":  true,
		"4242  4242 4242 4242":    false, // a double space ends the run
		"4242424242424241":        false,
		"0000000000000000":        false,
		"7992739871300008":        false, // passes Luhn, but no card network starts with 7
		"42424242424242424242":    false,
		"":                        false,
		"pi_3MtwBwLkdIwHu7ix28a3": false,
		// Runs inside identifiers: the billing worker's idempotency keys
		// are kb_<namespace>_<sha256 hex>, and hex holds Luhn-valid runs.
		"kb_acme_f4242424242424242e0": false,
		"kb_acme_4242424242424242":    false,
		"4242424242424242abc":         false,
		"card:4242424242424242;":      true,
		"(4242 4242 4242 4242)":       true,
		"x 4242424242424242 y":        true,
	} {
		if got := stripe.LooksLikePAN(s); got != want {
			t.Errorf("LooksLikePAN(%q) = %v, want %v", s, got, want)
		}
	}
}
