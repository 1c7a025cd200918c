package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
)

// endpointIDPattern is what an endpoint id looks like; anything else never
// reaches the admin API's path.
var endpointIDPattern = regexp.MustCompile(`^[A-Za-z0-9_]{1,64}$`)

// endpointIDs returns the "id" column of the endpoints table.
func endpointIDs(t *table) []string {
	if t == nil {
		return nil
	}
	col := -1
	for i, c := range t.Columns {
		if c == "id" {
			col = i
		}
	}
	if col < 0 {
		return nil
	}
	var ids []string
	for _, row := range t.Rows {
		ids = append(ids, row[col])
	}
	return ids
}

// The Alerts page shows the alert rules, the webhook endpoints (each with a
// "send test alert" button) and the delivery log, from the admin API's
// alert routes (docs/alerts.md). It reads the answers generically (a list's
// "data" objects, each field a column), so a field added to the API shows
// up without a console change.
const (
	alertRulesPath      = "/vault/alerts/rules"
	alertEndpointsPath  = "/vault/alerts/endpoints"
	alertDeliveriesPath = "/vault/alerts/deliveries"
)

// table is a generic table of a list's objects.
type table struct {
	Columns []string
	Rows    [][]string
}

func (c *Console) serveAlerts(w http.ResponseWriter, r *http.Request) {
	rules, rerr := c.alertTable(r, alertRulesPath)
	endpoints, eerr := c.alertTable(r, alertEndpointsPath)
	deliveries, derr := c.alertTable(r, alertDeliveriesPath)
	data := map[string]any{"Available": rerr == nil || eerr == nil || derr == nil,
		"Rules": rules, "Endpoints": endpoints, "EndpointIDs": endpointIDs(endpoints), "Deliveries": deliveries}
	switch r.URL.Query().Get("test") {
	case "sent":
		data["Flash"] = "Test alert queued; it appears in the delivery log once sent."
	case "failed":
		data["Flash"] = "The test alert could not be queued."
	}
	c.render(w, r, http.StatusOK, "alerts.html", page{Title: "Alerts", Nav: "alerts", Data: data})
}

// serveAlertTest asks the admin API to send a test alert to the endpoint
// named in the form.
func (c *Console) serveAlertTest(w http.ResponseWriter, r *http.Request) {
	id := r.PostFormValue("endpoint")
	if !endpointIDPattern.MatchString(id) {
		http.Redirect(w, r, "/console/alerts?test=failed", http.StatusSeeOther)
		return
	}
	if err := c.admin(r.Context(), http.MethodPost, alertEndpointsPath+"/"+id+"/test", map[string]any{}, nil); err != nil {
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
