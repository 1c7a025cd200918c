package console

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
)

// feed is a table of events; ShowKey adds the key column.
type feed struct {
	Events  []*keybrake.Event
	ShowKey bool
}

// events reads a page of the audit log after flushing the queued events.
func (c *Console) events(ctx context.Context, f keybrake.EventFilter) ([]*keybrake.Event, bool, error) {
	c.flush()
	return c.Store.FindEvents(ctx, f)
}

// newest is the ID of the newest event shown, where a live feed resumes.
func newest(events []*keybrake.Event) string {
	if len(events) == 0 {
		return "0"
	}
	return strconv.FormatInt(events[0].ID, 10)
}

// auditFilter is the audit log's filter form.
type auditFilter struct {
	Key, Decision, Operation, From, To string
	Before                             int64
}

// parseAuditFilter reads the filter; a bad value is reported, not ignored.
func parseAuditFilter(q url.Values) (auditFilter, keybrake.EventFilter, string) {
	a := auditFilter{Key: q.Get("key"), Decision: q.Get("decision"), Operation: strings.TrimSpace(q.Get("operation")), From: q.Get("from"), To: q.Get("to")}
	f := keybrake.EventFilter{Limit: 50, Decision: a.Decision, Operation: a.Operation}
	if a.Key != "" {
		if !validID(a.Key) {
			return a, f, "key must be a key ID like vk_…"
		}
		f.KeyID = a.Key
	}
	switch a.Decision {
	case "", keybrake.DecisionAllow, keybrake.DecisionDeny, keybrake.DecisionReplay, keybrake.DecisionResolve:
	default:
		return a, f, "decision must be allow, deny, replay or resolve"
	}
	for _, t := range []struct {
		v   string
		dst *time.Time
		n   string
	}{{a.From, &f.Since, "from"}, {a.To, &f.Until, "to"}} {
		if t.v == "" {
			continue
		}
		v, err := time.ParseInLocation("2006-01-02T15:04", t.v, time.UTC)
		if err != nil {
			return a, f, t.n + " must be a date and time like 2026-11-29T15:04 (UTC)"
		}
		*t.dst = v
	}
	if b := q.Get("before"); b != "" {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n <= 0 {
			return a, f, "before must be an event ID"
		}
		a.Before, f.StartingAfter = n, n
	}
	return a, f, ""
}

// query is the filter as a query string, without the page position.
func (a auditFilter) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"key": a.Key, "decision": a.Decision, "operation": a.Operation, "from": a.From, "to": a.To} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

func (c *Console) serveEvents(w http.ResponseWriter, r *http.Request) {
	a, f, bad := parseAuditFilter(r.URL.Query())
	keys, err := c.allKeys(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	data := map[string]any{"Filter": a, "Keys": keys, "Error": bad, "Decisions": []string{keybrake.DecisionAllow, keybrake.DecisionDeny, keybrake.DecisionReplay, keybrake.DecisionResolve}}
	if bad != "" {
		c.render(w, r, http.StatusBadRequest, "events.html", page{Title: "Audit log", Nav: "events", Data: data})
		return
	}
	events, more, err := c.events(r.Context(), f)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	data["Feed"] = feed{Events: events, ShowKey: true}
	data["Filtered"] = len(a.query()) > 0
	if more {
		q := a.query()
		q.Set("before", strconv.FormatInt(events[len(events)-1].ID, 10))
		data["Older"] = "/console/events?" + q.Encode()
	}
	stream := ""
	if a.Before == 0 && a.To == "" { // a page of the past does not grow
		q := a.query()
		q.Set("after", newest(events))
		stream = "/console/events/stream?" + q.Encode()
	}
	c.render(w, r, http.StatusOK, "events.html", page{Title: "Audit log", Nav: "events", Stream: stream, Data: data})
}
