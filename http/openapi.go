package http

import (
	_ "embed"
	"net/http"
	"strings"
)

// openAPI is the OpenAPI 3.1 description of the admin API. It is kept by
// hand beside the handlers; openapi_test.go validates every admin request and
// answer of the package's tests against it, so it cannot drift.
//
//go:embed openapi.json
var openAPI []byte

// openAPIPath is where the description is served, without credentials: it
// holds nothing the repository does not, and tools fetch it before they
// hold a token.
const openAPIPath = "/vault/openapi.json"

// OpenAPI returns the OpenAPI 3.1 description of the admin API, as served
// at /vault/openapi.json.
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }

// serveVault serves every path under /vault on a listener that serves the
// admin API: the description, the alerts API and the rest of the admin API.
func (s *Server) serveVault(w http.ResponseWriter, r *http.Request, raw string) {
	if s.adminMiddleware != nil { // tests only: the OpenAPI validator (export_test.go)
		s.adminMiddleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.routeVault(w, r, raw) })).ServeHTTP(w, r)
		return
	}
	s.routeVault(w, r, raw)
}

func (s *Server) routeVault(w http.ResponseWriter, r *http.Request, raw string) {
	switch {
	case raw == openAPIPath && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			w.Write(openAPI)
		}
	case raw == "/vault/alerts" || strings.HasPrefix(raw, "/vault/alerts/"):
		s.serveAlertsAdmin(w, r, raw)
	default:
		s.serveAdmin(w, r, raw)
	}
}
