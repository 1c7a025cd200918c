package http

import "net/http"

// serveKeyLifecycle serves POST /vault/keys/{id}/{action} for rotate,
// suspend and resume; it returns false for any other action.
func (s *Server) serveKeyLifecycle(w http.ResponseWriter, r *http.Request, id, action string) bool {
	return false
}
