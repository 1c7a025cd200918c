package stripesim

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"
)

// serveAdmin serves the simulator's own API under /_sim/. It needs no
// authentication: the simulator is a test tool.
func (s *Server) serveAdmin(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/_sim")
	switch {
	case path == "/objects" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, s.GroundTruth())
	case path == "/moved" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, s.Moved())
	case path == "/faults" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]any{"faults": s.Faults()})
	case path == "/faults" && r.Method == http.MethodPost:
		var f Fault
		if err := decodeAdmin(r, &f); err != nil {
			writeAdminError(w, http.StatusBadRequest, err.Error())
			return
		}
		id, err := s.AddFault(f)
		if err != nil {
			writeAdminError(w, http.StatusBadRequest, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"id": id})
	case path == "/faults" && r.Method == http.MethodDelete:
		s.ClearFaults()
		writeJSON(w, http.StatusOK, map[string]bool{"cleared": true})
	case strings.HasPrefix(path, "/faults/") && r.Method == http.MethodDelete:
		s.RemoveFault(strings.TrimPrefix(path, "/faults/"))
		writeJSON(w, http.StatusOK, map[string]bool{"deleted": true})
	case path == "/clock" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, s.clock())
	case path == "/clock/advance" && r.Method == http.MethodPost:
		var req struct {
			Seconds int64 `json:"seconds"`
		}
		if err := decodeAdmin(r, &req); err != nil {
			writeAdminError(w, http.StatusBadRequest, err.Error())
			return
		}
		if req.Seconds < 0 {
			writeAdminError(w, http.StatusBadRequest, "seconds must not be negative: the clock only moves forward")
			return
		}
		s.Advance(time.Duration(req.Seconds) * time.Second)
		writeJSON(w, http.StatusOK, s.clock())
	default:
		writeAdminError(w, http.StatusNotFound, "Unrecognized simulator URL ("+r.Method+": "+r.URL.Path+").")
	}
}

// clockStatus is the answer of GET /_sim/clock.
type clockStatus struct {
	Now           int64 `json:"now"`
	OffsetSeconds int64 `json:"offset_seconds"`
}

func (s *Server) clock() clockStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return clockStatus{Now: s.nowLocked().Unix(), OffsetSeconds: s.st.OffsetNanos / int64(time.Second)}
}

// decodeAdmin decodes a JSON body strictly: unknown fields are an error.
func decodeAdmin(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, MaxBodyBytes))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// writeAdminError answers in Stripe's error shape, so one client handles both.
func writeAdminError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, &apiError{Status: status, Type: typeInvalidRequest, Message: msg})
}
