package http

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/keybrake/keybrake"
)

// The alerts admin API, under /vault/alerts, with the admin token:
//
//	GET    /vault/alerts                          alerts, newest first (?key_id, ?kind, ?limit)
//	GET    /vault/alerts/rules                    rules (?key_id: that key's own; none: every rule)
//	POST   /vault/alerts/rules                    create a rule
//	GET    /vault/alerts/rules/{id}               one rule
//	PATCH  /vault/alerts/rules/{id}               change window, percent, hours, count, seconds, minutes, enabled
//	DELETE /vault/alerts/rules/{id}               remove a rule
//	GET    /vault/alerts/endpoints                webhook endpoints (secrets never shown)
//	POST   /vault/alerts/endpoints                create one; its secret is in this response only
//	GET    /vault/alerts/endpoints/{id}           one endpoint
//	PATCH  /vault/alerts/endpoints/{id}           change url, format, enabled
//	DELETE /vault/alerts/endpoints/{id}           remove it; its pending deliveries fail
//	POST   /vault/alerts/endpoints/{id}/test      send it a test alert
//	GET    /vault/alerts/deliveries               the delivery log (?alert_id, ?endpoint_id, ?key_id, ?state, ?limit)
//	GET    /vault/alerts/deliveries/{id}          one delivery with every attempt
func (s *Server) serveAlertsAdmin(w http.ResponseWriter, r *http.Request, raw string) {
	r, ok := s.adminGate(w, r, r.Method != http.MethodGet)
	if !ok {
		return
	}
	parts := strings.Split(strings.TrimPrefix(raw, "/vault/alerts"), "/")[1:]
	m := r.Method
	switch {
	case len(parts) == 0 && m == http.MethodGet:
		s.handleListAlerts(w, r)
	case len(parts) == 1 && parts[0] == "rules" && m == http.MethodGet:
		s.handleListRules(w, r)
	case len(parts) == 1 && parts[0] == "rules" && m == http.MethodPost:
		s.handleCreateRule(w, r)
	case len(parts) == 2 && parts[0] == "rules" && alertIDPattern.MatchString(parts[1]):
		s.handleRule(w, r, parts[1])
	case len(parts) == 1 && parts[0] == "endpoints" && m == http.MethodGet:
		s.handleListEndpoints(w, r)
	case len(parts) == 1 && parts[0] == "endpoints" && m == http.MethodPost:
		s.handleCreateEndpoint(w, r)
	case len(parts) == 2 && parts[0] == "endpoints" && alertIDPattern.MatchString(parts[1]):
		s.handleEndpoint(w, r, parts[1])
	case len(parts) == 3 && parts[0] == "endpoints" && alertIDPattern.MatchString(parts[1]) && parts[2] == "test" && m == http.MethodPost:
		s.handleTestEndpoint(w, r, parts[1])
	case len(parts) == 1 && parts[0] == "deliveries" && m == http.MethodGet:
		s.handleListDeliveries(w, r)
	case len(parts) == 2 && parts[0] == "deliveries" && alertIDPattern.MatchString(parts[1]) && m == http.MethodGet:
		s.handleGetDelivery(w, r, parts[1])
	default:
		s.writeAdminError(w, r, keybrake.Errorf(keybrake.ENOTFOUND, "No admin route for %s %s.", m, raw))
	}
}

// alertIDPattern matches the ids of rules, endpoints, alerts and deliveries.
var alertIDPattern = regexp.MustCompile(`^(alr|we|alt|ald)_[0-9A-Za-z_]{1,64}$`)

// queryFilter reads the named query parameters, refusing unknown ones and
// values that are not ids or short words.
func queryFilter(r *http.Request, allowed ...string) (map[string]string, int, error) {
	q := r.URL.Query()
	out := map[string]string{}
	for name, vs := range q {
		if name == "limit" {
			continue
		}
		if !slices.Contains(allowed, name) {
			return nil, 0, keybrake.ErrorParam(name, "Unknown query parameter %q; allowed: %s, limit.", name, strings.Join(allowed, ", "))
		}
		if len(vs) != 1 || len(vs[0]) > 100 {
			return nil, 0, keybrake.ErrorParam(name, "%s must be given once, at most 100 characters.", name)
		}
		out[name] = vs[0]
	}
	limit, err := parseLimit(r)
	return out, limit, err
}

func (s *Server) handleListAlerts(w http.ResponseWriter, r *http.Request) {
	f, limit, err := queryFilter(r, "key_id", "kind")
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	as, err := s.Store.FindAlerts(r.Context(), keybrake.AlertFilter{KeyID: f["key_id"], Kind: f["kind"], Limit: limit})
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	writeList(w, as)
}

// writeList writes a list object; a nil slice is written as [].
func writeList[T any](w http.ResponseWriter, data []T) {
	if data == nil {
		data = []T{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// ruleView is a rule as the admin API shows it.
type ruleView struct {
	*keybrake.AlertRule
	Object  string `json:"object"`
	Default bool   `json:"default"` // applies to every key without own rules of its kind
}

func viewRule(r *keybrake.AlertRule) ruleView {
	return ruleView{AlertRule: r, Object: "alert_rule", Default: r.KeyID == ""}
}

func (s *Server) handleListRules(w http.ResponseWriter, r *http.Request) {
	f, _, err := queryFilter(r, "key_id")
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	keyID, one := f["key_id"]
	rules, err := s.Store.FindAlertRules(r.Context(), keyID, !one)
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	views := make([]ruleView, len(rules))
	for i, rl := range rules {
		views[i] = viewRule(rl)
	}
	writeList(w, views)
}

// ruleFields are the fields a rule takes, and which of them PATCH may change.
var ruleFields = map[string]bool{"key_id": false, "kind": false, "window": true, "percent": true, "hours": true,
	"count": true, "seconds": true, "minutes": true, "enabled": true}

func (s *Server) handleCreateRule(w http.ResponseWriter, r *http.Request) {
	fields, err := decodeObject(r)
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	rule := &keybrake.AlertRule{Enabled: true, CreatedAt: s.Now().UTC()}
	if err := decodeRule(fields, rule, true); err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	if rule.KeyID != "" && !validID(rule.KeyID) {
		s.writeAdminError(w, r, keybrake.ErrorParam("key_id", "key_id %q is not a key id.", rule.KeyID))
		return
	}
	if err := s.Store.CreateAlertRule(r.Context(), rule); err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, viewRule(rule))
}

// decodeRule sets rule's fields from the JSON object, strictly: unknown
// fields, wrong types, and on update the fields that cannot change, are
// EINVALID naming the field.
func decodeRule(fields map[string]json.RawMessage, rule *keybrake.AlertRule, create bool) error {
	for _, name := range sortedKeys(fields) {
		mutable, known := ruleFields[name]
		if !known {
			return keybrake.ErrorParam(name, "Unknown field %q; a rule has key_id, kind, window, percent, hours, count, seconds, minutes, enabled.", name)
		}
		if !create && !mutable {
			return keybrake.ErrorParam(name, "%s cannot change; delete the rule and create another.", name)
		}
		raw := fields[name]
		var dst any
		switch name {
		case "key_id":
			dst = &rule.KeyID
		case "kind":
			dst = &rule.Kind
		case "window":
			dst = &rule.Window
		case "percent":
			dst = &rule.Percent
		case "hours":
			dst = &rule.Hours
		case "count":
			dst = &rule.Count
		case "seconds":
			dst = &rule.Seconds
		case "minutes":
			dst = &rule.Minutes
		case "enabled":
			dst = &rule.Enabled
		}
		if string(raw) == "null" {
			return keybrake.ErrorParam(name, "%s cannot be null.", name)
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			return keybrake.ErrorParam(name, "%s has the wrong type: %v", name, err)
		}
	}
	return rule.Validate()
}

func sortedKeys(m map[string]json.RawMessage) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func (s *Server) handleRule(w http.ResponseWriter, r *http.Request, id string) {
	ctx := r.Context()
	rules, err := s.Store.FindAlertRules(ctx, "", true)
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	var rule *keybrake.AlertRule
	for _, rl := range rules {
		if rl.ID == id {
			rule = rl
		}
	}
	if rule == nil {
		s.writeAdminError(w, r, keybrake.Errorf(keybrake.ENOTFOUND, "No such alert rule."))
		return
	}
	switch r.Method {
	case http.MethodGet:
		writeJSON(w, http.StatusOK, viewRule(rule))
	case http.MethodDelete:
		if err := s.Store.DeleteAlertRule(ctx, id); err != nil {
			s.writeAdminError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "alert_rule", "deleted": true})
	case http.MethodPatch:
		fields, err := decodeObject(r)
		if err != nil {
			s.writeAdminError(w, r, err)
			return
		}
		changed := *rule
		if err := decodeRule(fields, &changed, false); err != nil {
			s.writeAdminError(w, r, err)
			return
		}
		upd := keybrake.AlertRuleUpdate{Window: &changed.Window, Percent: &changed.Percent, Hours: &changed.Hours,
			Count: &changed.Count, Seconds: &changed.Seconds, Minutes: &changed.Minutes, Enabled: &changed.Enabled}
		got, err := s.Store.UpdateAlertRule(ctx, id, upd, s.Now().UTC())
		if err != nil {
			s.writeAdminError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, viewRule(got))
	default:
		s.writeAdminError(w, r, keybrake.Errorf(keybrake.ENOTFOUND, "No admin route for %s %s.", r.Method, r.URL.EscapedPath()))
	}
}

// endpointView is an endpoint as the admin API shows it; Secret only in
// the response to creation.
type endpointView struct {
	*keybrake.AlertEndpoint
	Object string `json:"object"`
	Secret string `json:"secret,omitempty"`
}

func (s *Server) handleListEndpoints(w http.ResponseWriter, r *http.Request) {
	es, err := s.Store.FindAlertEndpoints(r.Context())
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	views := make([]endpointView, len(es))
	for i, e := range es {
		views[i] = endpointView{AlertEndpoint: e, Object: "alert_endpoint"}
	}
	writeList(w, views)
}

// decodeEndpoint applies the JSON fields to e strictly; key_id only on
// creation.
func decodeEndpoint(fields map[string]json.RawMessage, e *keybrake.AlertEndpoint, create bool) error {
	for _, name := range sortedKeys(fields) {
		var dst any
		switch name {
		case "url":
			dst = &e.URL
		case "format":
			dst = &e.Format
		case "enabled":
			dst = &e.Enabled
		case "key_id":
			if !create {
				return keybrake.ErrorParam(name, "key_id cannot change; create another endpoint.")
			}
			dst = &e.KeyID
		default:
			return keybrake.ErrorParam(name, "Unknown field %q; an endpoint has url, format, key_id, enabled.", name)
		}
		if string(fields[name]) == "null" {
			return keybrake.ErrorParam(name, "%s cannot be null.", name)
		}
		if err := json.Unmarshal(fields[name], dst); err != nil {
			return keybrake.ErrorParam(name, "%s has the wrong type: %v", name, err)
		}
	}
	return validateEndpoint(e)
}

// validateEndpoint checks the URL (absolute http or https, no credentials
// in it, at most 2048 bytes), the format and the key id.
func validateEndpoint(e *keybrake.AlertEndpoint) error {
	u, err := url.Parse(e.URL)
	switch {
	case e.URL == "":
		return keybrake.ErrorParam("url", "An endpoint needs a url.")
	case len(e.URL) > 2048 || err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
		return keybrake.ErrorParam("url", "url must be an absolute http or https URL of at most 2048 bytes.")
	case u.User != nil:
		return keybrake.ErrorParam("url", "url must not carry credentials; deliveries are signed with the endpoint's secret.")
	case e.Format != keybrake.FormatKeybrake && e.Format != keybrake.FormatSlack:
		return keybrake.ErrorParam("format", "format must be keybrake or slack, not %q.", e.Format)
	case e.KeyID != "" && !validID(e.KeyID):
		return keybrake.ErrorParam("key_id", "key_id %q is not a key id.", e.KeyID)
	}
	return nil
}

func (s *Server) handleCreateEndpoint(w http.ResponseWriter, r *http.Request) {
	fields, err := decodeObject(r)
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	e := &keybrake.AlertEndpoint{Format: keybrake.FormatKeybrake, Enabled: true, CreatedAt: s.Now().UTC()}
	if err := decodeEndpoint(fields, e, true); err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	e.Secret = "whsec_" + randomID("", 32)
	if err := s.Store.CreateAlertEndpoint(r.Context(), e); err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	s.logger().Info("alert endpoint created", "endpoint", e.ID, "key_id", e.KeyID)
	writeJSON(w, http.StatusCreated, endpointView{AlertEndpoint: e, Object: "alert_endpoint", Secret: e.Secret})
}

func (s *Server) handleEndpoint(w http.ResponseWriter, r *http.Request, id string) {
	ctx := r.Context()
	switch r.Method {
	case http.MethodGet:
		e, err := s.Store.FindAlertEndpointByID(ctx, id)
		if err != nil {
			s.writeAdminError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, endpointView{AlertEndpoint: e, Object: "alert_endpoint"})
	case http.MethodDelete:
		if err := s.Store.DeleteAlertEndpoint(ctx, id, s.Now().UTC()); err != nil {
			s.writeAdminError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "alert_endpoint", "deleted": true})
	case http.MethodPatch:
		fields, err := decodeObject(r)
		if err != nil {
			s.writeAdminError(w, r, err)
			return
		}
		e, err := s.Store.FindAlertEndpointByID(ctx, id)
		if err != nil {
			s.writeAdminError(w, r, err)
			return
		}
		if err := decodeEndpoint(fields, e, false); err != nil {
			s.writeAdminError(w, r, err)
			return
		}
		got, err := s.Store.UpdateAlertEndpoint(ctx, id, keybrake.AlertEndpointUpdate{URL: &e.URL, Format: &e.Format, Enabled: &e.Enabled}, s.Now().UTC())
		if err != nil {
			s.writeAdminError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, endpointView{AlertEndpoint: got, Object: "alert_endpoint"})
	default:
		s.writeAdminError(w, r, keybrake.Errorf(keybrake.ENOTFOUND, "No admin route for %s %s.", r.Method, r.URL.EscapedPath()))
	}
}

// handleTestEndpoint writes a test alert for one endpoint to the outbox;
// the sender delivers it like any other, so the delivery log shows whether
// the endpoint works. The request takes no body.
func (s *Server) handleTestEndpoint(w http.ResponseWriter, r *http.Request, id string) {
	ctx := r.Context()
	e, err := s.Store.FindAlertEndpointByID(ctx, id)
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	if !e.Enabled {
		s.writeAdminError(w, r, keybrake.Errorf(keybrake.ECONFLICT, "Endpoint %s is disabled; enable it to test it.", id))
		return
	}
	a := &keybrake.Alert{Kind: keybrake.AlertTest, KeyID: e.KeyID, EndpointID: e.ID, Detail: "endpoint " + e.ID, CreatedAt: s.Now().UTC()}
	a.ID = "alt_" + randomToken(12)
	a.AlertKey = "test:" + a.ID
	if _, err := s.Store.EnqueueAlert(ctx, a); err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	ds, err := s.Store.FindAlertDeliveries(ctx, keybrake.DeliveryFilter{AlertID: a.ID})
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	if ds == nil {
		ds = []*keybrake.AlertDelivery{}
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"object": "alert", "alert": a, "deliveries": ds})
}

func (s *Server) handleListDeliveries(w http.ResponseWriter, r *http.Request) {
	f, limit, err := queryFilter(r, "alert_id", "endpoint_id", "key_id", "state")
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	ds, err := s.Store.FindAlertDeliveries(r.Context(), keybrake.DeliveryFilter{AlertID: f["alert_id"], EndpointID: f["endpoint_id"],
		KeyID: f["key_id"], State: f["state"], Limit: limit})
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	writeList(w, ds)
}

func (s *Server) handleGetDelivery(w http.ResponseWriter, r *http.Request, id string) {
	ctx := r.Context()
	atts, err := s.Store.FindAlertAttempts(ctx, id)
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	ds, err := s.Store.FindAlertDeliveries(ctx, keybrake.DeliveryFilter{ID: id})
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	if len(ds) == 0 {
		s.writeAdminError(w, r, keybrake.Errorf(keybrake.ENOTFOUND, "No such alert delivery."))
		return
	}
	d := ds[0]
	d.AttemptLog = atts
	if d.AttemptLog == nil {
		d.AttemptLog = []*keybrake.AlertAttempt{}
	}
	writeJSON(w, http.StatusOK, d)
}
