package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
)

// The Alerts page shows the alert rules and the webhook delivery log from
// the admin API's alert routes, when this build has them; until then it
// says so. It reads the answers generically (a list's "data" objects,
// each field a column), so it works with whatever fields the rules and
// deliveries carry.
const (
	alertRulesPath      = "/vault/alerts/rules"
	alertDeliveriesPath = "/vault/alerts/deliveries"
	alertTestPath       = "/vault/alerts/test"
)

// table is a generic table of a list's objects.
type table struct {
	Columns []string
	Rows    [][]string
}

func (c *Console) serveAlerts(w http.ResponseWriter, r *http.Request) {
	rules, rerr := c.alertTable(r, alertRulesPath)
	deliveries, derr := c.alertTable(r, alertDeliveriesPath)
	data := map[string]any{"Available": rerr == nil || derr == nil, "Rules": rules, "Deliveries": deliveries}
	switch r.URL.Query().Get("test") {
	case "sent":
		data["Flash"] = "Test alert queued; it appears in the delivery log once sent."
	case "failed":
		data["Flash"] = "The test alert could not be queued."
	}
	c.render(w, r, http.StatusOK, "alerts.html", page{Title: "Alerts", Nav: "alerts", Data: data})
}

// serveAlertTest asks the admin API to send a test alert.
func (c *Console) serveAlertTest(w http.ResponseWriter, r *http.Request) {
	if err := c.admin(r.Context(), http.MethodPost, alertTestPath, map[string]any{}, nil); err != nil {
		c.Logger.Warn("console test alert", "err", err)
		http.Redirect(w, r, "/console/alerts?test=failed", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/console/alerts?test=sent", http.StatusSeeOther)
}

// alertTable reads a list from the admin API as a table.
func (c *Console) alertTable(r *http.Request, path string) (*table, error) {
	var list struct {
		Data []map[string]any `json:"data"`
	}
	if err := c.admin(r.Context(), http.MethodGet, path+"?limit=100", nil, &list); err != nil {
		return nil, err
	}
	t := &table{}
	seen := map[string]bool{}
	for _, o := range list.Data {
		for k := range o {
			if !seen[k] {
				seen[k] = true
				t.Columns = append(t.Columns, k)
			}
		}
	}
	sort.Strings(t.Columns)
	for _, o := range list.Data {
		row := make([]string, len(t.Columns))
		for i, col := range t.Columns {
			switch v := o[col].(type) {
			case nil:
				row[i] = "—"
			case string:
				row[i] = v
			default:
				b, _ := json.Marshal(v)
				row[i] = fmt.Sprint(string(b))
			}
		}
		t.Rows = append(t.Rows, row)
	}
	return t, nil
}
