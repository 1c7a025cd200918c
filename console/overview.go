package console

import (
	"context"
	"net/http"
	"time"

	"github.com/keybrake/keybrake"
)

// chartSpan is how far back the spend charts reach.
const chartSpan = 7 * 24 * time.Hour

// overview is the overview page's numbers.
type overview struct {
	Keys       int
	ActiveKeys int
	DayStart   time.Time
	SpendToday keybrake.Micros
	Counts     keybrake.EventCounts
	Open       keybrake.OpenAmounts
	Chart      any
	ChartSpend keybrake.Micros
}

func (c *Console) serveOverview(w http.ResponseWriter, r *http.Request) {
	ov, err := c.overview(r.Context(), "")
	if err != nil {
		c.fail(w, r, err)
		return
	}
	events, _, err := c.events(r.Context(), keybrake.EventFilter{Limit: 10})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "overview.html", page{Title: "Overview", Nav: "overview",
		Stream: "/console/stream?after=" + newest(events),
		Data:   map[string]any{"Overview": ov, "Feed": feed{Events: events, ShowKey: true}}})
}

// overview gathers the overview's numbers, for every key or one.
func (c *Console) overview(ctx context.Context, keyID string) (*overview, error) {
	now := c.Now().UTC()
	ov := &overview{DayStart: now.Truncate(24 * time.Hour)}
	if keyID == "" {
		keys, err := c.allKeys(ctx)
		if err != nil {
			return nil, err
		}
		ov.Keys = len(keys)
		for i := range keys {
			if status(&keys[i].Key, now) == "active" {
				ov.ActiveKeys++
			}
		}
	}
	c.flush()
	var err error
	if ov.Counts, err = c.Store.CountEvents(ctx, keybrake.StatsFilter{KeyID: keyID, From: ov.DayStart, To: now.Add(time.Second)}); err != nil {
		return nil, err
	}
	if ov.Open, err = c.Store.OpenAmounts(ctx, keyID); err != nil {
		return nil, err
	}
	from, to := now.Add(-chartSpan).Truncate(time.Hour).Add(time.Hour), now.Truncate(time.Hour).Add(time.Hour)
	points, err := c.Store.SpendByHour(ctx, keybrake.StatsFilter{KeyID: keyID, From: from, To: to})
	if err != nil {
		return nil, err
	}
	for _, p := range points {
		ov.ChartSpend += p.Micros
		if !p.Start.Before(ov.DayStart) {
			ov.SpendToday += p.Micros
		}
	}
	ov.Chart = chart(points, from, to)
	return ov, nil
}

func (c *Console) flush() {
	if c.FlushAudit != nil {
		c.FlushAudit()
	}
}
