package http_test

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// TestAttackDelegate_ChildrenPastParentGuards: a key with the mint
// permission, limited to one charge a customer a day and guarded against
// duplicate charges, minted itself children, which carry its guards but
// count them on their own counters: each child charged the customer the
// parent had just charged, the same amount again ($30 past a limit of one
// $10 charge, in three children). A parent with guards that count (a
// duplicate guard, velocity limits, a breaker) now mints no children, and
// a child minted before it was given them is refused.
func TestAttackDelegate_ChildrenPastParentGuards(t *testing.T) {
	e := MustOpen(t)
	guards := `"guards":{"velocity":[{"name":"one_charge_a_day","per":"customer","operations":["charges.create"],"limit":1,"window_seconds":86400}],"duplicate":{"window_seconds":86400}}`
	parentID, parentSecret := e.CreateKey(t, `{"total_usd_cap":100,"allowed_endpoints":["*"],"mint":true,`+guards+`}`)
	parent := &attacker{e: e, keyID: parentID, secret: parentSecret}
	cus := parent.must(t, 200, "POST", "/v1/customers", "email=a@example.com&source=tok_visa")
	charge := "amount=1000&currency=usd&customer=" + id(cus)
	parent.must(t, 200, "POST", "/v1/charges", charge)
	parent.must(t, http.StatusConflict, "POST", "/v1/charges", charge)
	for range 3 {
		if status, v := mint(t, e, "/vault/keys/self/children", parentSecret, `{"total_usd_cap":20}`); status == http.StatusCreated {
			child := &attacker{e: e, secret: v["vault_key"].(string)}
			child.call(t, "POST", "/v1/charges", charge)
		} else if status != http.StatusForbidden {
			t.Fatalf("mint: %d %v", status, v)
		}
	}
	if n := len(e.Sim.GroundTruth().Charges); n != 1 {
		t.Fatalf("%d charges of one customer; its parent's guards allow one a day", n)
	}

	// A child minted before its parent counted anything is refused once
	// the parent is given guards, even with the same guards itself.
	otherID, otherSecret := e.CreateKey(t, `{"total_usd_cap":100,"allowed_endpoints":["*"],"mint":true}`)
	status, v := mint(t, e, "/vault/keys/self/children", otherSecret, `{"total_usd_cap":20}`)
	if status != http.StatusCreated {
		t.Fatalf("mint: %d %v", status, v)
	}
	childID, child := v["id"].(string), &attacker{e: e, secret: v["vault_key"].(string)}
	for _, id := range []string{otherID, childID} {
		if resp, out := e.Admin(t, "PATCH", "/vault/keys/"+id, `{`+guards+`}`); resp.StatusCode != http.StatusOK && id == otherID {
			t.Fatalf("guard the parent: %d %s", resp.StatusCode, out)
		}
	}
	child.must(t, http.StatusForbidden, "POST", "/v1/charges", charge)
	if n := len(e.Sim.GroundTruth().Charges); n != 1 {
		t.Fatalf("%d charges: a child of a guarded parent charged", n)
	}
	// Field rules count nothing: a parent with rules only still mints.
	_, rulesSecret := e.CreateKey(t, `{"total_usd_cap":100,"allowed_endpoints":["*"],"mint":true,"guards":{"rules":[{"name":"usd","expr":"currency == 'usd'"}]}}`)
	if status, v := mint(t, e, "/vault/keys/self/children", rulesSecret, `{"total_usd_cap":20}`); status != http.StatusCreated {
		t.Fatalf("mint under field rules: %d %v", status, v)
	}
}

// TestAttackRules_LegacyRefundPathNoSubject: Stripe's legacy refund paths
// (POST /v1/charges/{id}/refund and /refunds, aliases of refunds.create
// since the velocity limits name them) name the charge in the path, not in
// a parameter, so the guards saw no customer: a limit of one refund a
// payment a day and the duplicate guard let the same $5.00 refund of one
// charge through again on each legacy path. The path's charge is now the
// request's subject, as the charge parameter of refunds.create is.
func TestAttackRules_LegacyRefundPathNoSubject(t *testing.T) {
	for name, guards := range map[string]string{
		"Velocity":  `"velocity":[{"name":"one_refund_a_payment","per":"customer","operations":["refunds.create"],"limit":1,"window_seconds":86400}]`,
		"Duplicate": `"duplicate":{"window_seconds":86400}`,
	} {
		t.Run(name, func(t *testing.T) {
			e := MustOpen(t)
			a := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"],"guards":{`+guards+`}}`)
			ch := a.must(t, 200, "POST", "/v1/charges", "amount=4000&currency=usd&source=tok_visa")
			a.must(t, 200, "POST", "/v1/refunds", "amount=500&charge="+id(ch))
			for _, path := range []string{"/v1/charges/" + id(ch) + "/refunds", "/v1/charges/" + id(ch) + "/refund"} {
				if status, v := a.call(t, "POST", path, "amount=500"); status != http.StatusConflict && status != http.StatusTooManyRequests {
					t.Errorf("%s: %d %v, want the guard's refusal", path, status, v)
				}
			}
			if n := len(e.Sim.GroundTruth().Refunds); n != 1 {
				t.Fatalf("%d refunds of one charge past the key's guards", n)
			}
		})
	}
}

// TestAttackRules_OperationVariableAlias: a field rule that names no
// operations and tests the operation variable ("operation !=
// 'refunds.create' || amount <= 1000": refunds of at most $10) was true
// for the same refund sent by its legacy paths, whose operation variable
// was charges.refund or charges.refunds.create: a $30.00 refund passed a
// $10 rule. A rule is now evaluated under every name of the operation,
// and each must be true.
func TestAttackRules_OperationVariableAlias(t *testing.T) {
	e := MustOpen(t)
	a := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"],"guards":{"rules":[{"name":"small_refunds","expr":"operation != 'refunds.create' || amount <= 1000"}]}}`)
	ch := a.must(t, 200, "POST", "/v1/charges", "amount=4000&currency=usd&source=tok_visa")
	a.must(t, http.StatusForbidden, "POST", "/v1/refunds", "amount=3000&charge="+id(ch))
	for _, path := range []string{"/v1/charges/" + id(ch) + "/refunds", "/v1/charges/" + id(ch) + "/refund"} {
		a.must(t, http.StatusForbidden, "POST", path, "amount=3000")
	}
	a.must(t, 200, "POST", "/v1/charges/"+id(ch)+"/refunds", "amount=1000")
	if n := len(e.Sim.GroundTruth().Refunds); n != 1 {
		t.Fatalf("%d refunds; the rule allows only the $10 one", n)
	}
}

// TestAttackScope_CustomerAccount: Stripe's customer_account (API
// 2025-…: the Account that represents a customer, in place of a cus_ id)
// names the customer a payment intent, invoice, subscription or checkout
// session charges, and keybrake's customer scope read only customer: a key
// limited to cus_1 created an intent for cus_1 that belongs to another
// customer's Account, billed another customer with invoices and
// subscriptions, and moved its own intent to another customer by update.
// customer_account is now a customer the scope must allow.
func TestAttackScope_CustomerAccount(t *testing.T) {
	e := MustOpen(t)
	owner := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"]}`)
	cus := id(owner.must(t, 200, "POST", "/v1/customers", "email=a@example.com&source=tok_visa"))
	a := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"],"allow_unpriced":true,"allowed_customers":["`+cus+`"]}`)
	pi := a.must(t, 200, "POST", "/v1/payment_intents", "amount=1000&currency=usd&customer="+cus)
	for _, c := range []struct{ path, body string }{
		{"/v1/payment_intents", "amount=1000&currency=usd&customer=" + cus + "&customer_account=acct_2&payment_method=pm_card_visa&confirm=true"},
		{"/v1/payment_intents/" + id(pi), "customer_account=acct_2"},
		{"/v1/invoices", "customer_account=acct_2&auto_advance=true"},
		{"/v1/invoiceitems", "customer_account=acct_2&amount=1000&currency=usd"},
		{"/v1/subscriptions", "customer_account=acct_2&items[0][price]=price_1"},
		{"/v1/checkout/sessions", "mode=payment&customer_account=acct_2&line_items[0][price]=price_1&line_items[0][quantity]=1&success_url=https://x.test"},
		{"/v1/setup_intents", "customer_account=acct_2&payment_method=pm_card_visa&confirm=true"},
	} {
		a.must(t, http.StatusForbidden, "POST", c.path, c.body)
	}
}

// TestAttackScope_ObjectOfAnotherCustomer: a key limited to one customer,
// with allow_unpriced to pay that customer's invoices, paid another
// customer's open $900 invoice by its id in the path (POST
// /v1/invoices/{id}/pay): the customer scope looked up the customer of the
// payment intents and charges a request acts on, not of invoices,
// subscriptions or the other objects an unpriced write acts on. The
// object's customer is now looked up for every money-moving request on an
// object in the path, and one whose customer keybrake cannot tell is
// refused.
func TestAttackScope_ObjectOfAnotherCustomer(t *testing.T) {
	e := MustOpen(t)
	openInvoice := func(t *testing.T) (customer, invoice string) {
		_, cus := directPost(t, e, "/v1/customers", "email=payer@example.com&invoice_settings[default_payment_method]=pm_card_visa")
		directPost(t, e, "/v1/invoiceitems", "customer="+id(cus)+"&amount=90000&currency=usd")
		_, inv := directPost(t, e, "/v1/invoices", "customer="+id(cus)+"&auto_advance=false&pending_invoice_items_behavior=include")
		if _, fin := directPost(t, e, "/v1/invoices/"+id(inv)+"/finalize", ""); fin["status"] != "open" {
			t.Fatalf("finalize: %v", fin)
		}
		return id(cus), id(inv)
	}
	mine, myInvoice := openInvoice(t)
	_, theirs := openInvoice(t)
	a := newAttacker(t, e, `{"total_usd_cap":10,"allowed_endpoints":["*"],"allow_unpriced":true,"allowed_customers":["`+mine+`"]}`)
	a.must(t, http.StatusForbidden, "POST", "/v1/invoices/"+theirs+"/pay", "")
	a.must(t, http.StatusForbidden, "POST", "/v1/invoices/"+theirs+"/send", "")
	a.must(t, 200, "POST", "/v1/invoices/"+myInvoice+"/pay", "")
	paid := 0
	for _, inv := range e.Sim.GroundTruth().Invoices {
		if inv.AmountPaid > 0 {
			paid++
			if inv.ID == theirs {
				t.Fatalf("another customer's invoice %s was paid", theirs)
			}
		}
	}
	if paid != 1 {
		t.Fatalf("%d invoices paid, want the key's own customer's", paid)
	}
}

// TestAttackRules_LegacyChargeDestination: a charge's legacy destination
// (destination=acct_…, or destination[account] and [amount]) makes it a
// destination charge, funds sent on to that connected account, as
// transfer_data[destination] does; a key whose field rule forbids
// transfers ("!has(transfer_data)") let a charge through with destination,
// which the rule never saw. A charge's destination is now bound as its
// transfer_data too (has(transfer_data), transfer_data.destination,
// transfer_data.amount).
func TestAttackRules_LegacyChargeDestination(t *testing.T) {
	e := MustOpen(t)
	for _, rule := range []string{`!has(transfer_data)`, `!has(transfer_data) || transfer_data.destination == 'acct_1'`} {
		a := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"],"guards":{"rules":[{"name":"no_transfers","operations":["charges.create"],"expr":"`+rule+`"}]}}`)
		for _, body := range []string{
			"amount=1000&currency=usd&source=tok_visa&transfer_data[destination]=acct_2",
			"amount=1000&currency=usd&source=tok_visa&destination=acct_2",
			"amount=1000&currency=usd&source=tok_visa&destination[account]=acct_2&destination[amount]=900",
		} {
			a.must(t, http.StatusForbidden, "POST", "/v1/charges", body)
		}
		a.must(t, 200, "POST", "/v1/charges", "amount=1000&currency=usd&source=tok_visa")
	}
}

// TestAttackApproval_PriceRaisedAfterApproval: an approval covers a
// request by its parameters, but a confirm of an intent the key holds
// nothing on is priced by looking the intent up: a person approved
// confirming a $60.00 intent, its amount was then raised to $5,000.00
// outside the key's approval (the operator's own backend, or another
// key), and the approved retry confirmed $5,000.00. An approved request
// now goes through only at no more than the amount the person saw.
func TestAttackApproval_PriceRaisedAfterApproval(t *testing.T) {
	e := MustOpen(t)
	a := newAttacker(t, e, `{"total_usd_cap":10000,"allowed_endpoints":["*"],"approval":{"above_usd":50}}`)
	_, pi := directPost(t, e, "/v1/payment_intents", "amount=6000&currency=usd&payment_method=pm_card_visa")
	idem := Header{"Idempotency-Key", "confirm-1"}
	v := a.must(t, http.StatusPaymentRequired, "POST", "/v1/payment_intents/"+id(pi)+"/confirm", "", idem)
	apr, _ := v["error"].(map[string]any)["keybrake"].(map[string]any)["approval_id"].(string)
	if resp, out := e.Admin(t, "POST", "/vault/approvals/"+apr+"/approve", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("approve %s: %d %s", apr, resp.StatusCode, out)
	}
	directPost(t, e, "/v1/payment_intents/"+id(pi), "amount=500000")
	if status, v := a.call(t, "POST", "/v1/payment_intents/"+id(pi)+"/confirm", "", idem); status == http.StatusOK {
		t.Fatalf("the approved $60.00 confirm moved %v", v["amount"])
	}
	if cents := e.movedCents(); cents != 0 {
		t.Fatalf("%d cents moved past the approval of $60.00", cents)
	}
	// Lowered back to what was approved, the approved retry goes through.
	directPost(t, e, "/v1/payment_intents/"+id(pi), "amount=6000")
	a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi)+"/confirm", "", idem)
}

// TestAttackDelegate_ChildChargesAfterEscrowReturned: a child's escrow is
// returned to its parent once the child is revoked or expired and nothing
// of it is live, at what the child counted. A request on the child
// decided on a clock before the child's end (a replica up to twice
// MaxClockSkew behind the one that revoked, or a request that read its
// time before a slow commit) reserved after the return: its $50.00 charge
// went through while the parent spent its whole $100 cap again, $150 moved
// under a total cap of $100. Reserve now refuses a revoked key whatever
// the request's time, and an expired child is closed (revoked at its
// expiry) before its escrow returns.
func TestAttackDelegate_ChildChargesAfterEscrowReturned(t *testing.T) {
	ctx := context.Background()
	for _, end := range []string{"revoked", "expired"} {
		t.Run(end, func(t *testing.T) {
			e := MustOpen(t)
			t0 := e.Clock.Now()
			expires := t0.Add(time.Hour)
			parentID, parentSecret := e.CreateKey(t, `{"total_usd_cap":100,"allowed_endpoints":["charges.create"],"mint":true}`)
			parent := &attacker{e: e, keyID: parentID, secret: parentSecret}
			status, v := mint(t, e, "/vault/keys/self/children", parentSecret,
				`{"total_usd_cap":50,"expires_at":"`+expires.Format(time.RFC3339)+`"}`)
			if status != http.StatusCreated {
				t.Fatalf("mint: %d %v", status, v)
			}
			child := &attacker{e: e, keyID: v["id"].(string), secret: v["vault_key"].(string)}

			// The child ends on the clock of one replica, and its escrow
			// returns (at once on a revocation, on the resolver's pass at
			// the expiry).
			var ended time.Time
			if end == "revoked" {
				ended = t0.Add(2 * time.Second)
				e.Clock.Set(ended)
				if resp, out := e.Admin(t, "POST", "/vault/keys/"+child.keyID+"/revoke", ""); resp.StatusCode != http.StatusOK {
					t.Fatalf("revoke: %d %s", resp.StatusCode, out)
				}
			} else {
				ended = expires
				e.Clock.Set(ended)
				if n, err := e.Store.ReturnEscrows(ctx, ended, 0); err != nil || n != 1 {
					t.Fatalf("resolver pass: %d, %v", n, err)
				}
			}
			if sp := e.Spend(t, parentID); sp.Total != 0 {
				t.Fatalf("parent after the child's end: %+v, want its escrow returned", sp)
			}
			parent.must(t, http.StatusOK, "POST", "/v1/charges", "amount=10000&currency=usd&source=tok_visa")

			// A request on the child decided before its end (the replica
			// 2 s behind) reaches the store after the return.
			e.Clock.Set(ended.Add(-2 * time.Second))
			if status, v := child.call(t, "POST", "/v1/charges", "amount=5000&currency=usd&source=tok_visa"); status != http.StatusUnauthorized {
				t.Errorf("child's charge after its escrow returned: %d %v, want 401", status, v)
			}
			if moved := e.movedCents(); moved > 100_00 {
				t.Fatalf("moved %d cents under the parent's total cap of 10000", moved)
			}
		})
	}
}

// TestAttackReplicas_RevocationLateOnSkewedClock: a key is revoked at the
// revoking replica's time, and a replica whose clock was behind it (each
// may be MaxClockSkew off the database's) kept forwarding the key's
// charges until its own clock reached revoked_at: up to 4 s of money after
// the revocation committed. A revocation is now final whatever the
// request's time: the store reads revoked_at in the transaction that
// reserves, under the key's lock.
func TestAttackReplicas_RevocationLateOnSkewedClock(t *testing.T) {
	e := MustOpen(t)
	t0 := e.Clock.Now()
	a := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["charges.create"]}`)
	e.Clock.Set(t0.Add(4 * time.Second)) // the revoking replica, 2 s ahead
	if resp, out := e.Admin(t, "POST", "/vault/keys/"+a.keyID+"/revoke", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke: %d %s", resp.StatusCode, out)
	}
	e.Clock.Set(t0) // the replica reserving, 2 s behind
	if status, v := a.call(t, "POST", "/v1/charges", "amount=1000&currency=usd&source=tok_visa"); status != http.StatusUnauthorized {
		t.Errorf("charge after the revocation committed: %d %v, want 401", status, v)
	}
	if n := len(e.Sim.GroundTruth().Charges); n != 0 {
		t.Fatalf("%d charges after the key was revoked", n)
	}
}
