package stripesim

import (
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

// MaxBodyBytes is the largest request body the simulator reads.
const MaxBodyBytes = 1 << 20

// testKeyPrefix is the only kind of secret key the simulator accepts.
const testKeyPrefix = "sk_test_"

// publishableKeyPrefix is the only kind of publishable key it accepts, on the
// few endpoints a browser may call (see publishableScope).
const publishableKeyPrefix = "pk_test_"

// authenticate returns the API key of a request, sent as Bearer auth or as
// the user of Basic auth (curl -u sk_test_…:), as Stripe takes it: a test
// secret key, or a test publishable key.
func authenticate(r *http.Request) (string, *apiError) {
	auth := r.Header.Get("Authorization")
	var key string
	switch {
	case auth == "":
		return "", newError(http.StatusUnauthorized, typeInvalidRequest, "", "",
			"You did not provide an API key. You need to provide your API key in the Authorization header, "+
				"using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY'). See https://stripe.com/docs/api#authentication "+
				"for details, or we can help at https://support.stripe.com/.")
	case len(auth) > 7 && strings.EqualFold(auth[:7], "Bearer "):
		key = strings.TrimSpace(auth[7:])
	default:
		user, _, ok := r.BasicAuth()
		if !ok {
			return "", newError(http.StatusUnauthorized, typeInvalidRequest, "", "",
				"Invalid Authorization header: use Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY') or Basic auth with the key as the user name.")
		}
		key = user
	}
	prefix := testKeyPrefix
	if strings.HasPrefix(key, publishableKeyPrefix) {
		prefix = publishableKeyPrefix
	}
	if !strings.HasPrefix(key, prefix) || len(key) == len(prefix) || strings.ContainsAny(key, " \t") {
		return "", newError(http.StatusUnauthorized, typeInvalidRequest, "", "",
			"Invalid API Key provided: %s", maskKey(key))
	}
	return key, nil
}

// maskKey hides all but the prefix and the last four characters of a key,
// as Stripe's messages do.
func maskKey(key string) string {
	prefix := ""
	if i := strings.LastIndexByte(key, '_'); i >= 0 && i < 8 {
		prefix = key[:i+1]
	}
	rest := key[len(prefix):]
	if len(rest) <= 4 {
		return prefix + strings.Repeat("*", len(rest))
	}
	return prefix + strings.Repeat("*", len(rest)-4) + rest[len(rest)-4:]
}

// readForm decodes the parameters: the query string of a GET, the
// form-encoded body of a POST.
func readForm(w http.ResponseWriter, r *http.Request) (*stripe.Form, *apiError) {
	raw := r.URL.RawQuery
	if r.Method == http.MethodPost {
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, newError(http.StatusRequestEntityTooLarge, typeInvalidRequest, "", "",
				"Request body too large: at most %d bytes are accepted.", MaxBodyBytes)
		} else if err != nil {
			return nil, invalid("", "", "Could not read the request body.")
		}
		raw = string(b)
	}
	f, err := stripe.ParseForm(raw)
	if err != nil {
		return nil, invalid("", keybrake.ErrorParamOf(err), "%s", keybrake.ErrorMessage(err))
	}
	return f, nil
}
