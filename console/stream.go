package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
)

// heartbeatEvery polls sends a comment, so a dead connection is noticed
// and proxies keep the stream open; panelEvery polls the summary panel is
// re-rendered even without new events (the resolver and the hold sweeper
// change spend too).
const (
	heartbeatEvery = 30
	panelEvery     = 6
)

// panelFunc renders the live summary panel of a page: the element's id
// and its new inner HTML.
type panelFunc func(ctx context.Context) (id, html string, err error)

func (c *Console) serveOverviewStream(w http.ResponseWriter, r *http.Request) {
	c.stream(w, r, keybrake.EventFilter{}, true, func(ctx context.Context) (string, string, error) {
		ov, err := c.overview(ctx, "")
		if err != nil {
			return "", "", err
		}
		html, err := c.fragment("overview.html", "overview-panel", ov)
		return "overview-panel", html, err
	})
}

func (c *Console) serveKeyStream(w http.ResponseWriter, r *http.Request, id string) {
	c.stream(w, r, keybrake.EventFilter{KeyID: id}, false, func(ctx context.Context) (string, string, error) {
		k, err := c.key(ctx, id)
		if err != nil {
			return "", "", err
		}
		ov, err := c.overview(ctx, id)
		if err != nil {
			return "", "", err
		}
		html, err := c.fragment("key.html", "key-panel", keyPage{Row: newKeyRow(k, c.Now()), Overview: ov})
		return "key-panel", html, err
	})
}

func (c *Console) serveEventsStream(w http.ResponseWriter, r *http.Request) {
	_, f, bad := parseAuditFilter(r.URL.Query())
	if bad != "" {
		http.Error(w, bad, http.StatusBadRequest)
		return
	}
	f.StartingAfter, f.Until = 0, time.Time{}
	c.stream(w, r, f, true, nil)
}

// stream sends the events matching f newer than the page's newest (the
// "after" parameter, or Last-Event-ID on a reconnect) as Server-Sent
// Events: a "row" per event, oldest first, with the row's HTML, and a
// "panel" with the page's summary when it changed.
func (c *Console) stream(w http.ResponseWriter, r *http.Request, f keybrake.EventFilter, showKey bool, panel panelFunc) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "Streaming is not supported here.", http.StatusInternalServerError)
		return
	}
	after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	if id, err := strconv.ParseInt(r.Header.Get("Last-Event-ID"), 10, 64); err == nil && id > after {
		after = id
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n\n")
	fl.Flush()

	ctx := r.Context()
	tick := time.NewTicker(c.PollInterval)
	defer tick.Stop()
	lastPanel := ""
	sess, _ := ctx.Value(sessionKey{}).(*session)
	for n := 0; ; n++ {
		// A stream reads the store itself: it ends when its session's
		// admin token is revoked, as the session does.
		if n > 0 && n%panelEvery == 0 && sess != nil && c.sessionRevoked(r, sess) {
			return
		}
		f.NewerThan, f.Limit = after, 100
		events, _, err := c.events(ctx, f)
		if err != nil {
			if ctx.Err() == nil {
				c.Logger.Error("console stream", "err", err)
			}
			return
		}
		for i := len(events) - 1; i >= 0; i-- {
			e := events[i]
			html, err := c.fragment("overview.html", "event-row", eventRow{E: e, ShowKey: showKey})
			if err != nil {
				c.Logger.Error("console stream", "err", err)
				return
			}
			writeEvent(w, "row", strconv.FormatInt(e.ID, 10), html)
			after = e.ID
		}
		if panel != nil && (len(events) > 0 || n%panelEvery == 0) {
			id, html, err := panel(ctx)
			if err != nil {
				if ctx.Err() == nil {
					c.Logger.Error("console stream", "err", err)
				}
				return
			}
			if html != lastPanel {
				b, _ := json.Marshal(map[string]string{"id": id, "html": html})
				writeEvent(w, "panel", "", string(b))
				lastPanel = html
			}
		}
		if n%heartbeatEvery == heartbeatEvery-1 {
			fmt.Fprint(w, ": heartbeat\n\n")
		}
		fl.Flush()
		select {
		case <-ctx.Done():
			return
		case <-c.shutdown:
			return
		case <-tick.C:
		}
	}
}

// sseLines splits data at every line end of the event-stream format: CR
// LF, a lone LF and a lone CR. html/template leaves CR in text, and a row
// carries text the key holder chose (a refused customer ID, say), so a
// split at LF only let a lone CR end the data: line and start fields of
// the key holder's own (id:, event:, data:).
var sseLines = strings.NewReplacer("\r\n", "\n", "\r", "\n")

// writeEvent writes one Server-Sent Event; each line of data gets its own
// data: field, as the format requires.
func writeEvent(w http.ResponseWriter, name, id, data string) {
	var b strings.Builder
	b.WriteString("event: " + name + "\n")
	if id != "" {
		b.WriteString("id: " + id + "\n")
	}
	for _, line := range strings.Split(sseLines.Replace(data), "\n") {
		b.WriteString("data: " + line + "\n")
	}
	b.WriteString("\n")
	_, _ = w.Write([]byte(b.String()))
}

// eventRow is what the event-row template receives.
type eventRow struct {
	E       *keybrake.Event
	ShowKey bool
}
