package http

import (
	"context"
	"net/http"
	"time"

	"github.com/keybrake/keybrake"
)

// serveAlive is /healthz: the process runs and answers HTTP. It reads
// nothing, so an orchestrator does not restart keybrake because its
// database is down (restarting would not help; /readyz says so instead).
func (s *Server) serveAlive(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// serveReady is /readyz: the store answers and every migration this build
// embeds is applied, so requests sent here can be reserved.
func (s *Server) serveReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.Store.Ping(ctx); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "store unavailable"})
		return
	}
	if sc, ok := s.Store.(keybrake.SchemaChecker); ok {
		if err := sc.CheckSchema(ctx); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "schema incomplete", "detail": keybrake.ErrorMessage(err)})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func notFound(r *http.Request, admin bool) error {
	where := "keybrake serves the Stripe API under /stripe/v1/"
	if admin {
		where += " and its admin API under /vault/"
	} else {
		where += "; the admin API is on the admin listener (--admin-addr)"
	}
	return keybrake.Errorf(keybrake.ENOTFOUND, "Unrecognized request URL (%s: %s). %s.", r.Method, r.URL.EscapedPath(), where)
}
