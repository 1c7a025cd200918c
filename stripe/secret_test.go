package stripe_test

import (
	"strings"
	"testing"

	"github.com/keybrake/keybrake/stripe"
)

func TestSecretRead(t *testing.T) {
	t.Run("Secret", func(t *testing.T) {
		for _, tt := range []struct {
			method, path, params string
			what                 string // a word the answer must contain
		}{
			{"GET", "/v1/issuing/cards/ic_1", "expand[]=number", "card number"},
			{"GET", "/v1/issuing/cards/ic_1", "expand[]=cvc", "CVC"},
			{"GET", "/v1/issuing/cards/ic_1", "expand[0]=cvc&expand[1]=number", "CVC"},
			{"GET", "/v1/issuing/cards/ic_1", "expand=number", "card number"},
			{"GET", "/v1/issuing/cards", "expand[]=data.number", "card number"},
			{"GET", "/v1/issuing/cards", "expand[]=data.cvc", "CVC"},
			{"GET", "/v1/issuing/authorizations/iauth_1", "expand[]=card.number", "card number"},
			{"POST", "/v1/issuing/cards", "type=virtual&expand[]=number", "card number"},
			{"GET", "/v1/treasury/financial_accounts/fa_1", "expand[]=financial_addresses.aba.account_number", "bank account number"},
			{"GET", "/v1/treasury/financial_accounts", "expand[]=data.financial_addresses.aba.account_number", "bank account number"},
			{"GET", "/v1/financial_connections/accounts/fca_1", "expand[]=account_numbers", "bank account numbers"},
			{"GET", "/v1/apps/secrets/find", "name=k&scope[type]=account&expand[]=payload", "secret"},
			{"GET", "/v1/apps/secrets", "scope[type]=account&expand[]=data.payload", "secret"},
			{"GET", "/v1/identity/verification_sessions/vs_1", "expand[]=verified_outputs.id_number", "identity number"},
			{"GET", "/v1/identity/verification_reports/vr_1", "expand[]=document.dob", "date of birth"},
			{"POST", "/v1/ephemeral_keys", "customer=cus_1", "ephemeral key"},
			{"POST", "/v1/ephemeral_keys", "issuing_card=ic_1&nonce=n", "ephemeral key"},
			{"POST", "/v1/accounts/acct_1/login_links", "", "login link"},
			{"POST", "/v1/account_links", "account=acct_1&type=account_onboarding", "onboarding link"},
			{"POST", "/v1/account_sessions", "account=acct_1", "client secret"},
			{"POST", "/v1/billing_portal/sessions", "customer=cus_1", "portal"},
			{"POST", "/v1/customer_sessions", "customer=cus_1", "client secret"},
			{"POST", "/v1/terminal/connection_tokens", "", "connection token"},
			{"POST", "/v1/forwarding/requests", "payment_method=pm_1", "card details"},
		} {
			op := MustParseOperation(t, tt.method, tt.path)
			what, ok := stripe.SecretRead(op, MustParseForm(t, tt.params))
			if !ok || !strings.Contains(what, tt.what) {
				t.Errorf("%s %s %q: SecretRead = %q, %v; want %q", tt.method, tt.path, tt.params, what, ok, tt.what)
			}
		}
	})

	t.Run("NoSecret", func(t *testing.T) {
		for _, tt := range []struct{ method, path, params string }{
			{"GET", "/v1/issuing/cards/ic_1", ""},
			{"GET", "/v1/issuing/cards/ic_1", "expand[]=cardholder"},
			{"GET", "/v1/issuing/cards", "expand[]=data.cardholder&limit=3"},
			{"GET", "/v1/treasury/financial_accounts/fa_1", "expand[]=financial_addresses"},
			{"GET", "/v1/apps/secrets/find", "name=k&scope[type]=account"},
			{"GET", "/v1/ephemeral_keys/ephkey_1", ""},
			{"DELETE", "/v1/ephemeral_keys/ephkey_1", ""},
			{"GET", "/v1/customers/cus_1", "expand[]=default_source"},
			{"POST", "/v1/customers", "email=a@b"},
			{"POST", "/v1/apps/secrets", "name=k&payload=s&scope[type]=account"},
		} {
			op := MustParseOperation(t, tt.method, tt.path)
			if what, ok := stripe.SecretRead(op, MustParseForm(t, tt.params)); ok {
				t.Errorf("%s %s %q: SecretRead = %q, want none", tt.method, tt.path, tt.params, what)
			}
		}
	})

	t.Run("NilForm", func(t *testing.T) {
		if _, ok := stripe.SecretRead(MustParseOperation(t, "GET", "/v1/issuing/cards/ic_1"), nil); ok {
			t.Fatal("a nil form reveals nothing")
		}
		if _, ok := stripe.SecretRead(MustParseOperation(t, "POST", "/v1/ephemeral_keys"), nil); !ok {
			t.Fatal("ephemeral_keys.create reveals a key whatever the body")
		}
	})
}
