package http_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/routers"
)

// TestOpenAPI_Routes walks every route the admin router serves, with real
// ids, and checks both ways: each is in the description (and its exchange
// validates, through MustOpen's validator), and each operation of the
// description is in this walk. Routes beside them must stay unserved.
func TestOpenAPI_Routes(t *testing.T) {
	e := MustOpen(t)
	doc, router := MustSpec(t)
	parent, parentSecret := e.CreateKey(t, `{"daily_usd_cap":100,"total_usd_cap":500,"allowed_endpoints":["charges.create"],"mint":true}`)
	key, _ := e.CreateKey(t, `{"daily_usd_cap":10,"allowed_endpoints":["charges.create"]}`)
	rule := createID(t, e, "/vault/alerts/rules", `{"kind":"threshold","percent":80}`)
	endpoint := createID(t, e, "/vault/alerts/endpoints", `{"url":"http://127.0.0.1:9/hook"}`)
	token := "walker"

	// Every route of serveAdmin, serveAdminMore, serveApprovals,
	// serveAlertsAdmin and routeVault, in their order. The approvals and
	// deliveries are ids nobody made: their routes answer 404 resource
	// missing, not 404 no route.
	served := []struct{ method, path, body string }{
		{"GET", "/vault/openapi.json", ""},
		{"POST", "/vault/keys/self/children", `{"total_usd_cap":5}`},
		{"POST", "/vault/keys", `{"daily_usd_cap":1,"allowed_endpoints":["charges.create"]}`},
		{"GET", "/vault/keys", ""},
		{"GET", "/vault/keys/" + key, ""},
		{"PATCH", "/vault/keys/" + key, `{"label":"walked"}`},
		{"POST", "/vault/keys/" + parent + "/children", `{"total_usd_cap":5}`},
		{"GET", "/vault/keys/" + key + "/events", ""},
		{"POST", "/vault/keys/" + key + "/rotate", `{"grace_period":"1h"}`},
		{"POST", "/vault/keys/" + key + "/suspend", ""},
		{"POST", "/vault/keys/" + key + "/resume", ""},
		{"POST", "/vault/keys/" + key + "/revoke", ""},
		{"POST", "/vault/admin_tokens", `{"name":"` + token + `","role":"viewer"}`},
		{"GET", "/vault/admin_tokens", ""},
		{"POST", "/vault/admin_tokens/" + token + "/revoke", ""},
		{"GET", "/vault/approvals", ""},
		{"GET", "/vault/approvals/apr_nobody", ""},
		{"POST", "/vault/approvals/apr_nobody/approve", ""},
		{"POST", "/vault/approvals/apr_nobody/deny", ""},
		{"GET", "/vault/approvals/apr_nobody/decide?action=approve&endpoint=we_1&exp=1&sig=00", ""},
		{"POST", "/vault/approvals/apr_nobody/decide?action=approve&endpoint=we_1&exp=1&sig=00", ""},
		{"GET", "/vault/audit", ""},
		{"GET", "/vault/alerts", ""},
		{"GET", "/vault/alerts/rules", ""},
		{"POST", "/vault/alerts/rules", `{"kind":"expiring","hours":24}`},
		{"GET", "/vault/alerts/rules/" + rule, ""},
		{"PATCH", "/vault/alerts/rules/" + rule, `{"percent":90}`},
		{"DELETE", "/vault/alerts/rules/" + rule, ""},
		{"GET", "/vault/alerts/endpoints", ""},
		{"POST", "/vault/alerts/endpoints", `{"url":"http://127.0.0.1:9/other","format":"slack"}`},
		{"GET", "/vault/alerts/endpoints/" + endpoint, ""},
		{"POST", "/vault/alerts/endpoints/" + endpoint + "/test", ""},
		{"PATCH", "/vault/alerts/endpoints/" + endpoint, `{"enabled":false}`},
		{"GET", "/vault/alerts/deliveries", ""},
		{"GET", "/vault/alerts/deliveries/ald_nobody", ""},
		{"DELETE", "/vault/alerts/endpoints/" + endpoint, ""},
	}
	walked := map[string]bool{}
	for _, c := range served {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			headers := map[string]string{"Authorization": "Bearer " + adminToken, "Content-Type": "application/json"}
			if strings.HasSuffix(c.path, "/self/children") {
				headers["Authorization"] = "Bearer " + parentSecret
			}
			resp, out := e.Do(t, c.method, c.path, c.body, headers)
			if resp.StatusCode == http.StatusNotFound && strings.Contains(string(out), "No admin route") {
				t.Fatalf("not served: %s", out)
			}
			if resp.StatusCode >= 300 && !strings.Contains(c.path, "nobody") {
				t.Fatalf("%d %s", resp.StatusCode, out)
			}
			req, _ := http.NewRequest(c.method, "http://127.0.0.1"+c.path, nil)
			route, _, err := router.FindRoute(req)
			if err != nil {
				t.Fatalf("served but not described: %v", err)
			}
			walked[c.method+" "+route.Path] = true
		})
	}
	t.Run("EveryOperationWalked", func(t *testing.T) {
		for path, item := range doc.Paths.Map() {
			for method := range item.Operations() {
				if !walked[method+" "+path] {
					t.Errorf("%s %s is described but not in this walk: add it, or remove it from http/openapi.json", method, path)
				}
			}
		}
	})
	// Beside every route: other methods, other actions, deeper paths.
	unserved := []struct{ method, path string }{
		{"DELETE", "/vault/keys"},
		{"PUT", "/vault/keys/" + parent},
		{"DELETE", "/vault/keys/" + parent},
		{"POST", "/vault/keys/" + parent + "/explode"},
		{"GET", "/vault/keys/" + parent + "/rotate"},
		{"GET", "/vault/keys/" + parent + "/events/1"},
		{"GET", "/vault/keys/self/children"},
		{"POST", "/vault/openapi.json"},
		{"GET", "/vault/openapi.yaml"},
		{"GET", "/vault"},
		{"GET", "/vault/"},
		{"DELETE", "/vault/admin_tokens/env"},
		{"POST", "/vault/audit"},
		{"POST", "/vault/approvals"},
		{"POST", "/vault/alerts"},
		{"PUT", "/vault/alerts/rules/" + rule},
		{"POST", "/vault/alerts/deliveries"},
		{"GET", "/vault/alerts/endpoints/" + endpoint + "/test"},
		{"GET", "/vault/keysx"},
	}
	for _, c := range unserved {
		t.Run("Unserved/"+c.method+" "+c.path, func(t *testing.T) {
			resp, out := e.Admin(t, c.method, c.path, "")
			if resp.StatusCode != http.StatusNotFound {
				t.Fatalf("%d %s, want 404", resp.StatusCode, out)
			}
			req, _ := http.NewRequest(c.method, "http://127.0.0.1"+c.path, nil)
			if route, _, err := router.FindRoute(req); err == nil {
				t.Fatalf("described as %s %s but not served", c.method, route.Path)
			} else if err != routers.ErrPathNotFound && err != routers.ErrMethodNotAllowed {
				t.Fatal(err)
			}
		})
	}
	t.Run("NoToken", func(t *testing.T) {
		resp, out := e.Do(t, "GET", "/vault/openapi.json", "", nil)
		var v struct{ OpenAPI string }
		if resp.StatusCode != 200 || json.Unmarshal(out, &v) != nil || v.OpenAPI != "3.1.0" {
			t.Fatalf("%d %.200s", resp.StatusCode, out)
		}
	})
}

func createID(t *testing.T, e *Env, path, body string) string {
	t.Helper()
	resp, out := e.Admin(t, "POST", path, body)
	var v struct{ ID string }
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(out, &v) != nil || v.ID == "" {
		t.Fatalf("POST %s: %d %s", path, resp.StatusCode, out)
	}
	return v.ID
}
