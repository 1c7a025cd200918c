package resendsim

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"
)

// serveAdmin serves the simulator's own API under /_sim/, without
// authentication.
func (s *Server) serveAdmin(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/_sim")
	writeErr := func(w http.ResponseWriter, status int, msg string) { writeError(w, validation(status, "%s", msg)) }
	if s.faults.Admin(w, r, path, writeErr) {
		return
	}
	switch {
	case path == "/objects" && r.Method == http.MethodGet:
		w.Write(mustMarshal(s.GroundTruth()))
	case path == "/billed" && r.Method == http.MethodGet:
		w.Write(mustMarshal(s.Billed()))
	case path == "/clock" && r.Method == http.MethodGet:
		w.Write(mustMarshal(map[string]int64{"now": s.Now().Unix()}))
	case path == "/clock/advance" && r.Method == http.MethodPost:
		var req struct {
			Seconds int64 `json:"seconds"`
		}
		dec := json.NewDecoder(io.LimitReader(r.Body, 1<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil || req.Seconds < 0 {
			writeErr(w, http.StatusBadRequest, "want {\"seconds\": N} with N ≥ 0: the clock only moves forward")
			return
		}
		s.Advance(time.Duration(req.Seconds) * time.Second)
		w.Write(mustMarshal(map[string]int64{"now": s.Now().Unix()}))
	default:
		writeErr(w, http.StatusNotFound, "Unrecognized simulator URL ("+r.Method+": "+r.URL.Path+").")
	}
}
