package twiliosim_test

import (
	"testing"
	"time"

	api "github.com/twilio/twilio-go/rest/api/v2010"

	"github.com/keybrake/keybrake/twiliosim"
)

// The Messages list as Twilio documents it: most recently sent first,
// unsent messages (date_sent null) first and never matched by a DateSent
// filter, DateSent by GMT day or instant, inclusive.
func TestListMessagesFilters(t *testing.T) {
	sim, tw := mustServer(t, twiliosim.Options{})
	send := func(to string) string {
		m, err := tw.Api.CreateMessage((&api.CreateMessageParams{}).SetTo(to).SetFrom("+14155550199").SetBody("hi"))
		if err != nil {
			t.Fatal(err)
		}
		return *m.Sid
	}
	first := send("+14155550100")
	sim.Advance(24 * time.Hour) // first is sent on day 1
	second := send("+14155550100")
	sim.Advance(10 * time.Second) // second is sent on day 2
	third := send("+14155550100") // still queued: date_sent null
	send("+14155550111")          // another number

	list := func(p *api.ListMessageParams) []string {
		t.Helper()
		ms, err := tw.Api.ListMessage(p.SetTo("+14155550100").SetPageSize(1))
		if err != nil {
			t.Fatal(err)
		}
		var sids []string
		for _, m := range ms {
			sids = append(sids, *m.Sid)
		}
		return sids
	}
	equal := func(name string, got []string, want ...string) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s = %v, want %v", name, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s = %v, want %v", name, got, want)
			}
		}
	}
	equal("all, paged by 1", list(&api.ListMessageParams{}), third, second, first)
	day2 := sim.Now().UTC().Truncate(24 * time.Hour)
	equal("DateSent day 2", list((&api.ListMessageParams{}).SetDateSent(day2)), second)
	equal("DateSent> day 2 instant", list((&api.ListMessageParams{}).SetDateSentAfter(day2)), second)
	equal("DateSent< day 2 midnight", list((&api.ListMessageParams{}).SetDateSentBefore(day2)), first)
	equal("DateSent> now", list((&api.ListMessageParams{}).SetDateSentAfter(sim.Now().Add(time.Second))))
}
