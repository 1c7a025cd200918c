package http

import (
	_ "embed"
	"net/http"
)

// openAPI is the OpenAPI 3.1 description of the admin API.
//
//go:embed openapi.json
var openAPI []byte

func (s *Server) serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPI)
}
