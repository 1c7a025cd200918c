package stripesim

import (
	"net/http"
	"strings"
)

// publishableScope authorizes a request made with a publishable key, which
// Stripe lets a browser use on a PaymentIntent it holds the client_secret
// of: POST /v1/payment_intents/{id}/confirm and GET
// /v1/payment_intents/{id}. It returns the scope of the account that owns
// the PaymentIntent, which the request then acts in, as if made with that
// account's secret key. Every other endpoint answers 401; a missing
// client_secret 400 parameter_missing; one that does not match 400.
func (s *Server) publishableScope(method, path string, c *call) (string, *apiError) {
	if !publishableEndpoint(method, path) {
		return "", newError(http.StatusUnauthorized, typeInvalidRequest, "", "",
			"This API call cannot be made with a publishable API key. Please use a secret API key. "+
				"You can find a list of your API keys at https://dashboard.stripe.com/account/apikeys.")
	}
	if c.form.Has("amount_to_confirm") {
		return "", invalid("", "amount_to_confirm", "amount_to_confirm can only be set with a secret key.")
	}
	secret, aerr := required(c.form, "client_secret")
	if aerr != nil {
		return "", aerr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pi := s.st.paymentIntents[c.id]
	if pi == nil || pi.Account != c.account {
		return "", errNoSuch(http.StatusNotFound, "payment_intent", "id", c.id)
	}
	if aerr := checkClientSecret(pi, secret); aerr != nil {
		return "", aerr
	}
	return s.st.Owners[pi.ID], nil
}

// publishableEndpoint reports whether a publishable key may call method
// path.
func publishableEndpoint(method, path string) bool {
	parts := strings.Split(strings.TrimPrefix(path, "/v1/"), "/")
	if len(parts) < 2 || parts[0] != "payment_intents" {
		return false
	}
	return (len(parts) == 2 && method == http.MethodGet) ||
		(len(parts) == 3 && method == http.MethodPost && parts[2] == "confirm")
}

// checkClientSecret answers 400 unless secret is the PaymentIntent's.
func checkClientSecret(pi *PaymentIntent, secret string) *apiError {
	if secret != pi.ClientSecret {
		return invalid("", "client_secret",
			"The client_secret provided does not match the client_secret associated with the PaymentIntent.")
	}
	return nil
}
