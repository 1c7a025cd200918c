package http_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	khttp "github.com/keybrake/keybrake/http"
)

// A key limited to connected account acct_1 (allowed_accounts), allowed
// unpriced operations, routed a checkout session's, a subscription
// schedule's or a payment link's funds to acct_2: the scope read only the
// top-level destination, destination[account], transfer_data[destination]
// and on_behalf_of, not the same parameters nested under
// payment_intent_data, subscription_data, phases[] or default_settings,
// nor the account an account session or onboarding link acts as. Each is
// refused now, before Stripe sees it.
func TestAttackScope_NestedDestination(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"],"allowed_accounts":["acct_1"],"allow_unpriced":true}`)
		acct := Header{"Stripe-Account", "acct_1"}
		for _, c := range []struct{ path, body string }{
			{"/v1/checkout/sessions", "mode=payment&line_items[0][price]=price_1&line_items[0][quantity]=1&payment_intent_data[transfer_data][destination]=acct_2"},
			{"/v1/checkout/sessions", "mode=payment&line_items[0][price]=price_1&line_items[0][quantity]=1&payment_intent_data[on_behalf_of]=acct_2"},
			{"/v1/checkout/sessions", "mode=subscription&line_items[0][price]=price_1&line_items[0][quantity]=1&subscription_data[transfer_data][destination]=acct_2"},
			{"/v1/subscription_schedules", "customer=cus_1&phases[0][items][0][price]=price_1&phases[0][transfer_data][destination]=acct_2"},
			{"/v1/subscription_schedules", "customer=cus_1&phases[0][items][0][price]=price_1&default_settings[transfer_data][destination]=acct_2"},
			{"/v1/subscription_schedules", "customer=cus_1&phases[0][items][0][price]=price_1&phases[0][on_behalf_of]=acct_2"},
			{"/v1/account_sessions", "account=acct_2&components[payouts][enabled]=true"},
			{"/v1/account_links", "account=acct_2&type=account_onboarding&refresh_url=https://x.test&return_url=https://x.test"},
		} {
			a.must(t, 403, "POST", c.path, c.body, acct)
		}
	})
}

// A payout's destination is one of the paying account's own bank accounts
// or cards (ba_, card_), not a connected account: read as one, it refused
// every payout to a named bank account on a key that sets
// allowed_accounts. The account a payout leaves is the Stripe-Account it
// is made on, which the scope checks.
func TestAttackScope_PayoutDestination(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"],"allowed_accounts":["acct_1"]}`)
		a.must(t, 200, "POST", "/v1/payouts", "amount=1000&currency=usd&destination=ba_1", Header{"Stripe-Account", "acct_1"})
		a.must(t, 403, "POST", "/v1/payouts", "amount=1000&currency=usd&destination=ba_1", Header{"Stripe-Account", "acct_2"})
		a.must(t, 403, "POST", "/v1/payouts", "amount=1000&currency=usd&destination=ba_1")
		a.must(t, 403, "POST", "/v1/transfers", "amount=1000&currency=usd&destination=acct_2", Header{"Stripe-Account", "acct_1"})
		if got := e.Spend(t, a.keyID).Total; got != 10_000_000 {
			t.Fatalf("spend %s, want the one payout's 10.00", got)
		}
	})
}

// A capped key without allow_unpriced created a webhook endpoint (a free
// write) to its own URL: Stripe then sent it every event, with the client
// secret of every confirmable payment intent in them, straight from
// Stripe, never through keybrake's redaction; a browser with the
// publishable key confirmed those intents past every cap of the key.
// Creating an endpoint, or pointing one elsewhere, is now unpriced: refused
// unless the key sets allow_unpriced. Disabling one stays free.
func TestAttackSecret_WebhookEndpoint(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"]}`)
		v := a.must(t, 403, "POST", "/v1/webhook_endpoints", "url=https://attacker.test/hook&enabled_events[]=*")
		if msg := fmt.Sprint(v); !strings.Contains(msg, "allow_unpriced") {
			t.Fatalf("refusal does not say how to allow it: %s", msg)
		}
		a.must(t, 403, "POST", "/v1/webhook_endpoints/we_1", "url=https://attacker.test/hook")
		a.must(t, 403, "POST", "/v1/webhook_endpoints/we_1", "disabled=false")
		a.must(t, 403, "POST", "/v1/webhook_endpoints/we_1", "enabled_events[]=payment_intent.created")
		for _, body := range []string{"disabled=true", "description=x&metadata[a]=b"} {
			if status, v := a.call(t, "POST", "/v1/webhook_endpoints/we_1", body); status == 403 {
				t.Fatalf("update %q refused: %v", body, v)
			}
		}
		if status, v := a.call(t, "DELETE", "/v1/webhook_endpoints/we_1", ""); status == 403 {
			t.Fatalf("delete refused: %v", v)
		}
		b := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"],"allow_unpriced":true}`)
		if status, v := b.call(t, "POST", "/v1/webhook_endpoints", "url=https://example.test/hook&enabled_events[]=*"); status == 403 {
			t.Fatalf("a key with allow_unpriced refused: %v", v)
		}
	})
}

// A capped key without allow_unpriced cannot create a checkout session in
// payment or subscription mode, nor finalize an invoice. But it could read
// them: the url and client_secret of an open checkout session, and the
// hosted_invoice_url (and invoice_pdf, which links to it) of an open
// invoice, made outside keybrake or by another key, came back as Stripe
// sent them, and paying them at the amounts somebody else chose moved
// money that no cap of the key counted. They are now nulled, wherever the
// answer carries them (retrieve, list, an event), for keys without
// allow_unpriced; a key that may create them keeps them, and so do setup
// sessions and sessions or invoices nobody can pay any more.
func TestAttackSecret_ForeignCheckoutAndInvoicePages(t *testing.T) {
	up := &payables{}
	e := MustOpen(t, up.option(t))
	_, capped := e.CreateKey(t, `{"total_usd_cap":100,"allowed_endpoints":["*"]}`)
	_, unpriced := e.CreateKey(t, `{"total_usd_cap":100,"allowed_endpoints":["*"],"allow_unpriced":true}`)
	get := func(secret, path string) (map[string]any, []byte) {
		t.Helper()
		resp, body := e.Do(t, "GET", path, "", map[string]string{"Authorization": "Bearer " + secret})
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		return mustJSON(t, body), body
	}
	leaks := []string{"checkout.stripe.com/c/pay/cs_test_open", "cs_test_embedded_secret_2",
		"invoice.stripe.com/i/open", "pay.stripe.com/invoice/open", "invoice.stripe.com/i/uncollectible"}
	for _, path := range []string{"/v1/checkout/sessions/cs_test_open", "/v1/checkout/sessions/cs_test_embedded", "/v1/checkout/sessions",
		"/v1/invoices/in_open", "/v1/invoices/in_uncollectible", "/v1/events/evt_1"} {
		_, body := get(capped, path)
		for _, leak := range leaks {
			if bytes.Contains(body, []byte(leak)) {
				t.Errorf("GET %s passed %s to a key that may not make it payable", path, leak)
			}
		}
	}
	v, _ := get(capped, "/v1/checkout/sessions/cs_test_open")
	if v["url"] != nil || v["client_secret"] != nil || v["amount_total"] == nil {
		t.Fatalf("open session: %v", v)
	}
	for path, field := range map[string]string{"/v1/checkout/sessions/cs_test_complete": "url", "/v1/checkout/sessions/cs_test_setup": "url",
		"/v1/invoices/in_paid": "hosted_invoice_url"} {
		if v, _ := get(capped, path); v[field] == nil {
			t.Errorf("GET %s lost %s, which pays nothing: %v", path, field, v)
		}
	}
	// A key that may create sessions and finalize invoices keeps theirs.
	for path, field := range map[string]string{"/v1/checkout/sessions/cs_test_open": "url", "/v1/invoices/in_open": "hosted_invoice_url"} {
		if v, _ := get(unpriced, path); v[field] == nil {
			t.Errorf("GET %s by a key with allow_unpriced lost %s: %v", path, field, v)
		}
	}
	resp, body := e.Do(t, "POST", "/v1/checkout/sessions", "mode=payment&line_items[0][price]=price_1&line_items[0][quantity]=1",
		map[string]string{"Authorization": "Bearer " + unpriced, "Content-Type": "application/x-www-form-urlencoded"})
	if v := mustJSON(t, body); resp.StatusCode != 200 || v["url"] == nil {
		t.Fatalf("a session's creator lost its url: %d %v", resp.StatusCode, v)
	}
}

// payables stands in front of the simulator as keybrake's upstream and
// answers, in Stripe's shapes, the checkout sessions, invoices and events
// the simulator lacks. Everything else goes to the simulator.
type payables struct{ sim *url.URL }

func (p *payables) option(tb testing.TB) Option {
	return func(s *khttp.Server) {
		p.sim = s.Upstream
		srv := httptest.NewServer(p)
		tb.Cleanup(srv.Close)
		s.Upstream = mustURL(tb, srv.URL)
	}
}

func checkoutSession(id, mode, status string, embedded bool) map[string]any {
	cs := map[string]any{"object": "checkout.session", "id": id, "mode": mode, "status": status, "amount_total": 90000, "currency": "usd",
		"client_secret": nil, "url": "https://checkout.stripe.com/c/pay/" + id + "#fid"}
	if embedded {
		cs["client_secret"], cs["url"] = id+"_secret_2", nil
	}
	return cs
}

func invoice(id, status string) map[string]any {
	name := strings.TrimPrefix(id, "in_")
	return map[string]any{"object": "invoice", "id": id, "status": status, "amount_due": 90000, "currency": "usd",
		"hosted_invoice_url": "https://invoice.stripe.com/i/" + name, "invoice_pdf": "https://pay.stripe.com/invoice/" + name + "/pdf"}
}

func (p *payables) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sessions := map[string]map[string]any{
		"cs_test_open":     checkoutSession("cs_test_open", "payment", "open", false),
		"cs_test_embedded": checkoutSession("cs_test_embedded", "subscription", "open", true),
		"cs_test_complete": checkoutSession("cs_test_complete", "payment", "complete", false),
		"cs_test_setup":    checkoutSession("cs_test_setup", "setup", "open", false),
	}
	invoices := map[string]map[string]any{"in_open": invoice("in_open", "open"), "in_uncollectible": invoice("in_uncollectible", "uncollectible"), "in_paid": invoice("in_paid", "paid")}
	path := r.URL.Path
	switch {
	case r.Method == "POST" && path == "/v1/checkout/sessions":
		writeJSON(w, checkoutSession("cs_test_new", "payment", "open", false))
	case r.Method == "GET" && path == "/v1/checkout/sessions":
		data := []any{}
		for _, id := range []string{"cs_test_open", "cs_test_embedded", "cs_test_complete", "cs_test_setup"} {
			data = append(data, sessions[id])
		}
		writeJSON(w, map[string]any{"object": "list", "data": data, "has_more": false, "url": path})
	case r.Method == "GET" && strings.HasPrefix(path, "/v1/checkout/sessions/"):
		writeJSON(w, sessions[strings.TrimPrefix(path, "/v1/checkout/sessions/")])
	case r.Method == "GET" && strings.HasPrefix(path, "/v1/invoices/"):
		writeJSON(w, invoices[strings.TrimPrefix(path, "/v1/invoices/")])
	case r.Method == "GET" && path == "/v1/events/evt_1":
		writeJSON(w, map[string]any{"object": "event", "id": "evt_1", "type": "invoice.finalized",
			"data": map[string]any{"object": invoices["in_open"], "previous_attributes": map[string]any{"session": sessions["cs_test_embedded"]}}})
	default:
		httputil.NewSingleHostReverseProxy(p.sim).ServeHTTP(w, r)
	}
}

// invoices.send was free ("emails an invoice that is already open"), but
// Stripe finalizes a draft before sending it. A key capped at $10 without
// allow_unpriced made a free draft (auto_advance=false, send_invoice) that
// took the customer's $900 of pending items and sent it: the invoice
// opened, payable on its hosted page, with nothing reserved, and the
// customer's payment moved $900 past the cap. invoices.send is now
// unpriced, like invoices.finalize. (Such a draft is no longer free
// either, TestAttackInvoices_DraftTakesPendingCredit; here the draft is
// somebody else's, parked with auto_advance=false.)
func TestAttackInvoices_SendFinalizesDraft(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":10,"allowed_endpoints":["*"]}`)
		_, cus := directPost(t, e, "/v1/customers", "email=payer@example.com")
		directPost(t, e, "/v1/invoiceitems", "customer="+id(cus)+"&amount=90000&currency=usd")
		_, inv := directPost(t, e, "/v1/invoices", "customer="+id(cus)+"&auto_advance=false&collection_method=send_invoice&days_until_due=7&pending_invoice_items_behavior=include")
		if inv["status"] != "draft" || fmt.Sprint(inv["amount_due"]) != "90000" {
			t.Fatalf("draft: %v", inv)
		}
		status, v := a.call(t, "POST", "/v1/invoices/"+id(inv)+"/send", "")
		// The customer pays whatever is payable on the hosted page.
		directPost(t, e, "/v1/invoices/"+id(inv)+"/pay", "payment_method=pm_card_visa")
		a.wantMoneyComplete(t, 1000)
		if status != 403 {
			t.Fatalf("send: %d %v", status, v)
		}
	})
}

// A field rule saw only the request's parameters. A key whose rule allows
// payments and refunds of at most $50 ("!has(amount) || amount <= 5000":
// the amount when one is sent) refunded a $900 charge in full by sending no
// amount, and confirmed a $900 intent made outside keybrake, priced by
// looking it up: $1,800 moved under a $50 rule, within the key's $2,000
// cap. A priced operation's rules are now also checked against the amount
// and currency keybrake priced, bound to amount and currency.
func TestAttackRules_PricedAmountWithoutParam(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":2000,"allowed_endpoints":["*"],"guards":{"rules":[{"name":"small","expr":"!has(amount) || amount <= 5000"}]}}`)
		_, big := directPost(t, e, "/v1/charges", "amount=90000&currency=usd&source=tok_visa")
		_, pi := directPost(t, e, "/v1/payment_intents", "amount=90000&currency=usd&payment_method=pm_card_visa")
		for _, c := range []struct{ path, body string }{
			{"/v1/refunds", "charge=" + id(big)},
			{"/v1/charges/" + id(big) + "/refunds", ""},
			{"/v1/payment_intents/" + id(pi) + "/confirm", ""},
		} {
			status, v := a.call(t, "POST", c.path, c.body)
			if status != 403 || !strings.Contains(fmt.Sprint(v), `"small"`) {
				t.Errorf("POST %s %q: %d %v, want the rule's 403", c.path, c.body, status, v)
			}
		}
		if got := e.Spend(t, a.keyID).Total; got != 0 {
			t.Fatalf("spend %s after refused requests", got)
		}
		// Within the rule, the same operations pass.
		ch := a.must(t, 200, "POST", "/v1/charges", "amount=4000&currency=usd&source=tok_visa")
		a.must(t, 200, "POST", "/v1/refunds", "charge="+id(ch))
		own := a.must(t, 200, "POST", "/v1/payment_intents", "amount=3000&currency=usd&payment_method=pm_card_visa")
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(own)+"/confirm", "")
		a.must(t, 403, "POST", "/v1/payment_intents/"+id(own), "amount=6000")
	})
}

// A field rule that names payment_intents.create applied to that operation
// alone. A key whose rule allows intents of at most $50 ("operations":
// ["payment_intents.create"], "amount <= 5000") created a $50 intent, then
// raised it to $900 by payment_intents.update, and authorized a $50 intent
// and incremented it to $900: $1,800 made movable under a $50 rule, within
// the key's $2,000 cap (and a confirm with amount_to_confirm was not even
// priced: see TestAttackHolds_AmountToConfirm). A rule naming the operation that creates an object
// is now checked too, with amount and currency bound to the new total,
// whenever another operation raises what that object can move past what
// the key holds on it; updates that raise nothing pass as before.
func TestAttackRules_CreateRuleCoversRaises(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":2000,"allowed_endpoints":["*"],"guards":{"rules":[{"name":"small","operations":["payment_intents.create"],"expr":"amount <= 5000"}]}}`)
		pi := a.must(t, 200, "POST", "/v1/payment_intents", "amount=5000&currency=usd")
		auth := a.must(t, 200, "POST", "/v1/payment_intents", "amount=4000&currency=usd&payment_method=pm_card_visa&capture_method=manual&confirm=true")
		if auth["status"] != "requires_capture" {
			t.Fatalf("authorization: %v", auth)
		}
		for _, c := range []struct{ path, body string }{
			{"/v1/payment_intents/" + id(pi), "amount=90000"},
			{"/v1/payment_intents/" + id(auth) + "/increment_authorization", "amount=90000"},
			{"/v1/payment_intents/" + id(pi) + "/confirm", "payment_method=pm_card_visa&amount_to_confirm=90000"},
		} {
			status, v := a.call(t, "POST", c.path, c.body)
			if status != 403 || !strings.Contains(fmt.Sprint(v), `"small"`) {
				t.Errorf("POST %s %q: %d %v, want the rule's 403", c.path, c.body, status, v)
			}
		}
		if got := e.Spend(t, a.keyID).Total; got != 90_000_000 {
			t.Fatalf("spend %s, want the two intents' $90", got)
		}
		// An update that raises nothing, and a raise within the rule, pass.
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi), "metadata[order]=42&description=x")
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi), "amount=4500")
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(auth)+"/increment_authorization", "amount=5000")
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi)+"/confirm", "payment_method=pm_card_visa")
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(auth)+"/capture", "")
	})
}

// payment_intents.confirm takes amount_to_confirm (API 2026-04-22): Stripe
// confirms that amount instead of the intent's, a surcharge for instance.
// keybrake priced every confirm of an intent the key holds at the hold: a
// key capped at $100 created a $50 intent and confirmed it with
// amount_to_confirm=90000, and $900 moved against $50 reserved. A confirm
// with amount_to_confirm now raises the hold to that amount first (or to
// the intent's, if larger), under every cap, like an update of the amount.
func TestAttackHolds_AmountToConfirm(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"]}`)
		pi := a.must(t, 200, "POST", "/v1/payment_intents", "amount=5000&currency=usd")
		status, v := a.call(t, "POST", "/v1/payment_intents/"+id(pi)+"/confirm", "payment_method=pm_card_visa&amount_to_confirm=90000")
		a.wantMoneyComplete(t, 10000)
		if status != 429 {
			t.Fatalf("confirm of $900 on a $100 key: %d %v", status, v)
		}
		// Within the cap, the hold is raised and settles at what moved.
		v = a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi)+"/confirm", "payment_method=pm_card_visa&amount_to_confirm=7000")
		if v["status"] != "succeeded" || fmt.Sprint(v["amount_received"]) != "7000" {
			t.Fatalf("confirm: %v", v)
		}
		a.wantMoneyComplete(t, 10000)
		if got := e.Spend(t, a.keyID).Total; got != 70_000_000 {
			t.Fatalf("spend %s, want 70.00", got)
		}
	})
}

// An approval policy naming payment_intents.create made a person approve
// every intent the key created, with its amount; raising the approved
// intent afterwards waited for nobody. A key capped at $2,000 had a $50
// intent approved, then raised it to $900 by payment_intents.update and
// confirmed it: $850 moved that no person saw. A write that raises an
// object above what the key holds on it now needs the approval the
// creation of that object needs (a new approval, for the raise);
// a write that raises nothing does not.
func TestAttackApproval_CreateApprovalCoversRaises(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":2000,"allowed_endpoints":["*"],"approval":{"operations":["payment_intents.create"]}}`)
		idem := func(k string) Header { return Header{"Idempotency-Key", k} }
		approve := func(v map[string]any) {
			t.Helper()
			msg := fmt.Sprint(v["error"])
			i := strings.Index(msg, "/console/approvals/apr_")
			if !strings.Contains(msg, "keybrake_approval_required") || i < 0 {
				t.Fatalf("not an approval refusal: %v", v)
			}
			apr := strings.TrimRight(strings.Fields(msg[i+len("/console/approvals/"):])[0], ".,")
			if resp, out := e.Admin(t, "POST", "/vault/approvals/"+apr+"/approve", ""); resp.StatusCode != 200 {
				t.Fatalf("approve %s: %d %s", apr, resp.StatusCode, out)
			}
		}
		approve(a.must(t, 402, "POST", "/v1/payment_intents", "amount=5000&currency=usd", idem("c1")))
		pi := a.must(t, 200, "POST", "/v1/payment_intents", "amount=5000&currency=usd", idem("c1"))
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi), "metadata[order]=42", idem("m1"))
		v := a.must(t, 402, "POST", "/v1/payment_intents/"+id(pi), "amount=90000", idem("u1"))
		a.must(t, 402, "POST", "/v1/payment_intents/"+id(pi)+"/confirm", "payment_method=pm_card_visa&amount_to_confirm=90000", idem("a1"))
		if got := e.Spend(t, a.keyID).Total; got != 50_000_000 {
			t.Fatalf("spend %s while the raise waits, want the approved 50.00", got)
		}
		approve(v)
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi), "amount=90000", idem("u1"))
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi)+"/confirm", "payment_method=pm_card_visa", idem("f1"))
		a.wantMoneyComplete(t, 200000)
	})
}
