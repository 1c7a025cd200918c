package http_test

import (
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// TestAttackAlert_HoldMovedPastMidnight: a hold raised on a later day
// moves into that day whole (keybrake.RaiseBuckets), but on SQLite the move
// wrote the counters directly and the threshold trigger saw only the
// raise's difference. A key holder with a $10 daily cap held $9 at 23:30,
// raised it by 50 cents after midnight and confirmed it: $9.50 of the new
// day's $10 moved with neither its 50% nor its 80% alert, the operator's
// only warning that the day's budget was nearly gone. The move now checks
// the thresholds of the buckets it fills, as PostgreSQL's counter trigger
// always did.
func TestAttackAlert_HoldMovedPastMidnight(t *testing.T) {
	eachStore(t, func(t *testing.T, e *Env) {
		a := newAttacker(t, e, `{"daily_usd_cap":10,"allowed_endpoints":["*"]}`)
		e.Clock.Set(time.Date(2026, 11, 30, 23, 30, 0, 0, time.UTC))
		pi := a.must(t, 200, "POST", "/v1/payment_intents", "amount=900&currency=usd&payment_method=pm_card_visa")
		e.Clock.Set(time.Date(2026, 12, 1, 0, 10, 0, 0, time.UTC))
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi), "amount=950")
		a.must(t, 200, "POST", "/v1/payment_intents/"+id(pi)+"/confirm", "")
		got := map[string]bool{}
		for _, al := range thresholdAlertList(t, e.Server.Store, a.keyID) {
			got[al.AlertKey] = true
		}
		for _, p := range []string{"50", "80"} {
			if k := "threshold:" + a.keyID + ":daily:2026-12-01:" + p; !got[k] {
				t.Errorf("no %s%% alert for 2026-12-01, where $9.50 of $10 moved (alerts: %v)", p, got)
			}
		}
		a.wantMoneyComplete(t, 950)
	})
}

// thresholdAlertList returns keyID's threshold alerts.
func thresholdAlertList(t *testing.T, store keybrake.Store, keyID string) []*keybrake.Alert {
	t.Helper()
	as, err := store.FindAlerts(t.Context(), keybrake.AlertFilter{KeyID: keyID, Kind: keybrake.AlertThreshold, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return as
}
