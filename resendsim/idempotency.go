package resendsim

import (
	"net/http"

	"github.com/keybrake/keybrake/resend"
)

// idemRecord is the first request made with a key and, once it
// completed, its answer.
type idemRecord struct {
	Path        string
	Fingerprint string
	Created     int64 // unix nanoseconds, simulator clock
	Status      int
	Body        []byte
}

type idemOutcome struct {
	acquired bool
	replay   *idemRecord
	err      *resend.Error
}

// beginIdempotent claims key, or says why not: another body or endpoint
// (409 invalid_idempotent_request), the first request still running (409
// concurrent_idempotent_requests), or a saved answer to replay.
func (s *Server) beginIdempotent(key, path, fingerprint string) idemOutcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.nowLocked().UnixNano()
	if rec, ok := s.saved[key]; ok && now-rec.Created >= int64(resend.IdempotencyWindow) {
		delete(s.saved, key)
	}
	rec, done := s.saved[key]
	if !done {
		rec = s.inflight[key]
	}
	switch {
	case rec == nil:
		s.inflight[key] = &idemRecord{Path: path, Fingerprint: fingerprint, Created: now}
		return idemOutcome{acquired: true}
	case rec.Path != path || rec.Fingerprint != fingerprint:
		return idemOutcome{err: &resend.Error{StatusCode: http.StatusConflict, Name: resend.NameInvalidIdempotent,
			Message: "Same idempotency key used with a different request payload. Change your idempotency key or payload."}}
	case !done:
		return idemOutcome{err: &resend.Error{StatusCode: http.StatusConflict, Name: resend.NameConcurrentIdempotent,
			Message: "Same idempotency key used while original request is still in progress. Try the request again later."}}
	}
	return idemOutcome{replay: rec}
}

// finishIdempotent releases key, keeping a 2xx answer for replay; an
// error is not kept, so a retry runs anew, as on Resend.
func (s *Server) finishIdempotent(key string, status int, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.inflight[key]
	delete(s.inflight, key)
	if rec == nil || status < 200 || status > 299 {
		return
	}
	rec.Status, rec.Body = status, body
	s.saved[key] = rec
}
