package stripesim_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/keybrake/keybrake/stripesim"
)

func TestMoved(t *testing.T) {
	e := MustEnv(t)
	post := func(path, body string, headers ...string) string {
		t.Helper()
		r := e.do(t, "POST", path, body, headers...)
		wantStatus(t, r, 200)
		return r.object(t)["id"].(string)
	}
	full := post("/v1/charges", form("amount", "1000", "currency", "usd", "source", "tok_visa"))
	post("/v1/charges", form("amount", "500", "currency", "usd", "source", "tok_visa", "capture", "false"))
	partial := post("/v1/charges", form("amount", "2000", "currency", "usd", "source", "tok_visa", "capture", "false"))
	post("/v1/charges/"+partial+"/capture", form("amount", "1500"))
	wantStatus(t, e.do(t, "POST", "/v1/charges", form("amount", "900", "currency", "usd", "source", "tok_chargeDeclined")), 402)
	post("/v1/charges", form("amount", "700", "currency", "eur", "source", "tok_visa"), "Stripe-Account", "acct_1")
	post("/v1/transfers", form("amount", "300", "currency", "usd", "destination", "acct_2"))
	post("/v1/payouts", form("amount", "200", "currency", "usd"))
	post("/v1/refunds", form("charge", full, "amount", "400"))

	got := e.sim.Moved()
	platform := stripesim.Flow{
		Captured: map[string]int64{"usd": 2500}, Transferred: map[string]int64{"usd": 300},
		PaidOut: map[string]int64{"usd": 200}, Refunded: map[string]int64{"usd": 400}, Total: map[string]int64{"usd": 3000},
	}
	acct1 := stripesim.Flow{
		Captured: map[string]int64{"eur": 700}, Transferred: map[string]int64{}, PaidOut: map[string]int64{},
		Refunded: map[string]int64{}, Total: map[string]int64{"eur": 700},
	}
	total := stripesim.Flow{
		Captured: map[string]int64{"usd": 2500, "eur": 700}, Transferred: map[string]int64{"usd": 300},
		PaidOut: map[string]int64{"usd": 200}, Refunded: map[string]int64{"usd": 400}, Total: map[string]int64{"usd": 3000, "eur": 700},
	}
	want := stripesim.MoneyMoved{Total: total, Accounts: map[string]stripesim.Flow{"": platform, "acct_1": acct1}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Moved() =\n%+v\nwant\n%+v", got, want)
	}

	r := e.do(t, "GET", "/_sim/moved", "", "Authorization", "")
	wantStatus(t, r, 200)
	var viaHTTP stripesim.MoneyMoved
	if err := json.Unmarshal(r.body, &viaHTTP); err != nil || !reflect.DeepEqual(viaHTTP, want) {
		t.Fatalf("GET /_sim/moved = %s (%v)", r.body, err)
	}
}
