package http_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
)

// The decision matrix: each case is one request on a key with a policy,
// and the status keybrake must answer. Refusals forward nothing.
func TestProxy_DecisionMatrix(t *testing.T) {
	e := MustOpen(t)
	cus := mustCustomer(t, e)
	for _, tc := range []struct {
		name   string
		policy string
		body   string
		path   string
		status int
		msg    string
	}{
		{"OKOperationName", `{"allowed_endpoints":["charges.create"],"daily_usd_cap":100}`, "amount=100&currency=usd&source=tok_visa", "/v1/charges", 200, ""},
		{"ErrOperationNotAllowed", `{"allowed_endpoints":["charges.retrieve"],"daily_usd_cap":100}`, "amount=100&currency=usd&source=tok_visa", "/v1/charges", 403, "charges.create"},
		{"ErrPrefixBoundary", `{"allowed_endpoints":["/v1/charge"],"daily_usd_cap":100}`, "amount=100&currency=usd&source=tok_visa", "/v1/charges", 403, "charges.create"},
		{"ErrPerRequestCap", `{"per_request_usd_cap":5}`, "amount=501&currency=usd&source=tok_visa", "/v1/charges", 429, "per-request cap of $5.00"},
		{"OKPerRequestCapExact", `{"per_request_usd_cap":5}`, "amount=500&currency=usd&source=tok_visa", "/v1/charges", 200, ""},
		{"ErrTotalCap", `{"total_usd_cap":1}`, "amount=101&currency=usd&source=tok_visa", "/v1/charges", 429, "total cap"},
		{"ErrMonthlyCap", `{"monthly_usd_cap":1}`, "amount=101&currency=usd&source=tok_visa", "/v1/charges", 429, "monthly cap"},
		{"ErrCurrencyScope", `{"allowed_currencies":["usd"]}`, "amount=100&currency=eur&source=tok_visa", "/v1/charges", 403, "EUR"},
		{"OKEURConverted", `{"allowed_currencies":["eur"],"daily_usd_cap":"1.08"}`, "amount=100&currency=eur&source=tok_visa", "/v1/charges", 200, ""},
		{"ErrEURConvertedOver", `{"daily_usd_cap":"1.07"}`, "amount=100&currency=eur&source=tok_visa", "/v1/charges", 429, "daily cap"},
		{"OKJPYZeroDecimal", `{"daily_usd_cap":"6.70"}`, "amount=1000&currency=jpy&source=tok_visa", "/v1/charges", 200, ""},
		{"ErrJPYZeroDecimalOver", `{"daily_usd_cap":"6.69"}`, "amount=1000&currency=jpy&source=tok_visa", "/v1/charges", 429, "daily cap"},
		{"OKKWDThreeDecimal", `{"daily_usd_cap":"3.25"}`, "amount=1000&currency=kwd&source=tok_visa", "/v1/charges", 200, ""},
		{"ErrNoRateOnCappedKey", `{"daily_usd_cap":100}`, "amount=1000&currency=gbp&source=tok_visa", "/v1/charges", 403, "exchange rate"},
		{"OKNoRateOnUncappedKey", `{}`, "amount=1000&currency=gbp&source=tok_visa", "/v1/charges", 200, ""},
		{"ErrCurrencyScopeUncappedNoRate", `{"allowed_currencies":["usd"]}`, "amount=1000&currency=gbp&source=tok_visa", "/v1/charges", 403, "GBP"},
		{"ErrCustomerScope", `{"allowed_customers":["cus_allowed"]}`, "amount=100&currency=usd&customer=" + cus, "/v1/charges", 403, cus},
		{"ErrCustomerRequired", `{"allowed_customers":["cus_allowed"]}`, "amount=100&currency=usd&source=tok_visa", "/v1/charges", 403, "customer parameter"},
		{"OKCustomerScope", `{"allowed_customers":["` + cus + `"]}`, "amount=100&currency=usd&customer=" + cus, "/v1/charges", 200, ""},
		{"ErrUnpriced", `{"allowed_endpoints":["*"],"daily_usd_cap":100}`, "customer=" + cus, "/v1/subscriptions", 403, "cannot price subscriptions.create"},
		{"ErrAccountScope", `{"allowed_accounts":["acct_1"]}`, "amount=100&currency=usd&source=tok_visa", "/v1/charges", 403, "platform account"},
		{"OKWriteNotCounted", `{"daily_usd_cap":0}`, "email=a%40b.c", "/v1/customers", 200, ""},
		{"ErrZeroCap", `{"daily_usd_cap":0}`, "amount=100&currency=usd&source=tok_visa", "/v1/charges", 429, "daily cap of $0.00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.Sim.GroundTruth().Charges)
			_, secret := e.CreateKey(t, tc.policy)
			resp, body := e.Do(t, "POST", "/stripe"+tc.path, tc.body, map[string]string{"Authorization": "Bearer " + secret})
			if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.msg) {
				t.Fatalf("status %d, want %d with %q: %s", resp.StatusCode, tc.status, tc.msg, body)
			}
			if tc.status != 200 && len(e.Sim.GroundTruth().Charges) != before {
				t.Fatal("a refused request reached the upstream")
			}
		})
	}
}

func mustCustomer(tb testing.TB, e *Env) string {
	tb.Helper()
	_, secret := e.CreateKey(tb, `{}`)
	c, err := e.Stripe(secret).V1Customers.Create(context.Background(), &stripego.CustomerCreateParams{Email: stripego.String("a@example.com")})
	if err != nil {
		tb.Fatal(err)
	}
	return c.ID
}

// An intent's amount is held when it is created, confirmed or not: its
// client secret could confirm it without keybrake. Confirming it settles
// against the hold; confirming an intent keybrake holds nothing on (made
// outside keybrake) is priced by looking it up upstream.
func TestProxy_PricedByLookup(t *testing.T) {
	e := MustOpen(t)
	id, secret := e.CreateKey(t, `{"daily_usd_cap":30}`)
	sc := e.Stripe(secret)
	ctx := context.Background()

	pi, err := sc.V1PaymentIntents.Create(ctx, &stripego.PaymentIntentCreateParams{Amount: stripego.Int64(2000), Currency: stripego.String("usd"), PaymentMethod: stripego.String("pm_card_visa")})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.Spend(t, id); got.Day != 20*keybrake.MicrosPerUSD || got.Held != 20*keybrake.MicrosPerUSD {
		t.Fatalf("an unconfirmed intent counted %s (held %s), want 20.00 held", got.Day, got.Held)
	}
	if _, err := sc.V1PaymentIntents.Confirm(ctx, pi.ID, nil); err != nil {
		t.Fatal(err)
	}
	if got := e.Spend(t, id); got.Day != 20*keybrake.MicrosPerUSD || got.Held != 0 {
		t.Fatalf("after confirm: %s (held %s), want 20.00 settled", got.Day, got.Held)
	}
	t.Run("ErrCreateOverCap", func(t *testing.T) {
		_, err := sc.V1PaymentIntents.Create(ctx, &stripego.PaymentIntentCreateParams{Amount: stripego.Int64(1500), Currency: stripego.String("usd"), PaymentMethod: stripego.String("pm_card_visa")})
		StripeErr(t, err, 429)
	})
	t.Run("ErrConfirmOutsideIntentOverCap", func(t *testing.T) {
		pi2, err := e.Direct().V1PaymentIntents.Create(ctx, &stripego.PaymentIntentCreateParams{Amount: stripego.Int64(1500), Currency: stripego.String("usd"), PaymentMethod: stripego.String("pm_card_visa")})
		if err != nil {
			t.Fatal(err)
		}
		_, err = sc.V1PaymentIntents.Confirm(ctx, pi2.ID, nil)
		se := StripeErr(t, err, 429)
		if !strings.Contains(se.Msg, "$15.00") {
			t.Fatalf("message %q does not price the looked-up intent", se.Msg)
		}
	})
	t.Run("OKConfirmInCreate", func(t *testing.T) {
		_, err := sc.V1PaymentIntents.Create(ctx, &stripego.PaymentIntentCreateParams{Amount: stripego.Int64(500), Currency: stripego.String("usd"), PaymentMethod: stripego.String("pm_card_visa"), Confirm: stripego.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		if got := e.Spend(t, id).Day; got != 25*keybrake.MicrosPerUSD {
			t.Fatalf("spend %s, want 25.00", got)
		}
	})
	t.Run("ErrFullRefundOverCap", func(t *testing.T) {
		// Refunding all of the $20.00 intent would take the day to $45.00.
		_, err := sc.V1Refunds.Create(ctx, &stripego.RefundCreateParams{PaymentIntent: stripego.String(pi.ID)})
		se := StripeErr(t, err, 429)
		if !strings.Contains(se.Msg, "$20.00") {
			t.Fatalf("message %q does not price the full refundable amount", se.Msg)
		}
	})
	t.Run("OKPartialRefund", func(t *testing.T) {
		if _, err := sc.V1Refunds.Create(ctx, &stripego.RefundCreateParams{PaymentIntent: stripego.String(pi.ID), Amount: stripego.Int64(500)}); err != nil {
			t.Fatal(err)
		}
		if got := e.Spend(t, id).Day; got != 30*keybrake.MicrosPerUSD {
			t.Fatalf("spend %s, want 30.00", got)
		}
	})
}

// The upstream secret never appears in a response, the audit log, the
// metrics or the logs, whatever happens.
func TestProxy_SecretNeverLeaks(t *testing.T) {
	var logs bytes.Buffer
	e := MustOpen(t, func(s *khttp.Server) {
		s.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	id, secret := e.CreateKey(t, `{"daily_usd_cap":10}`)
	h := map[string]string{"Authorization": "Bearer " + secret}
	var all []byte
	for _, req := range [][2]string{
		{"/stripe/v1/charges", "amount=100&currency=usd&source=tok_visa"},
		{"/stripe/v1/charges", "amount=100&currency=usd&source=tok_chargeDeclined"},
		{"/stripe/v1/charges", "amount=100000&currency=usd&source=tok_visa"},
		{"/stripe/v1/charges", "amount=bad"},
		{"/stripe/v1/payment_intents/pi_missing/confirm", ""},
	} {
		_, b := e.Do(t, "POST", req[0], req[1], h)
		all = append(all, b...)
	}
	e.Sim.ClearFaults()
	_, b := e.Admin(t, "GET", "/vault/keys/"+id+"/events?limit=100", "")
	all = append(all, b...)
	resp, err := e.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(m, []byte("keybrake_requests_total")) {
		t.Fatalf("metrics lack keybrake_requests_total")
	}
	all = append(all, m...)
	e.Server.FlushAudit()
	all = append(all, logs.Bytes()...)
	NoLeak(t, all)
}
