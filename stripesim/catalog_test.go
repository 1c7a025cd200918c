package stripesim_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	stripe "github.com/stripe/stripe-go/v82"

	"github.com/keybrake/keybrake/stripesim"
)

func TestCatalog(t *testing.T) {
	ctx := context.Background()

	t.Run("OKProductsAndPrices", func(t *testing.T) {
		e := MustEnv(t)
		sc := e.sdk()
		prod, err := sc.V1Products.Create(ctx, &stripe.ProductCreateParams{Name: stripe.String("T-shirt"), Description: stripe.String("cotton")})
		if err != nil || !strings.HasPrefix(prod.ID, "prod_") || !prod.Active || prod.Name != "T-shirt" || prod.Created != epoch.Unix() {
			t.Fatalf("product = %+v, %v", prod, err)
		}
		if got, err := sc.V1Products.Retrieve(ctx, prod.ID, nil); err != nil || got.Description != "cotton" {
			t.Fatalf("retrieve = %+v, %v", got, err)
		}
		price, err := sc.V1Prices.Create(ctx, &stripe.PriceCreateParams{Product: stripe.String(prod.ID), UnitAmount: stripe.Int64(2000), Currency: stripe.String("USD")})
		if err != nil || price.UnitAmount != 2000 || price.Currency != "usd" || price.Type != stripe.PriceTypeOneTime || price.Product.ID != prod.ID ||
			price.Recurring != nil || price.UnitAmountDecimal != 2000 || price.BillingScheme != stripe.PriceBillingSchemePerUnit {
			t.Fatalf("price = %+v, %v", price, err)
		}
		monthly, err := sc.V1Prices.Create(ctx, &stripe.PriceCreateParams{UnitAmount: stripe.Int64(900), Currency: stripe.String("eur"),
			ProductData: &stripe.PriceCreateProductDataParams{Name: stripe.String("Plan")},
			Recurring:   &stripe.PriceCreateRecurringParams{Interval: stripe.String("month"), IntervalCount: stripe.Int64(3)}})
		if err != nil || monthly.Type != stripe.PriceTypeRecurring || monthly.Recurring.Interval != "month" || monthly.Recurring.IntervalCount != 3 ||
			monthly.Recurring.UsageType != "licensed" || monthly.Product.ID == prod.ID {
			t.Fatalf("recurring price = %+v, %v", monthly, err)
		}
		free, err := sc.V1Prices.Create(ctx, &stripe.PriceCreateParams{Product: stripe.String(prod.ID), UnitAmount: stripe.Int64(0), Currency: stripe.String("usd")})
		if err != nil || free.UnitAmount != 0 {
			t.Fatalf("free price = %+v, %v", free, err)
		}
		var ids []string
		for p, err := range sc.V1Prices.List(ctx, &stripe.PriceListParams{Product: stripe.String(prod.ID)}) {
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, p.ID)
		}
		if len(ids) != 2 || ids[0] != free.ID || ids[1] != price.ID {
			t.Fatalf("prices of %s = %v", prod.ID, ids)
		}
		n := 0
		for _, err := range sc.V1Products.List(ctx, nil) {
			if err != nil {
				t.Fatal(err)
			}
			n++
		}
		if n != 2 {
			t.Fatalf("%d products, want 2 (one from product_data)", n)
		}
		// Another API key sees none of it.
		if _, err := e.client("sk_test_other_key_123").V1Prices.Retrieve(ctx, price.ID, nil); stripeErr(t, err).HTTPStatusCode != 404 {
			t.Fatalf("another key retrieved the price: %v", err)
		}
		// A product with default_price_data gets its price.
		r := e.do(t, "POST", "/v1/products", form("name", "Mug", "id", "mug", "default_price_data[currency]", "usd", "default_price_data[unit_amount]", "1200"))
		wantStatus(t, r, 200)
		if o := r.object(t); o["id"] != "mug" || o["default_price"] == nil {
			t.Fatalf("product with default price = %v", o)
		}
		if gt := e.sim.GroundTruth(); len(gt.Products) != 3 || len(gt.Prices) != 4 || gt.Prices[3].UnitAmount != 1200 || gt.Prices[3].Product != "mug" {
			t.Fatalf("ground truth: %d products, %d prices", len(gt.Products), len(gt.Prices))
		}
	})

	t.Run("ErrInvalid", func(t *testing.T) {
		e := MustEnv(t)
		prod := e.do(t, "POST", "/v1/products", form("name", "Hat")).object(t)["id"].(string)
		before := countCatalog(e.sim)
		for name, tc := range map[string]struct {
			path, body, code, param string
		}{
			"ProductNoName":         {"/v1/products", form("description", "x"), "parameter_missing", "name"},
			"ProductUnknownParam":   {"/v1/products", form("name", "x", "price", "1"), "parameter_unknown", "price"},
			"ProductIDTaken":        {"/v1/products", form("name", "x", "id", prod), "resource_already_exists", "id"},
			"DefaultPriceNoAmount":  {"/v1/products", form("name", "x", "default_price_data[currency]", "usd"), "parameter_missing", "default_price_data[unit_amount]"},
			"PriceNoProduct":        {"/v1/prices", form("currency", "usd", "unit_amount", "100"), "parameter_missing", "product"},
			"PriceBothProducts":     {"/v1/prices", form("currency", "usd", "unit_amount", "100", "product", prod, "product_data[name]", "x"), "", "product_data"},
			"PriceUnknownProduct":   {"/v1/prices", form("currency", "usd", "unit_amount", "100", "product", "prod_nope"), "resource_missing", "product"},
			"PriceNoCurrency":       {"/v1/prices", form("unit_amount", "100", "product", prod), "parameter_missing", "currency"},
			"PriceBadCurrency":      {"/v1/prices", form("currency", "usdx", "unit_amount", "100", "product", prod), "invalid_currency", "currency"},
			"PriceNoAmount":         {"/v1/prices", form("currency", "usd", "product", prod), "parameter_missing", "unit_amount"},
			"PriceNegative":         {"/v1/prices", form("currency", "usd", "unit_amount", "-1", "product", prod), "parameter_invalid_integer", "unit_amount"},
			"PriceNineDigits":       {"/v1/prices", form("currency", "usd", "unit_amount", "100000000", "product", prod), "amount_too_large", "unit_amount"},
			"PriceFloat":            {"/v1/prices", form("currency", "usd", "unit_amount", "10.5", "product", prod), "parameter_invalid_integer", "unit_amount"},
			"PriceBadInterval":      {"/v1/prices", form("currency", "usd", "unit_amount", "100", "product", prod, "recurring[interval]", "hour"), "", "recurring[interval]"},
			"PriceNoInterval":       {"/v1/prices", form("currency", "usd", "unit_amount", "100", "product", prod, "recurring[interval_count]", "2"), "parameter_missing", "recurring[interval]"},
			"PriceFourYears":        {"/v1/prices", form("currency", "usd", "unit_amount", "100", "product", prod, "recurring[interval]", "year", "recurring[interval_count]", "4"), "", "recurring[interval_count]"},
			"PriceDataNoName":       {"/v1/prices", form("currency", "usd", "unit_amount", "100", "product_data[active]", "true"), "parameter_missing", "product_data[name]"},
			"ListPricesUnknownType": {"/v1/prices?type=tiered", "", "", "type"},
		} {
			t.Run(name, func(t *testing.T) {
				method := "POST"
				if tc.body == "" {
					method = "GET"
				}
				r := e.do(t, method, tc.path, tc.body)
				wantStatus(t, r, 400)
				if got := r.apiError(t).Error; got.Code != tc.code || got.Param != tc.param {
					t.Fatalf("code %q param %q, want %q %q: %s", got.Code, got.Param, tc.code, tc.param, got.Message)
				}
			})
		}
		if countCatalog(e.sim) != before {
			t.Fatal("a refused request created something")
		}
	})

	t.Run("OKPaymentLink", func(t *testing.T) {
		e := MustEnv(t)
		sc := e.sdk()
		price, err := sc.V1Prices.Create(ctx, &stripe.PriceCreateParams{ProductData: &stripe.PriceCreateProductDataParams{Name: stripe.String("Book")},
			UnitAmount: stripe.Int64(1500), Currency: stripe.String("usd")})
		if err != nil {
			t.Fatal(err)
		}
		link, err := sc.V1PaymentLinks.Create(ctx, &stripe.PaymentLinkCreateParams{
			LineItems:       []*stripe.PaymentLinkCreateLineItemParams{{Price: stripe.String(price.ID), Quantity: stripe.Int64(2)}},
			AfterCompletion: &stripe.PaymentLinkCreateAfterCompletionParams{Type: stripe.String("redirect"), Redirect: &stripe.PaymentLinkCreateAfterCompletionRedirectParams{URL: stripe.String("https://example.com/thanks")}}})
		if err != nil || !strings.HasPrefix(link.ID, "plink_") || !link.Active || link.Currency != "usd" ||
			!strings.HasPrefix(link.URL, "https://buy.stripe.com/test_") || link.AfterCompletion.Redirect.URL != "https://example.com/thanks" {
			t.Fatalf("payment link = %+v, %v", link, err)
		}
		if got, err := sc.V1PaymentLinks.Retrieve(ctx, link.ID, nil); err != nil || got.URL != link.URL {
			t.Fatalf("retrieve = %+v, %v", got, err)
		}
		plain := e.do(t, "POST", "/v1/payment_links", form("line_items[0][price]", price.ID, "line_items[0][quantity]", "1"))
		wantStatus(t, plain, 200)
		if ac := plain.object(t)["after_completion"].(map[string]any); ac["type"] != "hosted_confirmation" {
			t.Fatalf("after_completion = %v", ac)
		}
		gt := e.sim.GroundTruth()
		if len(gt.PaymentLinks) != 2 || len(gt.PaymentLinks[0].Lines) != 1 || gt.PaymentLinks[0].Lines[0] != (stripesim.PaymentLinkLine{Price: price.ID, Quantity: 2}) {
			t.Fatalf("ground truth links = %+v", gt.PaymentLinks)
		}
	})

	t.Run("ErrPaymentLink", func(t *testing.T) {
		e := MustEnv(t)
		usd := e.do(t, "POST", "/v1/prices", form("currency", "usd", "unit_amount", "100", "product_data[name]", "a")).object(t)["id"].(string)
		eur := e.do(t, "POST", "/v1/prices", form("currency", "eur", "unit_amount", "100", "product_data[name]", "b")).object(t)["id"].(string)
		off := e.do(t, "POST", "/v1/prices", form("currency", "usd", "unit_amount", "100", "product_data[name]", "c", "active", "false")).object(t)["id"].(string)
		for name, tc := range map[string]struct{ body, code, param string }{
			"NoLines":        {form("metadata[a]", "b"), "parameter_missing", "line_items"},
			"NoQuantity":     {form("line_items[0][price]", usd), "parameter_missing", "line_items[0][quantity]"},
			"ZeroQuantity":   {form("line_items[0][price]", usd, "line_items[0][quantity]", "0"), "parameter_invalid_integer", "line_items[0][quantity]"},
			"UnknownPrice":   {form("line_items[0][price]", "price_nope", "line_items[0][quantity]", "1"), "resource_missing", "line_items[0][price]"},
			"InactivePrice":  {form("line_items[0][price]", off, "line_items[0][quantity]", "1"), "", "line_items[0][price]"},
			"TwoCurrencies":  {form("line_items[0][price]", usd, "line_items[0][quantity]", "1", "line_items[1][price]", eur, "line_items[1][quantity]", "1"), "", "line_items[1][price]"},
			"UnknownField":   {form("line_items[0][price]", usd, "line_items[0][quantity]", "1", "line_items[0][amount]", "5"), "parameter_unknown", "line_items[0][amount]"},
			"RedirectNoURL":  {form("line_items[0][price]", usd, "line_items[0][quantity]", "1", "after_completion[type]", "redirect"), "parameter_missing", "after_completion[redirect][url]"},
			"RedirectNotURL": {form("line_items[0][price]", usd, "line_items[0][quantity]", "1", "after_completion[type]", "redirect", "after_completion[redirect][url]", "javascript:alert(1)"), "url_invalid", "after_completion[redirect][url]"},
		} {
			t.Run(name, func(t *testing.T) {
				r := e.do(t, "POST", "/v1/payment_links", tc.body)
				wantStatus(t, r, 400)
				if got := r.apiError(t).Error; got.Code != tc.code || got.Param != tc.param {
					t.Fatalf("code %q param %q, want %q %q: %s", got.Code, got.Param, tc.code, tc.param, got.Message)
				}
			})
		}
		if n := len(e.sim.GroundTruth().PaymentLinks); n != 0 {
			t.Fatalf("%d payment links after refusals", n)
		}
	})

	t.Run("OKInvoiceItemFromPrice", func(t *testing.T) {
		e := MustEnv(t)
		sc := e.sdk()
		cus := mustPayingCustomer(t, e, "pm_card_visa")
		price, err := sc.V1Prices.Create(ctx, &stripe.PriceCreateParams{ProductData: &stripe.PriceCreateProductDataParams{Name: stripe.String("Seat")},
			UnitAmount: stripe.Int64(2000), Currency: stripe.String("usd")})
		if err != nil {
			t.Fatal(err)
		}
		in, err := sc.V1Invoices.Create(ctx, &stripe.InvoiceCreateParams{Customer: stripe.String(cus.ID)})
		if err != nil {
			t.Fatal(err)
		}
		it, err := sc.V1InvoiceItems.Create(ctx, &stripe.InvoiceItemCreateParams{Customer: stripe.String(cus.ID), Invoice: stripe.String(in.ID),
			Pricing: &stripe.InvoiceItemCreatePricingParams{Price: stripe.String(price.ID)}, Quantity: stripe.Int64(3)})
		if err != nil || it.Amount != 6000 || it.Quantity != 3 || it.Currency != "usd" || it.Pricing == nil || it.Pricing.PriceDetails.Price != price.ID {
			t.Fatalf("item = %+v, %v", it, err)
		}
		if in, err = sc.V1Invoices.Retrieve(ctx, in.ID, nil); err != nil || in.AmountDue != 6000 || in.Lines.Data[0].Quantity != 3 {
			t.Fatalf("invoice = %+v, %v", in, err)
		}
		monthly := e.do(t, "POST", "/v1/prices", form("currency", "usd", "unit_amount", "100", "product_data[name]", "p", "recurring[interval]", "month")).object(t)["id"].(string)
		for name, tc := range map[string]struct{ body, code, param string }{
			"AmountAndPrice":   {form("customer", cus.ID, "pricing[price]", price.ID, "amount", "5"), "", "amount"},
			"QuantityNoPrice":  {form("customer", cus.ID, "amount", "500", "currency", "usd", "quantity", "2"), "", "quantity"},
			"UnknownPrice":     {form("customer", cus.ID, "pricing[price]", "price_nope"), "resource_missing", "pricing[price]"},
			"RecurringPrice":   {form("customer", cus.ID, "pricing[price]", monthly), "", "pricing[price]"},
			"OtherCurrency":    {form("customer", cus.ID, "pricing[price]", price.ID, "currency", "eur"), "", "currency"},
			"TooMuch":          {form("customer", cus.ID, "pricing[price]", price.ID, "quantity", "50001"), "amount_too_large", "quantity"},
			"NegativeQuantity": {form("customer", cus.ID, "pricing[price]", price.ID, "quantity", "-1"), "parameter_invalid_integer", "quantity"},
			"LegacyPrice":      {form("customer", cus.ID, "price", price.ID), "parameter_unknown", "price"},
		} {
			t.Run(name, func(t *testing.T) {
				r := e.do(t, "POST", "/v1/invoiceitems", tc.body)
				wantStatus(t, r, 400)
				if got := r.apiError(t).Error; got.Code != tc.code || got.Param != tc.param {
					t.Fatalf("code %q param %q, want %q %q: %s", got.Code, got.Param, tc.code, tc.param, got.Message)
				}
			})
		}
	})

	t.Run("OKPersisted", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "state.json")
		e := MustEnvWith(t, stripesim.Options{StatePath: path})
		price := e.do(t, "POST", "/v1/prices", form("currency", "usd", "unit_amount", "100", "product_data[name]", "p")).object(t)["id"].(string)
		wantStatus(t, e.do(t, "POST", "/v1/payment_links", form("line_items[0][price]", price, "line_items[0][quantity]", "4")), 200)
		sim, err := stripesim.New(stripesim.Options{StatePath: path})
		if err != nil {
			t.Fatal(err)
		}
		gt := sim.GroundTruth()
		if len(gt.Products) != 1 || len(gt.Prices) != 1 || len(gt.PaymentLinks) != 1 || gt.PaymentLinks[0].Lines[0].Quantity != 4 {
			t.Fatalf("reloaded: %+v", gt)
		}
	})
}

func countCatalog(sim *stripesim.Server) int {
	gt := sim.GroundTruth()
	return len(gt.Products) + len(gt.Prices) + len(gt.PaymentLinks)
}
