package stripesim_test

import (
	"context"
	"strings"
	"testing"
	"time"

	stripe "github.com/stripe/stripe-go/v82"

	"github.com/keybrake/keybrake/stripesim"
)

// mustPayingCustomer creates a customer whose invoices charge pm.
func mustPayingCustomer(t *testing.T, e *env, pm string) *stripe.Customer {
	t.Helper()
	cus, err := e.sdk().V1Customers.Create(context.Background(), &stripe.CustomerCreateParams{
		InvoiceSettings: &stripe.CustomerCreateInvoiceSettingsParams{DefaultPaymentMethod: stripe.String(pm)}})
	if err != nil {
		t.Fatal(err)
	}
	return cus
}

// mustInvoice creates a draft for cus with one pending item of amount usd.
func mustInvoice(t *testing.T, e *env, cus string, amount int64, autoAdvance bool) *stripe.Invoice {
	t.Helper()
	ctx := context.Background()
	if _, err := e.sdk().V1InvoiceItems.Create(ctx, &stripe.InvoiceItemCreateParams{Customer: stripe.String(cus),
		Amount: stripe.Int64(amount), Currency: stripe.String("usd"), Description: stripe.String("seats")}); err != nil {
		t.Fatal(err)
	}
	in, err := e.sdk().V1Invoices.Create(ctx, &stripe.InvoiceCreateParams{Customer: stripe.String(cus),
		AutoAdvance: stripe.Bool(autoAdvance), PendingInvoiceItemsBehavior: stripe.String("include")})
	if err != nil {
		t.Fatal(err)
	}
	if in.Status != stripe.InvoiceStatusDraft || in.AmountDue != amount || in.Total != amount || len(in.Lines.Data) != 1 ||
		in.CollectionMethod != stripe.InvoiceCollectionMethodChargeAutomatically || in.AutoAdvance != autoAdvance {
		t.Fatalf("draft = %+v", in)
	}
	return in
}

func TestInvoices(t *testing.T) {
	ctx := context.Background()

	t.Run("OKFinalizeAndPay", func(t *testing.T) {
		e := MustEnv(t)
		sc := e.sdk()
		cus := mustPayingCustomer(t, e, "pm_card_visa")
		in := mustInvoice(t, e, cus.ID, 1000, false)
		in, err := sc.V1Invoices.AddLines(ctx, in.ID, &stripe.InvoiceAddLinesParams{Lines: []*stripe.InvoiceAddLinesLineParams{
			{Amount: stripe.Int64(250), Description: stripe.String("setup")}}})
		if err != nil || in.AmountDue != 1250 || len(in.Lines.Data) != 2 || in.Lines.Data[1].Description != "setup" {
			t.Fatalf("add_lines = %+v, %v", in, err)
		}
		in, err = sc.V1Invoices.FinalizeInvoice(ctx, in.ID, nil)
		if err != nil || in.Status != stripe.InvoiceStatusOpen || in.Number == "" || in.StatusTransitions.FinalizedAt != epoch.Unix() {
			t.Fatalf("finalize = %+v, %v", in, err)
		}
		if got := e.sim.Moved().Total.Captured["usd"]; got != 0 {
			t.Fatalf("moved before pay = %d", got)
		}
		in, err = sc.V1Invoices.Pay(ctx, in.ID, nil)
		if err != nil || in.Status != stripe.InvoiceStatusPaid || in.AmountPaid != 1250 || in.AmountRemaining != 0 || !in.Attempted {
			t.Fatalf("pay = %+v, %v", in, err)
		}
		gt := e.sim.GroundTruth()
		if len(gt.Charges) != 1 || gt.Charges[0].Amount != 1250 || gt.Charges[0].Customer != cus.ID || gt.Invoices[0].Charge != gt.Charges[0].ID {
			t.Fatalf("ground truth = %+v", gt)
		}
		if got := e.sim.Moved().Total.Captured["usd"]; got != 1250 {
			t.Fatalf("moved = %d, want 1250", got)
		}
		_, err = sc.V1Invoices.Pay(ctx, in.ID, nil)
		if se := stripeErr(t, err); se.HTTPStatusCode != 400 {
			t.Fatalf("pay twice = %+v", se)
		}
	})

	t.Run("OKAutomaticCollection", func(t *testing.T) {
		e := MustEnv(t)
		cus := mustPayingCustomer(t, e, "pm_card_visa")
		in := mustInvoice(t, e, cus.ID, 3000, true)
		if in.AutomaticallyFinalizesAt != epoch.Add(time.Hour).Unix() {
			t.Fatalf("automatically_finalizes_at = %d", in.AutomaticallyFinalizesAt)
		}
		e.sim.Advance(time.Hour - time.Second)
		if got := e.sim.GroundTruth().Invoices[0]; got.Status != "draft" {
			t.Fatalf("finalized early: %+v", got)
		}
		e.sim.Advance(time.Second)
		got := e.sim.GroundTruth().Invoices[0]
		if got.Status != "open" || got.NextPaymentAttempt != epoch.Add(2*time.Hour).Unix() {
			t.Fatalf("after 1h: %+v", got)
		}
		if n := len(e.sim.GroundTruth().Charges); n != 0 {
			t.Fatalf("charged at finalization: %d charges", n)
		}
		e.sim.Advance(time.Hour)
		gt := e.sim.GroundTruth()
		if gt.Invoices[0].Status != "paid" || gt.Invoices[0].AmountPaid != 3000 || len(gt.Charges) != 1 ||
			gt.Charges[0].Created != epoch.Add(2*time.Hour).Unix() || !gt.Charges[0].Captured {
			t.Fatalf("after 2h: %+v", gt)
		}
		if got := e.sim.Moved().Total.Captured["usd"]; got != 3000 {
			t.Fatalf("moved = %d, want 3000", got)
		}
	})

	t.Run("OKAutomaticCollectionInOneJumpOverHTTP", func(t *testing.T) {
		e := MustEnv(t)
		cus := mustPayingCustomer(t, e, "pm_card_visa")
		in := mustInvoice(t, e, cus.ID, 3000, true)
		wantStatus(t, e.do(t, "POST", "/_sim/clock/advance", `{"seconds": 86400}`), 200)
		got, err := e.sdk().V1Invoices.Retrieve(ctx, in.ID, nil)
		if err != nil || got.Status != stripe.InvoiceStatusPaid || got.StatusTransitions.PaidAt != epoch.Add(2*time.Hour).Unix() {
			t.Fatalf("invoice = %+v, %v", got, err)
		}
	})

	t.Run("OKNoAutomaticCollection", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			params *stripe.InvoiceCreateParams
		}{
			{"AutoAdvanceOff", &stripe.InvoiceCreateParams{}},
			{"SendInvoice", &stripe.InvoiceCreateParams{AutoAdvance: stripe.Bool(true),
				CollectionMethod: stripe.String("send_invoice"), DaysUntilDue: stripe.Int64(30)}},
		} {
			e := MustEnv(t)
			cus := mustPayingCustomer(t, e, "pm_card_visa")
			tc.params.Customer = stripe.String(cus.ID)
			in, err := e.sdk().V1Invoices.Create(ctx, tc.params)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.sdk().V1Invoices.AddLines(ctx, in.ID, &stripe.InvoiceAddLinesParams{Lines: []*stripe.InvoiceAddLinesLineParams{
				{Amount: stripe.Int64(500)}}}); err != nil {
				t.Fatal(err)
			}
			e.sim.Advance(30 * 24 * time.Hour)
			if n := len(e.sim.GroundTruth().Charges); n != 0 {
				t.Fatalf("%s: %d charges", tc.name, n)
			}
		}
	})

	t.Run("OKTurningAutoAdvanceOffStopsCollection", func(t *testing.T) {
		e := MustEnv(t)
		cus := mustPayingCustomer(t, e, "pm_card_visa")
		in := mustInvoice(t, e, cus.ID, 3000, true)
		e.sim.Advance(time.Hour)
		in, err := e.sdk().V1Invoices.Update(ctx, in.ID, &stripe.InvoiceUpdateParams{AutoAdvance: stripe.Bool(false)})
		if err != nil || in.Status != stripe.InvoiceStatusOpen || in.NextPaymentAttempt != 0 {
			t.Fatalf("update = %+v, %v", in, err)
		}
		e.sim.Advance(24 * time.Hour)
		if n := len(e.sim.GroundTruth().Charges); n != 0 {
			t.Fatalf("%d charges after auto_advance=false", n)
		}
	})

	t.Run("OKDeclinedAutomaticAttempt", func(t *testing.T) {
		e := MustEnv(t)
		cus := mustPayingCustomer(t, e, "pm_card_chargeDeclined")
		mustInvoice(t, e, cus.ID, 3000, true)
		e.sim.Advance(3 * time.Hour)
		gt := e.sim.GroundTruth()
		if in := gt.Invoices[0]; in.Status != "open" || in.AttemptCount != 1 || in.AmountPaid != 0 || len(gt.Charges) != 1 || gt.Charges[0].Status != "failed" {
			t.Fatalf("ground truth = %+v", gt)
		}
		if got := e.sim.Moved().Total.Captured["usd"]; got != 0 {
			t.Fatalf("moved = %d", got)
		}
	})

	t.Run("OKVoidAndDelete", func(t *testing.T) {
		e := MustEnv(t)
		sc := e.sdk()
		cus := mustPayingCustomer(t, e, "pm_card_visa")
		in := mustInvoice(t, e, cus.ID, 1000, false)
		if _, err := sc.V1Invoices.FinalizeInvoice(ctx, in.ID, &stripe.InvoiceFinalizeInvoiceParams{AutoAdvance: stripe.Bool(true)}); err != nil {
			t.Fatal(err)
		}
		voided, err := sc.V1Invoices.VoidInvoice(ctx, in.ID, nil)
		if err != nil || voided.Status != stripe.InvoiceStatusVoid {
			t.Fatalf("void = %+v, %v", voided, err)
		}
		e.sim.Advance(24 * time.Hour)
		if n := len(e.sim.GroundTruth().Charges); n != 0 {
			t.Fatalf("a void invoice charged: %d charges", n)
		}
		_, err = sc.V1Invoices.Delete(ctx, in.ID, nil)
		if se := stripeErr(t, err); se.HTTPStatusCode != 400 {
			t.Fatalf("delete of a void invoice = %+v", se)
		}
		draft := mustInvoice(t, e, cus.ID, 1000, true)
		del, err := sc.V1Invoices.Delete(ctx, draft.ID, nil)
		if err != nil || !del.Deleted {
			t.Fatalf("delete = %+v, %v", del, err)
		}
		_, err = sc.V1Invoices.Retrieve(ctx, draft.ID, nil)
		if se := stripeErr(t, err); se.HTTPStatusCode != 404 {
			t.Fatalf("retrieve deleted = %+v", se)
		}
		e.sim.Advance(24 * time.Hour)
		if n := len(e.sim.GroundTruth().Charges); n != 0 {
			t.Fatalf("a deleted draft charged: %d charges", n)
		}
	})

	t.Run("OKItemOnInvoiceAndCustomerUpdate", func(t *testing.T) {
		e := MustEnv(t)
		sc := e.sdk()
		cus, err := sc.V1Customers.Create(ctx, &stripe.CustomerCreateParams{})
		if err != nil {
			t.Fatal(err)
		}
		in, err := sc.V1Invoices.Create(ctx, &stripe.InvoiceCreateParams{Customer: stripe.String(cus.ID), Currency: stripe.String("eur")})
		if err != nil {
			t.Fatal(err)
		}
		it, err := sc.V1InvoiceItems.Create(ctx, &stripe.InvoiceItemCreateParams{Customer: stripe.String(cus.ID),
			Amount: stripe.Int64(700), Invoice: stripe.String(in.ID)})
		if err != nil || it.Invoice == nil || it.Invoice.ID != in.ID || it.Currency != "eur" {
			t.Fatalf("item = %+v, %v", it, err)
		}
		in, err = sc.V1Invoices.FinalizeInvoice(ctx, in.ID, nil)
		if err != nil || in.AmountDue != 700 {
			t.Fatalf("finalize = %+v, %v", in, err)
		}
		_, err = sc.V1Invoices.Pay(ctx, in.ID, nil)
		if se := stripeErr(t, err); se.HTTPStatusCode != 400 || !strings.Contains(se.Msg, "default payment method") {
			t.Fatalf("pay without a payment method = %+v", se)
		}
		if _, err := sc.V1Customers.Update(ctx, cus.ID, &stripe.CustomerUpdateParams{
			InvoiceSettings: &stripe.CustomerUpdateInvoiceSettingsParams{DefaultPaymentMethod: stripe.String("pm_card_visa")}}); err != nil {
			t.Fatal(err)
		}
		in, err = sc.V1Invoices.Pay(ctx, in.ID, nil)
		if err != nil || in.Status != stripe.InvoiceStatusPaid || in.AmountPaid != 700 {
			t.Fatalf("pay = %+v, %v", in, err)
		}
		if got := e.sim.Moved().Total.Captured["eur"]; got != 700 {
			t.Fatalf("moved = %d", got)
		}
	})

	t.Run("OKCreditItemsAndPendingDefaultByVersion", func(t *testing.T) {
		e := MustEnv(t)
		cus := mustPayingCustomer(t, e, "pm_card_visa")
		credit := e.do(t, "POST", "/v1/invoiceitems", "customer="+cus.ID+"&amount=-300&currency=usd").object(t)
		if credit["amount"] != float64(-300) {
			t.Fatalf("credit item = %v", credit)
		}
		// Current versions leave pending items out unless asked.
		in := e.do(t, "POST", "/v1/invoices", "customer="+cus.ID+"&auto_advance=false").object(t)
		if in["amount_due"] != float64(0) || len(in["lines"].(map[string]any)["data"].([]any)) != 0 {
			t.Fatalf("draft under the current version = %v", in)
		}
		// Before 2022-08-01 they were included when the parameter was not sent.
		old := e.do(t, "POST", "/v1/invoices", "customer="+cus.ID+"&auto_advance=false", "Stripe-Version", "2020-08-27").object(t)
		if old["total"] != float64(-300) || old["amount_due"] != float64(0) {
			t.Fatalf("draft under 2020-08-27 = %v", old)
		}
		e.do(t, "POST", "/v1/invoiceitems", "customer="+cus.ID+"&amount=1000&currency=usd")
		next := e.do(t, "POST", "/v1/invoices", "customer="+cus.ID+"&auto_advance=false&pending_invoice_items_behavior=include").object(t)
		if next["amount_due"] != float64(1000) {
			t.Fatalf("the credit was taken by the earlier draft; next = %v", next)
		}
		if r := e.do(t, "POST", "/v1/invoiceitems", "customer="+cus.ID+"&amount=-0&currency=usd"); r.status != 400 {
			t.Fatalf("amount=-0: %d %s", r.status, r.body)
		}
	})

	t.Run("ErrInvalid", func(t *testing.T) {
		e := MustEnv(t)
		cus := mustPayingCustomer(t, e, "pm_card_visa")
		for _, tc := range []struct{ path, body, code, param string }{
			{"/v1/invoices", "", "parameter_missing", "customer"},
			{"/v1/invoices", form("customer", "cus_missing"), "resource_missing", "customer"},
			{"/v1/invoices", form("customer", cus.ID, "colour", "red"), "parameter_unknown", "colour"},
			{"/v1/invoices", form("customer", cus.ID, "collection_method", "send_invoice"), "", "days_until_due"},
			{"/v1/invoices", form("customer", cus.ID, "pending_invoice_items_behavior", "sometimes"), "", "pending_invoice_items_behavior"},
			{"/v1/invoiceitems", form("customer", cus.ID, "currency", "usd"), "parameter_missing", "amount"},
			{"/v1/customers", form("invoice_settings[default_payment_method]", "pm_nope"), "resource_missing", "invoice_settings[default_payment_method]"},
			{"/v1/customers", form("invoice_settings[colour]", "red"), "parameter_unknown", "invoice_settings[colour]"},
		} {
			r := e.do(t, "POST", tc.path, tc.body)
			wantStatus(t, r, 400)
			if got := r.apiError(t).Error; got.Code != tc.code || got.Param != tc.param {
				t.Fatalf("%s %s: %s", tc.path, tc.body, r.body)
			}
		}
		in := mustInvoice(t, e, cus.ID, 1000, false)
		r := e.do(t, "POST", "/v1/invoices/"+in.ID+"/add_lines", form("lines[0][price_data][unit_amount]", "5"))
		if wantStatus(t, r, 400); r.apiError(t).Error.Param != "lines[0][price_data]" {
			t.Fatalf("add_lines price_data = %s", r.body)
		}
		wantStatus(t, e.do(t, "POST", "/v1/invoices/"+in.ID+"/pay", ""), 400)
		wantStatus(t, e.do(t, "POST", "/v1/invoices/"+in.ID+"/finalize", ""), 200)
		r = e.do(t, "POST", "/v1/invoices/"+in.ID+"/add_lines", form("lines[0][amount]", "5"))
		if wantStatus(t, r, 400); r.apiError(t).Error.Code != "invoice_not_editable" {
			t.Fatalf("add_lines on open = %s", r.body)
		}
		wantStatus(t, e.do(t, "GET", "/v1/invoices/in_missing", ""), 404)
	})

	t.Run("OKPersisted", func(t *testing.T) {
		path := t.TempDir() + "/state.json"
		e := MustEnvWith(t, stripesim.Options{StatePath: path})
		cus := mustPayingCustomer(t, e, "pm_card_visa")
		in := mustInvoice(t, e, cus.ID, 1000, true)
		if err := e.sim.Close(); err != nil {
			t.Fatal(err)
		}
		e2 := MustEnvWith(t, stripesim.Options{StatePath: path})
		got, err := e2.sdk().V1Invoices.Retrieve(ctx, in.ID, nil)
		if err != nil || got.AmountDue != 1000 || len(got.Lines.Data) != 1 || !got.AutoAdvance {
			t.Fatalf("reloaded = %+v, %v", got, err)
		}
		e2.sim.Advance(3 * time.Hour)
		if got := e2.sim.Moved().Total.Captured["usd"]; got != 1000 {
			t.Fatalf("moved after reload = %d", got)
		}
	})
}
