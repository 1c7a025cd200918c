package stripesim_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	stripe "github.com/stripe/stripe-go/v82"
)

func TestCharges(t *testing.T) {
	ctx := context.Background()

	t.Run("BankDebitPending", func(t *testing.T) {
		e := MustEnv(t)
		sc := e.sdk()
		ch, err := sc.V1Charges.Create(ctx, &stripe.ChargeCreateParams{Amount: stripe.Int64(4200), Currency: stripe.String("usd"),
			Source: &stripe.PaymentSourceSourceParams{Token: stripe.String("btok_us_verified")}})
		if err != nil {
			t.Fatal(err)
		}
		if ch.Status != "pending" || ch.Paid || !ch.Captured || ch.AmountCaptured != 4200 {
			t.Fatalf("charge = %+v", ch)
		}
		_, err = sc.V1Charges.Create(ctx, &stripe.ChargeCreateParams{Amount: stripe.Int64(4200), Currency: stripe.String("usd"),
			Capture: stripe.Bool(false), Source: &stripe.PaymentSourceSourceParams{Token: stripe.String("btok_us_verified")}})
		if serr, ok := err.(*stripe.Error); !ok || serr.Param != "capture" {
			t.Fatalf("uncaptured bank debit: %v", err)
		}
		if n := len(e.sim.GroundTruth().Charges); n != 1 {
			t.Fatalf("%d charges", n)
		}
	})

	t.Run("OK", func(t *testing.T) {
		e := MustEnv(t)
		sc := e.sdk()
		params := &stripe.ChargeCreateParams{Amount: stripe.Int64(2000), Currency: stripe.String("usd"),
			Source: &stripe.PaymentSourceSourceParams{Token: stripe.String("tok_visa")}}
		params.AddMetadata("order", "42")
		params.AddExpand("balance_transaction")
		ch, err := sc.V1Charges.Create(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(ch.ID, "ch_") || ch.Amount != 2000 || ch.Currency != "usd" || ch.Status != "succeeded" ||
			!ch.Paid || !ch.Captured || ch.AmountCaptured != 2000 || ch.Metadata["order"] != "42" ||
			ch.Created != epoch.Unix() || ch.Livemode || ch.Customer != nil || ch.Outcome == nil || ch.Outcome.Type != "authorized" {
			t.Fatalf("charge = %+v", ch)
		}
		got, err := sc.V1Charges.Retrieve(ctx, ch.ID, nil)
		if err != nil || got.ID != ch.ID || got.Amount != 2000 {
			t.Fatalf("retrieve = %+v, %v", got, err)
		}
		if gt := e.sim.GroundTruth(); len(gt.Charges) != 1 || gt.Charges[0].ID != ch.ID || gt.Charges[0].Metadata["order"] != "42" {
			t.Fatalf("ground truth = %+v", gt.Charges)
		}
	})

	t.Run("OKBasicAuthAndRequestID", func(t *testing.T) {
		e := MustEnv(t)
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/charges",
			strings.NewReader(form("amount", "500", "currency", "eur", "source", "tok_visa", "metadata[order]", "7")))
		req.SetBasicAuth(testKey, "")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		res, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Request-Id"), "req_") ||
			res.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("status %d, headers %v", res.StatusCode, res.Header)
		}
	})

	t.Run("OKCustomerDefaultSource", func(t *testing.T) {
		e := MustEnv(t)
		sc := e.sdk()
		cus, err := sc.V1Customers.Create(ctx, &stripe.CustomerCreateParams{Email: stripe.String("a@example.com")})
		if err != nil {
			t.Fatal(err)
		}
		got, err := sc.V1Customers.Retrieve(ctx, cus.ID, nil)
		if err != nil || !strings.HasPrefix(got.ID, "cus_") || got.Email != "a@example.com" {
			t.Fatalf("customer = %+v, %v", got, err)
		}
		ch, err := sc.V1Charges.Create(ctx, &stripe.ChargeCreateParams{Amount: stripe.Int64(1000),
			Currency: stripe.String("usd"), Customer: stripe.String(cus.ID)})
		if err != nil || ch.Customer == nil || ch.Customer.ID != cus.ID || ch.Status != "succeeded" {
			t.Fatalf("charge = %+v, %v", ch, err)
		}
	})

	t.Run("OKZeroDecimal", func(t *testing.T) {
		e := MustEnv(t)
		r := e.do(t, "POST", "/v1/charges", form("amount", "50", "currency", "jpy", "source", "tok_visa"))
		wantStatus(t, r, 200)
		r = e.do(t, "POST", "/v1/charges", form("amount", "1230", "currency", "kwd", "source", "tok_visa"))
		wantStatus(t, r, 200)
	})

	t.Run("ErrDeclined", func(t *testing.T) {
		for _, tc := range []struct{ token, decline string }{
			{"tok_chargeDeclined", "generic_decline"},
			{"tok_chargeDeclinedInsufficientFunds", "insufficient_funds"},
		} {
			e := MustEnv(t)
			_, err := e.sdk().V1Charges.Create(ctx, &stripe.ChargeCreateParams{Amount: stripe.Int64(2000),
				Currency: stripe.String("usd"), Source: &stripe.PaymentSourceSourceParams{Token: stripe.String(tc.token)}})
			se := stripeErr(t, err)
			if se.HTTPStatusCode != 402 || se.Type != stripe.ErrorTypeCard || se.Code != stripe.ErrorCodeCardDeclined ||
				string(se.DeclineCode) != tc.decline || !strings.HasPrefix(se.ChargeID, "ch_") {
				t.Fatalf("%s: error = %+v", tc.token, se)
			}
			gt := e.sim.GroundTruth()
			if len(gt.Charges) != 1 || gt.Charges[0].ID != se.ChargeID || gt.Charges[0].Status != "failed" ||
				gt.Charges[0].Paid || gt.Charges[0].FailureCode != "card_declined" {
				t.Fatalf("%s: ground truth = %+v", tc.token, gt.Charges)
			}
			ch, err := e.sdk().V1Charges.Retrieve(ctx, se.ChargeID, nil)
			if err != nil || ch.Status != "failed" || ch.Outcome.Reason != tc.decline {
				t.Fatalf("%s: retrieve = %+v, %v", tc.token, ch, err)
			}
		}
	})

	t.Run("ErrNotFound", func(t *testing.T) {
		e := MustEnv(t)
		_, err := e.sdk().V1Charges.Retrieve(ctx, "ch_missing", nil)
		se := stripeErr(t, err)
		if se.HTTPStatusCode != 404 || se.Code != stripe.ErrorCodeResourceMissing || se.Type != stripe.ErrorTypeInvalidRequest {
			t.Fatalf("error = %+v", se)
		}
	})

	t.Run("ErrOtherAccount", func(t *testing.T) {
		e := MustEnv(t)
		r := e.do(t, "POST", "/v1/charges", form("amount", "500", "currency", "usd", "source", "tok_visa"), "Stripe-Account", "acct_1")
		wantStatus(t, r, 200)
		id := r.object(t)["id"].(string)
		if gt := e.sim.GroundTruth(); gt.Charges[0].Account != "acct_1" {
			t.Fatalf("account = %q", gt.Charges[0].Account)
		}
		wantStatus(t, e.do(t, "GET", "/v1/charges/"+id, "", "Stripe-Account", "acct_1"), 200)
		wantStatus(t, e.do(t, "GET", "/v1/charges/"+id, ""), 404)
		wantStatus(t, e.do(t, "GET", "/v1/charges/"+id, "", "Authorization", "Bearer sk_test_other", "Stripe-Account", "acct_1"), 404)
	})
}

// mustCharges creates n charges one simulated second apart, oldest first,
// with metadata[n] set to their index.
func mustCharges(t *testing.T, e *env, n int, extra ...string) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		body := form(append([]string{"amount", "1000", "currency", "usd", "source", "tok_visa", "metadata[n]", fmt.Sprint(i)}, extra...)...)
		r := e.do(t, "POST", "/v1/charges", body)
		wantStatus(t, r, 200)
		ids[i] = r.object(t)["id"].(string)
		e.sim.Advance(time.Second)
	}
	return ids
}

func TestListCharges(t *testing.T) {
	ctx := context.Background()

	t.Run("OKPaginated", func(t *testing.T) {
		e := MustEnv(t)
		ids := mustCharges(t, e, 25)
		var got []string
		params := &stripe.ChargeListParams{}
		params.Limit = stripe.Int64(7)
		for ch, err := range e.sdk().V1Charges.List(ctx, params) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ch.ID)
		}
		if len(got) != 25 {
			t.Fatalf("listed %d charges, want 25", len(got))
		}
		for i, id := range got {
			if id != ids[24-i] {
				t.Fatalf("item %d = %s, want %s (newest first)", i, id, ids[24-i])
			}
		}
	})

	t.Run("OKPageShape", func(t *testing.T) {
		e := MustEnv(t)
		ids := mustCharges(t, e, 5)
		r := e.do(t, "GET", "/v1/charges?limit=2&starting_after="+ids[3], "")
		wantStatus(t, r, 200)
		page := r.object(t)
		data := page["data"].([]any)
		if page["object"] != "list" || page["has_more"] != true || len(data) != 2 ||
			data[0].(map[string]any)["id"] != ids[2] || data[1].(map[string]any)["id"] != ids[1] {
			t.Fatalf("page = %s", r.body)
		}
		r = e.do(t, "GET", "/v1/charges?limit=2&ending_before="+ids[0], "")
		data = r.object(t)["data"].([]any)
		if len(data) != 2 || data[0].(map[string]any)["id"] != ids[2] || data[1].(map[string]any)["id"] != ids[1] {
			t.Fatalf("ending_before page = %s", r.body)
		}
		r = e.do(t, "GET", "/v1/charges", "")
		if p := r.object(t); len(p["data"].([]any)) != 5 || p["has_more"] != false {
			t.Fatalf("default page = %s", r.body)
		}
	})

	t.Run("OKCreatedAndCustomer", func(t *testing.T) {
		e := MustEnv(t)
		ids := mustCharges(t, e, 6)
		base := epoch.Unix()
		count := func(query string) int {
			r := e.do(t, "GET", "/v1/charges?"+query, "")
			wantStatus(t, r, 200)
			return len(r.object(t)["data"].([]any))
		}
		for query, want := range map[string]int{
			fmt.Sprintf("created[gte]=%d", base+2):                         4,
			fmt.Sprintf("created[gt]=%d", base+2):                          3,
			fmt.Sprintf("created[lt]=%d", base+2):                          2,
			fmt.Sprintf("created[lte]=%d&created[gte]=%d", base+3, base+1): 3,
			fmt.Sprintf("created=%d", base+4):                              1,
		} {
			if got := count(query); got != want {
				t.Errorf("%s: %d charges, want %d", query, got, want)
			}
		}
		params := &stripe.ChargeListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: base + 5}}
		n := 0
		for ch, err := range e.sdk().V1Charges.List(ctx, params) {
			if err != nil || ch.ID != ids[5] {
				t.Fatalf("sdk created filter: %v %v", ch, err)
			}
			n++
		}
		if n != 1 {
			t.Fatalf("sdk created filter: %d charges", n)
		}

		cus := e.do(t, "POST", "/v1/customers", "").object(t)["id"].(string)
		wantStatus(t, e.do(t, "POST", "/v1/charges", form("amount", "1000", "currency", "usd", "customer", cus)), 200)
		if got := count("customer=" + cus); got != 1 {
			t.Fatalf("customer filter: %d charges", got)
		}
	})

	t.Run("ErrLimit", func(t *testing.T) {
		e := MustEnv(t)
		for _, q := range []string{"limit=0", "limit=101", "limit=x", "created[foo]=1", "starting_after=ch_nope", "bogus=1"} {
			r := e.do(t, "GET", "/v1/charges?"+q, "")
			wantStatus(t, r, 400)
			r.apiError(t)
		}
	})
}

func TestSearchCharges(t *testing.T) {
	ctx := context.Background()
	e := MustEnv(t)
	mustCharges(t, e, 3, "metadata[order]", "A")
	want := mustCharges(t, e, 1, "metadata[order]", "B")[0]

	t.Run("OK", func(t *testing.T) {
		var got []string
		for ch, err := range e.sdk().V1Charges.Search(ctx, &stripe.ChargeSearchParams{
			SearchParams: stripe.SearchParams{Query: "metadata['order']:'B'"}}) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ch.ID)
		}
		if len(got) != 1 || got[0] != want {
			t.Fatalf("search = %v, want [%s]", got, want)
		}
	})

	t.Run("OKShapeAndPages", func(t *testing.T) {
		r := e.do(t, "GET", "/v1/charges/search?"+form("query", `metadata["order"]:"A" AND amount>=1000`, "limit", "2"), "")
		wantStatus(t, r, 200)
		res := r.object(t)
		if res["object"] != "search_result" || res["has_more"] != true || len(res["data"].([]any)) != 2 || res["next_page"] == nil {
			t.Fatalf("search result = %s", r.body)
		}
		r = e.do(t, "GET", "/v1/charges/search?"+form("query", `metadata['order']:'A'`, "limit", "2", "page", res["next_page"].(string)), "")
		if res := r.object(t); len(res["data"].([]any)) != 1 || res["has_more"] != false {
			t.Fatalf("second page = %s", r.body)
		}
		n := 0
		for _, err := range e.sdk().V1Charges.Search(ctx, &stripe.ChargeSearchParams{
			SearchParams: stripe.SearchParams{Query: "metadata['order']:'A'", Limit: stripe.Int64(1)}}) {
			if err != nil {
				t.Fatal(err)
			}
			n++
		}
		if n != 3 {
			t.Fatalf("sdk paged search: %d results, want 3", n)
		}
	})

	t.Run("ErrQuery", func(t *testing.T) {
		for _, q := range []string{"", "metadata['order']", "nonsense:'x'", "status>'x'"} {
			r := e.do(t, "GET", "/v1/charges/search?"+form("query", q), "")
			wantStatus(t, r, 400)
			r.apiError(t)
		}
	})
}

func TestUpdateCharge(t *testing.T) {
	e := MustEnv(t)
	ch := e.do(t, "POST", "/v1/charges", "amount=500&currency=usd&source=tok_visa&metadata[a]=1&metadata[b]=2").object(t)
	id := ch["id"].(string)
	up := e.do(t, "POST", "/v1/charges/"+id, "description=x&metadata[a]=&metadata[c]=3").object(t)
	md := up["metadata"].(map[string]any)
	if up["description"] != "x" || md["a"] != nil || md["b"] != "2" || md["c"] != "3" || up["amount"] != float64(500) {
		t.Fatalf("update = %v", up)
	}
	if cleared := e.do(t, "POST", "/v1/charges/"+id, "metadata=").object(t); len(cleared["metadata"].(map[string]any)) != 0 {
		t.Fatalf("metadata= left %v", cleared["metadata"])
	}
	if r := e.do(t, "POST", "/v1/charges/"+id, "amount=100"); r.status != 400 || r.apiError(t).Error.Param != "amount" {
		t.Fatalf("amount update: %d %s", r.status, r.body)
	}
	if r := e.do(t, "POST", "/v1/charges/ch_missing", "description=x"); r.status != 404 {
		t.Fatalf("missing charge: %d %s", r.status, r.body)
	}
}
