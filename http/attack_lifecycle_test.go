package http_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/keybrake/keybrake/stripesim"
)

// invoices.create was free with auto_advance=false: the draft "cannot
// finalize or collect by itself". But creating it also takes the
// customer's pending invoice items when pending_invoice_items_behavior is
// include, or when it is not sent under a Stripe-Version before 2022-08-01
// (the default was include_and_require), and those items then never reach
// the invoice that would have billed them. A pending credit (a negative
// item: a goodwill refund, a downgrade's proration) parked on a draft
// that never advances raises what the customer's next invoice collects by
// itself (a subscription's renewal, the operator's monthly run), like
// deleting the credit (invoiceitems.delete, unpriced). A key capped at $10
// without allow_unpriced took a $500 credit away: the next invoice charged
// the customer $1,000 instead of $500, $500 nobody counted. A free draft
// now needs pending_invoice_items_behavior=exclude, sent.
func TestAttackInvoices_DraftTakesPendingCredit(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":10,"allowed_endpoints":["*"]}`)
		_, cus := directPost(t, e, "/v1/customers", "invoice_settings[default_payment_method]=pm_card_visa")
		directPost(t, e, "/v1/invoiceitems", "customer="+id(cus)+"&amount=-50000&currency=usd&description=goodwill")
		include, _ := a.call(t, "POST", "/v1/invoices", "customer="+id(cus)+"&auto_advance=false&pending_invoice_items_behavior=include")
		legacy, _ := a.call(t, "POST", "/v1/invoices", "customer="+id(cus)+"&auto_advance=false", Header{"Stripe-Version", "2020-08-27"})
		// A draft that leaves the pending items alone stays free.
		a.must(t, 200, "POST", "/v1/invoices", "customer="+id(cus)+"&auto_advance=false&pending_invoice_items_behavior=exclude")

		// The operator's next invoice: the month's $1,000 less the credit.
		directPost(t, e, "/v1/invoiceitems", "customer="+id(cus)+"&amount=100000&currency=usd&description=plan")
		directPost(t, e, "/v1/invoices", "customer="+id(cus)+"&auto_advance=true&pending_invoice_items_behavior=include")
		e.Sim.Advance(3 * time.Hour)
		if moved := e.movedCents(); moved != 50000 {
			t.Fatalf("the next invoice charged %d cents; the operator billed 50000 (the credit was taken by the key's draft)", moved)
		}
		if include != 403 || legacy != 403 {
			t.Fatalf("drafts taking the pending items: %d (include), %d (Stripe-Version 2020-08-27, not sent); want 403", include, legacy)
		}
		if got := e.Spend(t, a.keyID).Total; got != 0 {
			t.Fatalf("spend %s", got)
		}
	})
}

// A charge whose answer keybrake lost stays counted (uncertain) until the
// resolver finds out what became of it: by replaying it inside Stripe's
// 24-hour idempotency window, past it by searching for the
// metadata[keybrake_idempotency_key] tag keybrake puts on the charge, and
// "no object found" releases the reservation. Replays can fail for a day
// (Stripe saves and replays a request's 500 for 24 hours; a rate-limited
// account answers 429). Meanwhile the key holder, who got keybrake's 502
// and can list its charges, removed the tag from the $90 charge with a free
// charges.update (metadata[keybrake_idempotency_key]=, or metadata= which
// clears every key), and the resolver released the reservation: $90 moved,
// $0 counted. With a second key it did not even need the edit: once Stripe
// had forgotten the Idempotency-Key, the other key's declined charge under
// the same key carried the same tag, and the search's first hit, a failed
// charge, released the $90 too. The tag is now keybrake's alone: a write
// to a charge or payment intent may not set, unset or clear it; and a search
// that finds more than one object leaves the reservation counted for an
// operator.
func TestAttackResolver_MetadataTagEdited(t *testing.T) {
	lose := func(t *testing.T, e *Env, a *attacker) stripesim.Charge {
		t.Helper()
		e.Sim.AddFault(stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultCutAfter, Count: 1})
		if status, v := a.call(t, "POST", "/v1/charges", "amount=9000&currency=usd&source=tok_visa", Header{"Idempotency-Key", "order-7"}); status != 502 {
			t.Fatalf("charge with its answer cut: %d %v", status, v)
		}
		chs := e.Sim.GroundTruth().Charges
		if len(chs) != 1 || chs[0].Metadata["keybrake_idempotency_key"] != "order-7" {
			t.Fatalf("charges upstream: %+v", chs)
		}
		return chs[0]
	}
	t.Run("Edited", func(t *testing.T) {
		eachStore(t, func(t *testing.T, e *Env) {
			a := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"]}`)
			ch := lose(t, e, a)
			unset, _ := a.call(t, "POST", "/v1/charges/"+ch.ID, "metadata[keybrake_idempotency_key]=")
			cleared, _ := a.call(t, "POST", "/v1/charges/"+ch.ID, "metadata=")
			other, _ := a.call(t, "POST", "/v1/charges/"+ch.ID, "metadata[keybrake_idempotency_key]=order-8")
			// Edits of other metadata stay free.
			a.must(t, 200, "POST", "/v1/charges/"+ch.ID, "metadata[order]=7&description=x")
			e.Clock.Advance(25 * time.Hour)
			e.MustResolve(t)
			a.wantMoneyComplete(t, 10000)
			if unset != 400 || cleared != 400 || other != 400 {
				t.Fatalf("tag edits: %d (unset), %d (metadata=), %d (another value); want 400", unset, cleared, other)
			}
		})
	})
	t.Run("SecondKey", func(t *testing.T) {
		eachStore(t, func(t *testing.T, e *Env) {
			a := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"]}`)
			b := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"]}`)
			lose(t, e, a)
			e.Clock.Advance(25 * time.Hour)
			b.must(t, 402, "POST", "/v1/charges", "amount=100&currency=usd&source=tok_chargeDeclined", Header{"Idempotency-Key", "order-7"})
			for i := 0; i < 3; i++ {
				if _, err := e.Server.Resolve(context.Background()); err != nil {
					t.Fatal(err)
				}
				e.Clock.Advance(3 * time.Minute)
			}
			a.wantMoneyComplete(t, 10000)
		})
	})
}

// tax.settings.update and tax registrations were free ("tax settings; no
// payment is made"), while prices.update with tax_behavior is unpriced
// because it changes what existing integrations charge. The account's
// default tax behavior applies to every price without one: turned from
// inclusive to exclusive, every subscription and invoice with automatic
// tax adds the tax on top of what it collected before, by itself, on
// every renewal; a registration makes Stripe Tax collect tax in one more
// jurisdiction on those same invoices (up to 27% in Hungary). A key capped
// at $10 without allow_unpriced raised, with free writes, what every
// automatic-tax subscription of the account charges. These writes are now
// unpriced.
func TestAttackTax_SettingsRaiseSelfCollectingInvoices(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":10,"allowed_endpoints":["*"]}`)
		for _, c := range []struct{ path, body string }{
			{"/v1/tax/settings", "defaults[tax_behavior]=exclusive"},
			{"/v1/tax/settings", "head_office[address][country]=US&head_office[address][state]=TX&head_office[address][postal_code]=78701"},
			{"/v1/tax/registrations", "country=HU&country_options[hu][type]=standard&active_from=now"},
			{"/v1/tax/registrations/taxreg_1", "active_from=now"},
		} {
			if status, v := a.call(t, "POST", c.path, c.body); status != 403 {
				t.Errorf("POST %s %q: %d %v, want the unpriced 403", c.path, c.body, status, v)
			}
		}
	})
}

// The resolver released a lost answer's reservation on any 4xx to its
// replay, taking it for the answer Stripe saved. But Stripe answers 401 or
// 403 before its idempotency layer, and saves no such answer: the key can
// no longer reach the account. A key holder whose $90 charge on its own
// connected account (Stripe-Account) lost its answer disconnected that
// account from the platform (a Standard account can, from its own
// Dashboard; a Custom one with an empty balance is deleted by a free
// accounts.delete): every replay was answered 403, and the resolver
// released the reservation, $90 moved and $0 counted. A 401 or 403 now
// leaves the reservation counted, for the resolver's next pass or an
// operator.
func TestAttackResolver_AccountGoneReleases(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"]}`)
		acct := Header{"Stripe-Account", "acct_1Attacker"}
		e.Sim.AddFault(stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultCutAfter, Count: 1})
		if status, v := a.call(t, "POST", "/v1/charges", "amount=9000&currency=usd&source=tok_visa", acct); status != 502 {
			t.Fatalf("charge with its answer cut: %d %v", status, v)
		}
		// The account is gone for keybrake's key: Stripe answers 403.
		e.Sim.AddFault(stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultFailBefore, Status: 403})
		for i := 0; i < 3; i++ {
			if _, err := e.Server.Resolve(context.Background()); err != nil {
				t.Fatal(err)
			}
			e.Clock.Advance(3 * time.Minute)
		}
		a.wantMoneyComplete(t, 10000)
	})
}

// The resolver leaves a lost answer's reservation counted when a replay is
// answered 401, 403 or 429 (answers Stripe gives before its idempotency
// layer and never saves), but the key holder's own retry of the same
// Idempotency-Key, sent to any replica, settled the reservation it
// replayed by the same rule as a first request: any other 4xx released it.
// A key holder whose $90 charge lost its answer disconnected the account
// (403 from then on), or drove the account into Stripe's rate limit with
// free reads (429), and retried once: the reservation was released, $90
// moved and $0 counted. A replay answered so now leaves it uncertain.
func TestAttackResolver_ClientReplayAnsweredUnsaved(t *testing.T) {
	for _, status := range []int{403, 401, 429} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			eachStore(t, func(t *testing.T, e *Env) {
				a := newAttacker(t, e, `{"total_usd_cap":100,"allowed_endpoints":["*"]}`)
				acct := Header{"Stripe-Account", "acct_1Attacker"}
				idem := Header{"Idempotency-Key", "lost-answer-1"}
				e.Sim.AddFault(stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultCutAfter, Count: 1})
				if got, v := a.call(t, "POST", "/v1/charges", "amount=9000&currency=usd&source=tok_visa", acct, idem); got != 502 {
					t.Fatalf("charge with its answer cut: %d %v", got, v)
				}
				e.Sim.AddFault(stripesim.Fault{Method: "POST", Path: "/v1/charges", Mode: stripesim.FaultFailBefore, Status: status})
				if got, v := a.call(t, "POST", "/v1/charges", "amount=9000&currency=usd&source=tok_visa", acct, idem); got != status {
					t.Fatalf("the key holder's retry: %d %v; want the upstream's %d", got, v, status)
				}
				a.wantMoneyComplete(t, 10000)
			})
		})
	}
}
