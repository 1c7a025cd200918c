package stripe_test

import (
	"testing"

	"github.com/keybrake/keybrake/stripe"
)

func TestSecretRead(t *testing.T) {
	for _, tc := range []struct {
		name, method, path, query string
		secret                    bool
	}{
		{"ErrIssuingCardNumber", "GET", "/v1/issuing/cards/ic_1", "expand[]=number", true},
		{"ErrIssuingCardCVC", "GET", "/v1/issuing/cards/ic_1", "expand[0]=cvc", true},
		{"ErrIssuingCardsList", "GET", "/v1/issuing/cards", "limit=3&expand[]=data.number", true},
		{"ErrAuthorizationCard", "GET", "/v1/issuing/authorizations/iauth_1", "expand[]=card.cvc", true},
		{"ErrIssuingCardCreate", "POST", "/v1/issuing/cards", "cardholder=ich_1&currency=usd&type=virtual&expand[]=number", true},
		{"ErrTreasuryAccountNumber", "GET", "/v1/treasury/financial_accounts/fa_1", "expand[]=financial_addresses.aba.account_number", true},
		{"ErrTreasuryList", "GET", "/v1/treasury/financial_accounts", "expand[]=data.financial_addresses.aba.account_number", true},
		{"ErrAppsSecretFind", "GET", "/v1/apps/secrets/find", "name=k&scope[type]=account&expand[]=payload", true},
		{"ErrAppsSecretsList", "GET", "/v1/apps/secrets", "scope[type]=account&expand[]=data.payload", true},

		{"OKIssuingCard", "GET", "/v1/issuing/cards/ic_1", "", false},
		{"OKIssuingCardCardholder", "GET", "/v1/issuing/cards/ic_1", "expand[]=cardholder", false},
		{"OKAppsSecretFind", "GET", "/v1/apps/secrets/find", "name=k&scope[type]=account", false},
		{"OKChargeCustomer", "GET", "/v1/charges/ch_1", "expand[]=customer&expand[]=invoice", false},
		{"OKNumberParamNotExpand", "GET", "/v1/invoices", "number=INV-1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op, err := stripe.ParseOperation(tc.method, tc.path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := stripe.ParseForm(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			what, ok := stripe.SecretRead(op, f)
			if ok != tc.secret || (ok && what == "") {
				t.Fatalf("SecretRead = %q, %v; want %v", what, ok, tc.secret)
			}
		})
	}
}
