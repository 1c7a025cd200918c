package stripesim_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	stripe "github.com/stripe/stripe-go/v82"
)

func TestValidation(t *testing.T) {
	for _, tc := range []struct {
		name, path, body  string
		status            int
		code, param, want string // want: a substring of the message
	}{
		{"ErrBadEncoding", "/v1/charges", "amount=%zz&currency=usd&source=tok_visa", 400, "", "amount", "encoding"},
		{"ErrBadBracket", "/v1/charges", "amount=2000&currency=usd&source=tok_visa&metadata[a=1", 400, "", "metadata[a", ""},
		{"ErrDuplicate", "/v1/charges", "amount=2000&amount=3000&currency=usd&source=tok_visa", 400, "", "amount", ""},
		{"ErrUnknown", "/v1/charges", form("amount", "2000", "currency", "usd", "source", "tok_visa", "foo", "1"), 400, "parameter_unknown", "foo", "Received unknown parameter: foo"},
		{"ErrUnknownNested", "/v1/charges", form("amount", "2000", "currency", "usd", "source", "tok_visa", "bar[x]", "1"), 400, "parameter_unknown", "bar", ""},
		{"ErrMissingAmount", "/v1/charges", form("currency", "usd", "source", "tok_visa"), 400, "parameter_missing", "amount", "Missing required param: amount"},
		{"ErrMissingCurrency", "/v1/charges", form("amount", "2000", "source", "tok_visa"), 400, "parameter_missing", "currency", ""},
		{"ErrMissingSource", "/v1/charges", form("amount", "2000", "currency", "usd"), 400, "parameter_missing", "source", ""},
		{"ErrNegative", "/v1/charges", form("amount", "-100", "currency", "usd", "source", "tok_visa"), 400, "parameter_invalid_integer", "amount", ""},
		{"ErrZero", "/v1/charges", form("amount", "0", "currency", "usd", "source", "tok_visa"), 400, "parameter_invalid_integer", "amount", ""},
		{"ErrFractional", "/v1/charges", form("amount", "10.50", "currency", "usd", "source", "tok_visa"), 400, "parameter_invalid_integer", "amount", "Invalid integer"},
		{"ErrEmptyAmount", "/v1/charges", form("amount", "", "currency", "usd", "source", "tok_visa"), 400, "parameter_invalid_empty", "amount", ""},
		{"ErrNineDigits", "/v1/charges", form("amount", "100000000", "currency", "usd", "source", "tok_visa"), 400, "amount_too_large", "amount", ""},
		{"ErrTooSmall", "/v1/charges", form("amount", "49", "currency", "usd", "source", "tok_visa"), 400, "amount_too_small", "amount", "0.50 usd"},
		{"ErrTooSmallJPY", "/v1/charges", form("amount", "49", "currency", "jpy", "source", "tok_visa"), 400, "amount_too_small", "amount", "50 jpy"},
		{"ErrThreeDecimal", "/v1/charges", form("amount", "1235", "currency", "kwd", "source", "tok_visa"), 400, "invalid_amount", "amount", ""},
		{"ErrUnknownCurrency", "/v1/charges", form("amount", "2000", "currency", "xyz", "source", "tok_visa"), 400, "invalid_currency", "currency", "Invalid currency: xyz"},
		{"ErrUnknownToken", "/v1/charges", form("amount", "2000", "currency", "usd", "source", "tok_nope"), 400, "resource_missing", "source", "No such token"},
		{"ErrUnknownCustomer", "/v1/charges", form("amount", "2000", "currency", "usd", "customer", "cus_nope"), 400, "resource_missing", "customer", ""},
		{"ErrMetadataNested", "/v1/charges", form("amount", "2000", "currency", "usd", "source", "tok_visa", "metadata[a][b]", "1"), 400, "", "metadata[a]", ""},
		{"ErrMetadataKeyLength", "/v1/charges", form("amount", "2000", "currency", "usd", "source", "tok_visa", "metadata["+strings.Repeat("k", 41)+"]", "1"), 400, "", "", ""},
		{"ErrCaptureNotBool", "/v1/charges", form("amount", "2000", "currency", "usd", "source", "tok_visa", "capture", "maybe"), 400, "", "capture", ""},
		{"ErrPIUnknownPM", "/v1/payment_intents", form("amount", "2000", "currency", "usd", "payment_method", "pm_nope"), 400, "resource_missing", "payment_method", ""},
		{"ErrPICaptureMethod", "/v1/payment_intents", form("amount", "2000", "currency", "usd", "capture_method", "later"), 400, "", "capture_method", ""},
		{"ErrPIConfirmWithoutPM", "/v1/payment_intents", form("amount", "2000", "currency", "usd", "confirm", "true"), 400, "payment_intent_unexpected_state", "", ""},
		{"ErrTransferNoDestination", "/v1/transfers", form("amount", "2000", "currency", "usd"), 400, "parameter_missing", "destination", ""},
		{"ErrPayoutAmount", "/v1/payouts", form("amount", "12.5", "currency", "usd"), 400, "parameter_invalid_integer", "amount", ""},
		{"ErrCustomerUnknown", "/v1/customers", form("emial", "x@example.com"), 400, "parameter_unknown", "emial", ""},
		{"ErrRefundNothing", "/v1/refunds", "", 400, "parameter_missing", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := MustEnv(t)
			r := e.do(t, "POST", tc.path, tc.body)
			wantStatus(t, r, tc.status)
			got := r.apiError(t).Error
			if got.Type != "invalid_request_error" || got.Code != tc.code || (tc.param != "" && got.Param != tc.param) ||
				!strings.Contains(got.Message, tc.want) {
				t.Fatalf("error = %+v", got)
			}
			if !strings.HasPrefix(r.header.Get("Request-Id"), "req_") {
				t.Fatalf("no Request-Id: %v", r.header)
			}
			if n := countObjects(e.sim); n != 0 {
				t.Fatalf("%d objects created by a rejected request", n)
			}
		})
	}

	t.Run("ErrBodyTooLarge", func(t *testing.T) {
		e := MustEnv(t)
		body := form("amount", "2000", "currency", "usd", "source", "tok_visa", "description", strings.Repeat("x", 1<<20))
		r := e.do(t, "POST", "/v1/charges", body)
		wantStatus(t, r, http.StatusRequestEntityTooLarge)
		if r.apiError(t).Error.Type != "invalid_request_error" || countObjects(e.sim) != 0 {
			t.Fatalf("body too large: %s", r.body)
		}
	})

	t.Run("OKUpperCaseCurrencyAndExpand", func(t *testing.T) {
		e := MustEnv(t)
		r := e.do(t, "POST", "/v1/charges", form("amount", "2000", "currency", "USD", "source", "tok_visa", "expand[]", "customer", "expand[]", "outcome"))
		wantStatus(t, r, 200)
		if r.object(t)["currency"] != "usd" {
			t.Fatalf("currency = %v", r.object(t)["currency"])
		}
	})

	t.Run("ErrUnknownURL", func(t *testing.T) {
		e := MustEnv(t)
		for _, c := range []struct{ method, path string }{{"GET", "/v1/nothing"}, {"DELETE", "/v1/charges"}, {"POST", "/v1/charges/ch_x/y"}, {"GET", "/v2/charges"}} {
			r := e.do(t, c.method, c.path, "")
			wantStatus(t, r, 404)
			r.apiError(t)
		}
	})

	t.Run("ErrSDKTyped", func(t *testing.T) {
		e := MustEnv(t)
		_, err := e.sdk().V1Charges.Create(context.Background(), &stripe.ChargeCreateParams{Amount: stripe.Int64(10),
			Currency: stripe.String("usd"), Source: &stripe.PaymentSourceSourceParams{Token: stripe.String("tok_visa")}})
		if se := stripeErr(t, err); se.HTTPStatusCode != 400 || se.Code != stripe.ErrorCodeAmountTooSmall || se.Param != "amount" {
			t.Fatalf("error = %+v", se)
		}
	})
}

func TestAuth(t *testing.T) {
	e := MustEnv(t)
	body := form("amount", "2000", "currency", "usd", "source", "tok_visa")
	for _, tc := range []struct{ name, header string }{
		{"ErrNone", ""},
		{"ErrLiveKey", "Bearer sk_live_abcdef"},
		{"ErrPublishableKey", "Bearer pk_test_abcdef"},
		{"ErrBarePrefix", "Bearer sk_test_"},
		{"ErrScheme", "Token sk_test_abcdef"},
		{"ErrBasicWrongKey", "Basic cGtfdGVzdF94eHg6"}, // pk_test_xxx:
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(t, "POST", "/v1/charges", body, "Authorization", tc.header)
			wantStatus(t, r, 401)
			if got := r.apiError(t).Error; got.Type != "invalid_request_error" {
				t.Fatalf("error = %+v", got)
			}
			if strings.Contains(string(r.body), "abcdef") {
				t.Fatalf("the key leaked into the message: %s", r.body)
			}
		})
	}
	t.Run("ErrSDK", func(t *testing.T) {
		_, err := e.client("sk_live_nope1234").V1Charges.Create(context.Background(), chargeParams(""))
		if se := stripeErr(t, err); se.HTTPStatusCode != 401 {
			t.Fatalf("error = %+v", se)
		}
	})
	if n := countObjects(e.sim); n != 0 {
		t.Fatalf("%d objects created without authentication", n)
	}
}
