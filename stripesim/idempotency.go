package stripesim

import (
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/keybrake/keybrake/stripe"
)

// idempotencyWindow is how long Stripe remembers an Idempotency-Key.
const idempotencyWindow = 24 * time.Hour

// maxIdempotencyKey is the longest Idempotency-Key Stripe accepts.
const maxIdempotencyKey = 255

// sweepEvery bounds how often saved records are scanned for expiry.
const sweepEvery = 1024

// idemRecord is the first request made with an Idempotency-Key and, once it
// completed, the response saved for replay.
type idemRecord struct {
	Method  string `json:"method"`
	Path    string `json:"path"`
	Params  string `json:"params"`
	Created int64  `json:"created"` // unix nanoseconds on the simulator clock
	Status  int    `json:"status"`
	Body    []byte `json:"body"`
}

// idemOutcome is what begin decided for a request carrying a key.
type idemOutcome struct {
	acquired bool        // the request holds the key and must call finish
	replay   *idemRecord // the saved response to send again
	err      *apiError   // a conflict with the first use of the key
}

// canonicalParams renders a form independently of parameter order, so that
// the same parameters sent in another order still match.
func canonicalParams(f *stripe.Form) string {
	pairs := make([]string, len(f.Pairs))
	for i, p := range f.Pairs {
		pairs[i] = p.Key + "=" + p.Value
	}
	sort.Strings(pairs)
	return strings.Join(pairs, "&")
}

// beginIdempotent claims key for a request, or says why it cannot: the key
// was used with another endpoint or other parameters (400 idempotency_error),
// its first request is still executing (409 idempotency_key_in_use), or it
// completed and its response is to be replayed.
func (s *Server) beginIdempotent(key, method, path, params string) idemOutcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.nowLocked().UnixNano()
	if rec, ok := s.st.Idempotency[key]; ok && now-rec.Created >= int64(idempotencyWindow) {
		delete(s.st.Idempotency, key)
	}
	rec, done := s.st.Idempotency[key]
	if !done {
		rec = s.inflight[key]
	}
	if rec == nil {
		s.inflight[key] = &idemRecord{Method: method, Path: path, Params: params, Created: now}
		return idemOutcome{acquired: true}
	}
	if err := mismatch(rec, method, path, params, idempotencyKeyOf(key)); err != nil {
		return idemOutcome{err: err}
	}
	if !done {
		return idemOutcome{err: newError(http.StatusConflict, typeInvalidRequest, "idempotency_key_in_use", "",
			"There is currently another in-progress request using this idempotent key (that probably means "+
				"you submitted twice, and the other request is still going through): %s. Please try again later.",
			idempotencyKeyOf(key))}
	}
	return idemOutcome{replay: rec}
}

// finishIdempotent releases key; when save is true the response is kept for
// replay. Stripe saves a result only once the endpoint started executing, so
// validation errors and failures before processing are not saved.
func (s *Server) finishIdempotent(key string, save bool, status int, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.inflight[key]
	delete(s.inflight, key)
	if !save || rec == nil {
		return
	}
	rec.Status, rec.Body = status, body
	s.st.Idempotency[key] = rec
	s.trimLocked()
	s.saves++
	if s.saves%sweepEvery == 0 {
		s.sweepIdempotencyLocked()
	}
}

func (s *Server) sweepIdempotencyLocked() {
	now := s.nowLocked().UnixNano()
	for k, rec := range s.st.Idempotency {
		if now-rec.Created >= int64(idempotencyWindow) {
			delete(s.st.Idempotency, k)
		}
	}
}

func mismatch(rec *idemRecord, method, path, params, key string) *apiError {
	if rec.Method != method || rec.Path != path {
		return newError(http.StatusBadRequest, typeIdempotency, "idempotency_error", "",
			"Keys for idempotent requests can only be used for the same endpoint they were first used for "+
				"('%s %s' vs '%s %s'). Try using a key other than '%s' if you meant to execute a different request.",
			rec.Method, rec.Path, method, path, key)
	}
	if rec.Params != params {
		return newError(http.StatusBadRequest, typeIdempotency, "idempotency_error", "",
			"Keys for idempotent requests can only be used with the same parameters they were first used with. "+
				"Try using a key other than '%s' if you meant to execute a different request.", key)
	}
	return nil
}

// idempotencyScope makes keys of different API keys and accounts distinct.
func idempotencyScope(scope, key string) string { return scope + "\x00" + key }

// idempotencyKeyOf returns the client's key from a scoped key.
func idempotencyKeyOf(scoped string) string {
	_, key, _ := strings.Cut(scoped, "\x00")
	return key
}

// shouldSave reports whether a response is saved for replay: successes and
// card declines, which Stripe returns again for the same key.
func shouldSave(status int) bool {
	return status < 300 || status == http.StatusPaymentRequired
}
