package http_test

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/keybrake/keybrake/stripesim"
)

// FuzzMoneyComplete plays a script of attacker moves against a key capped
// at $50.00 total: intents created with and without confirm, manual
// captures, updates that raise or change currency, confirms through
// keybrake and in the browser with the client secret, captures, cancels,
// increments, authorizations, refunds, lost answers and expired holds, each
// with a header variant. After resolving what is uncertain, the ground truth
// must hold: what moved at the simulator never exceeds the cap, and what
// keybrake counts is never below what moved.
//
// The script is read three bytes a move: the move, an amount byte and an
// object/variant byte. `go test` runs the seed corpus; run it longer with
// go test -run '^$' -fuzz FuzzMoneyComplete -fuzztime 2m ./http/
func FuzzMoneyComplete(f *testing.F) {
	f.Add([]byte{0, 10, 0, 3, 200, 0, 4, 0, 0, 5, 0, 0})                   // hold, raise over the cap, confirm both ways
	f.Add([]byte{2, 100, 0, 8, 200, 0, 6, 50, 0, 8, 255, 0})               // manual capture, increments around a partial capture
	f.Add([]byte{9, 120, 0, 10, 0, 0, 11, 0, 0, 9, 120, 1})                // authorize, capture, refund, authorize again
	f.Add([]byte{13, 0, 0, 0, 30, 0, 5, 0, 0, 12, 0, 0, 0, 30, 0})         // lost create answered by the resolver, browser confirm, sweep
	f.Add([]byte{0, 40, 0, 3, 60, 3, 7, 0, 0, 0, 40, 2, 4, 0, 1, 5, 0, 1}) // currency change, cancel, Stripe-Context
	f.Add([]byte{1, 80, 0, 1, 80, 0, 1, 80, 0, 0, 80, 0, 5, 0, 3})
	f.Fuzz(func(t *testing.T, script []byte) {
		if len(script) > 90 {
			script = script[:90]
		}
		e := MustOpen(t)
		a := newAttacker(t, e, `{"total_usd_cap":50,"allowed_endpoints":["*"]}`)
		var intents, charges []map[string]any
		pick := func(list []map[string]any, b byte) string {
			if len(list) == 0 {
				return "pi_none"
			}
			return id(list[int(b)%len(list)])
		}
		keep := func(list *[]map[string]any, method, path, body string, h []Header) {
			if status, v := a.call(t, method, path, body, h...); status == 200 && id(v) != "" {
				*list = append(*list, v)
			}
		}
		for i := 0; i+2 < len(script); i += 3 {
			move, x, y := script[i], script[i+1], script[i+2]
			amount := 50 + int(x)*40 // $0.50 to $102.50
			var h []Header
			if y&4 != 0 {
				h = append(h, Header{"Stripe-Context", "acct_1"})
			}
			pi, ch := pick(intents, y>>3), pick(charges, y>>3)
			switch move % 14 {
			case 0:
				keep(&intents, "POST", "/v1/payment_intents", fmt.Sprintf("amount=%d&currency=usd&payment_method=pm_card_visa", amount), h)
			case 1:
				keep(&intents, "POST", "/v1/payment_intents", fmt.Sprintf("amount=%d&currency=usd&payment_method=pm_card_visa&confirm=true", amount), h)
			case 2:
				keep(&intents, "POST", "/v1/payment_intents", fmt.Sprintf("amount=%d&currency=usd&payment_method=pm_card_visa&confirm=true&capture_method=manual", amount), h)
			case 3:
				body := fmt.Sprintf("amount=%d", amount)
				if y&3 == 3 {
					body += "&currency=eur"
				}
				a.call(t, "POST", "/v1/payment_intents/"+pi, body, h...)
			case 4:
				a.call(t, "POST", "/v1/payment_intents/"+pi+"/confirm", "", h...)
			case 5:
				if len(intents) > 0 {
					a.browserConfirm(t, intents[int(y>>3)%len(intents)])
				}
			case 6:
				body := ""
				if x < 128 {
					body = fmt.Sprintf("amount_to_capture=%d", amount)
				}
				a.call(t, "POST", "/v1/payment_intents/"+pi+"/capture", body, h...)
			case 7:
				a.call(t, "POST", "/v1/payment_intents/"+pi+"/cancel", "", h...)
			case 8:
				a.call(t, "POST", "/v1/payment_intents/"+pi+"/increment_authorization", fmt.Sprintf("amount=%d", amount), h...)
			case 9:
				keep(&charges, "POST", "/v1/charges", fmt.Sprintf("amount=%d&currency=usd&source=tok_visa&capture=false", amount), h)
			case 10:
				body := ""
				if x < 128 {
					body = fmt.Sprintf("amount=%d", amount)
				}
				a.call(t, "POST", "/v1/charges/"+ch+"/capture", body, h...)
			case 11:
				a.call(t, "POST", "/v1/refunds", "charge="+url.QueryEscape(ch), h...)
			case 12:
				// The resolver runs every few seconds in production: a lost
				// answer is resolved long before a hold expires.
				e.Sim.ClearFaults()
				e.MustResolve(t)
				e.Clock.Advance(e.Server.HoldTTL + time.Minute)
				if _, err := e.Server.SweepHolds(t.Context()); err != nil {
					t.Fatal(err)
				}
			case 13:
				modes := []string{stripesim.FaultCutAfter, stripesim.FaultFailAfter, stripesim.FaultFailBefore}
				if _, err := e.Sim.AddFault(stripesim.Fault{Method: "POST", Path: "/v1/*", Mode: modes[int(x)%3], Count: 1}); err != nil {
					t.Fatal(err)
				}
			}
		}
		e.Sim.ClearFaults()
		e.MustResolve(t)
		a.wantMoneyComplete(t, 5000)
	})
}
