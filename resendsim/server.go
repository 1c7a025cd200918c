package resendsim

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/keybrake/keybrake/internal/simfault"
	"github.com/keybrake/keybrake/resend"
)

// DefaultAPIKey is the key of a simulator created without one.
const DefaultAPIKey = "re_sim_0000000000000000000000000001"

// Options configures a Server. The zero value is ready to use.
type Options struct {
	// Now is the base clock, time.Now by default; Advance adds to it.
	Now func() time.Time
	// APIKey is the only key accepted; DefaultAPIKey by default.
	APIKey string
	// Domains are the verified sending domains; "example.com" and
	// "resend.dev" by default.
	Domains []string
	// Logger receives fault firings; nil discards.
	Logger *slog.Logger
}

// Server is the simulator, an http.Handler, safe for concurrent use.
type Server struct {
	opts   Options
	base   func() time.Time
	log    *slog.Logger
	faults simfault.Injector

	mu       sync.Mutex // guards everything below
	offset   time.Duration
	emails   []*Email
	byID     map[string]*Email
	domains  []domain
	saved    map[string]*idemRecord // completed Idempotency-Keys
	inflight map[string]*idemRecord // keys whose first request runs
}

type domain struct {
	ID, Name string
	Created  time.Time
}

// New returns a Server.
func New(opts Options) *Server {
	if opts.APIKey == "" {
		opts.APIKey = DefaultAPIKey
	}
	if opts.Domains == nil {
		opts.Domains = []string{"example.com", "resend.dev"}
	}
	s := &Server{opts: opts, base: opts.Now, log: opts.Logger, byID: map[string]*Email{},
		saved: map[string]*idemRecord{}, inflight: map[string]*idemRecord{}}
	if s.base == nil {
		s.base = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	for _, d := range opts.Domains {
		s.domains = append(s.domains, domain{ID: newID(), Name: strings.ToLower(d), Created: s.base()})
	}
	return s
}

// Now returns the simulator clock.
func (s *Server) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nowLocked()
}

func (s *Server) nowLocked() time.Time { return s.base().Add(s.offset).UTC() }

// Advance moves the simulator clock forward by d.
func (s *Server) Advance(d time.Duration) {
	s.mu.Lock()
	s.offset += d
	s.mu.Unlock()
}

// AddFault registers a fault; see internal/simfault.
func (s *Server) AddFault(f simfault.Fault) (string, error) { return s.faults.Add(f) }

// ClearFaults removes every fault.
func (s *Server) ClearFaults() { s.faults.Clear() }

// ServeHTTP serves the Resend API and, under /_sim/, the admin API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if strings.HasPrefix(r.URL.Path, "/_sim/") {
		s.serveAdmin(w, r)
		return
	}
	s.serveAPI(w, r)
}

// request is one API request as the handlers see it.
type request struct {
	op         resend.Operation
	body       []byte
	permissive bool
	now        time.Time
}

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	op, err := resend.ParseOperation(r.Method, r.URL.EscapedPath())
	if err != nil {
		writeError(w, &resend.Error{StatusCode: http.StatusNotFound, Name: resend.NameNotFound, Message: "The requested endpoint does not exist."})
		return
	}
	if e := s.authenticate(r); e != nil {
		writeError(w, e)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, resend.MaxBody))
	if err != nil {
		writeError(w, validation(http.StatusRequestEntityTooLarge, "The request body is too large."))
		return
	}
	req := &request{op: op, body: body, permissive: strings.EqualFold(r.Header.Get("X-Batch-Validation"), "permissive")}

	key := ""
	if op.Name == "emails.send" || op.Name == "emails.batch" {
		k, err := resend.ParseIdempotencyKey(r.Header.Values("Idempotency-Key"))
		if err != nil {
			writeError(w, &resend.Error{StatusCode: http.StatusBadRequest, Name: resend.NameInvalidIdempotency, Message: "The Idempotency-Key must be 1 to 256 characters long."})
			return
		}
		key = k
	}
	plan := s.faults.Plan(r.Method, r.URL.Path)
	var idem idemOutcome
	if key != "" {
		idem = s.beginIdempotent(key, r.URL.Path, resend.Fingerprint(body))
	}
	plan.Delay(r)
	if plan.Mode == simfault.FailBefore {
		if idem.acquired {
			s.finishIdempotent(key, 0, nil)
		}
		writeError(w, internal(plan.Status))
		return
	}
	var status int
	var out []byte
	switch {
	case idem.err != nil:
		status, out = idem.err.StatusCode, idem.err.Body()
	case idem.replay != nil:
		status, out = idem.replay.Status, idem.replay.Body
	default:
		status, out = s.execute(req)
		if idem.acquired {
			s.finishIdempotent(key, status, out)
		}
	}
	switch plan.Mode {
	case simfault.FailAfter:
		writeError(w, internal(plan.Status))
		return
	case simfault.CutAfter:
		simfault.Cut(w)
		return
	}
	w.WriteHeader(status)
	w.Write(out)
}

func (s *Server) authenticate(r *http.Request) *resend.Error {
	h := r.Header.Get("Authorization")
	if h == "" {
		return &resend.Error{StatusCode: http.StatusUnauthorized, Name: resend.NameMissingAPIKey, Message: "Missing API key in the authorization header. Include the following header `Authorization: Bearer YOUR_API_KEY` in the request."}
	}
	key, err := resend.ParseAuth(h)
	if err != nil || subtle.ConstantTimeCompare([]byte(key), []byte(s.opts.APIKey)) != 1 {
		return &resend.Error{StatusCode: http.StatusForbidden, Name: resend.NameInvalidAPIKey, Message: "API key is invalid"}
	}
	return nil
}

// execute runs the operation under the state lock and renders its answer.
func (s *Server) execute(req *request) (int, []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	req.now = s.nowLocked()
	var v any
	var e *resend.Error
	switch req.op.Name {
	case "emails.send":
		v, e = s.send(req)
	case "emails.batch":
		v, e = s.batch(req)
	case "emails.list":
		v = s.list()
	case "emails.get":
		v, e = s.get(req.op.ID)
	case "emails.update":
		v, e = s.update(req)
	case "emails.cancel":
		v, e = s.cancel(req.op.ID)
	case "domains.list":
		v = s.listDomains()
	case "domains.get":
		v, e = s.getDomain(req.op.ID)
	}
	if e != nil {
		return e.StatusCode, e.Body()
	}
	return http.StatusOK, mustMarshal(v)
}

func writeError(w http.ResponseWriter, e *resend.Error) {
	w.WriteHeader(e.StatusCode)
	w.Write(e.Body())
}

func validation(status int, format string, args ...any) *resend.Error {
	return &resend.Error{StatusCode: status, Name: resend.NameValidation, Message: fmt.Sprintf(format, args...)}
}

func internal(status int) *resend.Error {
	return &resend.Error{StatusCode: status, Name: resend.NameInternal, Message: "An unexpected error occurred (simulated by resendsim)."}
}

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("resendsim: encode %T: %v", v, err))
	}
	return b
}

// newID returns a random lower-case UUID (version 4), as Resend's ids are.
func newID() string {
	b := make([]byte, 16)
	rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
