package twiliosim

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/internal/simfault"
	"github.com/keybrake/keybrake/twilio"
)

// MaxBodyBytes bounds a request body; Twilio's are a few kilobytes.
const MaxBodyBytes = 64 << 10

// Options configures a Server. The zero value is ready to use.
type Options struct {
	// Now is the base clock, time.Now by default; the simulator adds its
	// own Advance offset to it.
	Now func() time.Time
	// AccountSid and AuthToken are the account's credentials; by default
	// AC followed by 32 zeros… with a fixed token (see DefaultAccountSid
	// and DefaultAuthToken).
	AccountSid, AuthToken string
	// APIKeys are API key sids (SK…) and their secrets.
	APIKeys map[string]string
	// Rates is what Twilio bills; DefaultRates by default.
	Rates twilio.Rates
	// CallSeconds is how long an answered call lasts unless ended or cut
	// by its TimeLimit; 42 by default.
	CallSeconds int
	// SpeechPer100 is what a call's <Say> in a voice other than man or
	// woman costs per started 100 characters, billed apart from
	// the call's price as Twilio bills text-to-speech; $0.03 by default.
	SpeechPer100 keybrake.Micros
	// DefaultVoice is the account's default text-to-speech voice, as
	// Twilio's Console sets it: a <Say> without voice speaks in it, billed
	// per character unless it is man or woman. "" is man, every new
	// account's default.
	DefaultVoice string
	// NoMMS are To prefixes (+1555…) of carriers that take no MMS: an MMS
	// to them is sent as Twilio's MMS Converter sends it, an SMS of the
	// body and a link to each medium, billed by the segment.
	NoMMS []string
	// Numbers are the account's incoming phone numbers.
	Numbers []string
	// Balance is the account's starting balance in USD; 20 by default.
	Balance keybrake.Micros
	// Logger receives fault firings; nil discards.
	Logger *slog.Logger
}

// Default credentials of a simulator created without them. twilio-go
// refuses passwords that are not alphanumeric, so the token is.
const (
	DefaultAccountSid = "AC00000000000000000000000000000001"
	DefaultAuthToken  = "simtoken00000000000000000000000001"
)

// DefaultRates is what the simulator bills when Options.Rates is nil:
// twilio.DefaultRates and, for every other country, $0.10 an SMS segment,
// $0.20 an MMS and $0.30 a minute.
func DefaultRates() twilio.Rates {
	r := twilio.DefaultRates()
	r[twilio.AnyCountry] = twilio.Rate{SMS: 100_000, MMS: 200_000, Voice: 300_000}
	return r
}

// Server is the simulator, an http.Handler. It is safe for concurrent use.
type Server struct {
	opts   Options
	base   func() time.Time
	log    *slog.Logger
	faults simfault.Injector

	mu       sync.Mutex // guards everything below
	offset   time.Duration
	messages []*Message
	calls    []*Call
	bySid    map[string]any
}

// New returns a Server.
func New(opts Options) *Server {
	if opts.AccountSid == "" {
		opts.AccountSid, opts.AuthToken = DefaultAccountSid, DefaultAuthToken
	}
	if opts.Rates == nil {
		opts.Rates = DefaultRates()
	}
	if opts.SpeechPer100 == 0 {
		opts.SpeechPer100 = 30_000
	}
	if opts.CallSeconds == 0 {
		opts.CallSeconds = 42
	}
	if opts.Balance == 0 {
		opts.Balance = 20 * keybrake.MicrosPerUSD
	}
	s := &Server{opts: opts, base: opts.Now, log: opts.Logger, bySid: map[string]any{}}
	if s.base == nil {
		s.base = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s
}

// AccountSid returns the account the simulator serves.
func (s *Server) AccountSid() string { return s.opts.AccountSid }

// Now returns the simulator clock: the base clock plus every Advance.
func (s *Server) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nowLocked()
}

func (s *Server) nowLocked() time.Time { return s.base().Add(s.offset).UTC() }

// Advance moves the simulator clock forward by d; messages and calls move
// on through their states when they are next read.
func (s *Server) Advance(d time.Duration) {
	s.mu.Lock()
	s.offset += d
	s.mu.Unlock()
}

// AddFault registers a fault; see internal/simfault.
func (s *Server) AddFault(f simfault.Fault) (string, error) { return s.faults.Add(f) }

// ClearFaults removes every fault.
func (s *Server) ClearFaults() { s.faults.Clear() }

// Faults lists the faults and their counters.
func (s *Server) Faults() []simfault.FaultStatus { return s.faults.List() }

// ServeHTTP serves the Twilio API and, under /_sim/, the admin API. Every
// response carries a Twilio-Request-Id.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Twilio-Request-Id", "RQ"+randomHex(16))
	w.Header().Set("Content-Type", "application/json")
	if strings.HasPrefix(r.URL.Path, "/_sim/") {
		s.serveAdmin(w, r)
		return
	}
	s.serveAPI(w, r)
}

// request is one API request as the resource handlers see it.
type request struct {
	op   twilio.Operation
	form url.Values // the body of a POST, the query of a GET
	now  time.Time
	path string
}

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	op, err := twilio.ParseOperation(r.Method, r.URL.EscapedPath())
	if err != nil {
		writeError(w, twilio.NewError(http.StatusNotFound, twilio.CodeNotFound,
			fmt.Sprintf("The requested resource %s was not found", r.URL.Path)))
		return
	}
	if e := s.authenticate(r, op.Account); e != nil {
		w.Header().Set("Www-Authenticate", `Basic realm="Twilio API"`)
		writeError(w, e)
		return
	}
	form, e := readForm(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	plan := s.faults.Plan(r.Method, r.URL.Path)
	plan.Delay(r)
	if plan.Mode == simfault.FailBefore {
		s.log.Debug("twiliosim: fault fail_before", "method", r.Method, "path", r.URL.Path)
		writeError(w, internal(plan.Status))
		return
	}
	status, body := s.execute(&request{op: op, form: form, path: r.URL.Path})
	switch plan.Mode {
	case simfault.FailAfter:
		s.log.Debug("twiliosim: fault fail_after", "method", r.Method, "path", r.URL.Path)
		writeError(w, internal(plan.Status))
		return
	case simfault.CutAfter:
		s.log.Debug("twiliosim: fault cut_after", "method", r.Method, "path", r.URL.Path)
		simfault.Cut(w)
		return
	}
	w.WriteHeader(status)
	w.Write(body)
}

// execute runs the operation under the state lock and renders its answer.
func (s *Server) execute(req *request) (int, []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	req.now = s.nowLocked()
	s.tickLocked(req.now)
	var v any
	var e *twilio.Error
	status := http.StatusOK
	switch req.op.Name {
	case "messages.create":
		v, e = s.createMessage(req)
		status = http.StatusCreated
	case "messages.list":
		v, e = s.listMessages(req)
	case "messages.fetch":
		v, e = s.message(req.op.ID)
	case "messages.update":
		v, e = s.updateMessage(req)
	case "messages.delete":
		if e = s.deleteMessage(req.op.ID); e == nil {
			return http.StatusNoContent, nil
		}
	case "calls.create":
		v, e = s.createCall(req)
		status = http.StatusCreated
	case "calls.list":
		v, e = s.listCalls(req)
	case "calls.fetch":
		v, e = s.call(req.op.ID)
	case "calls.update":
		v, e = s.updateCall(req)
	case "accounts.fetch":
		v = s.account(req)
	case "incoming_phone_numbers.list":
		v = s.numbers(req)
	case "balance.fetch":
		v = s.balance()
	}
	if e != nil {
		return e.Status, e.Body()
	}
	return status, mustMarshal(v)
}

// authenticate checks HTTP Basic credentials against the account's and its
// API keys', and that the path names the account.
func (s *Server) authenticate(r *http.Request, account string) *twilio.Error {
	c, err := twilio.ParseAuth(r.Header.Get("Authorization"))
	if err != nil {
		return twilio.NewError(http.StatusUnauthorized, twilio.CodeAuthenticate, "Authenticate")
	}
	want := s.opts.AuthToken
	if c.APIKey() {
		want = s.opts.APIKeys[c.Username]
	} else if c.Username != s.opts.AccountSid {
		want = ""
	}
	if want == "" || subtle.ConstantTimeCompare([]byte(c.Password), []byte(want)) != 1 {
		return twilio.NewError(http.StatusUnauthorized, twilio.CodeAuthenticate, "Authenticate")
	}
	if account != s.opts.AccountSid {
		return twilio.NewError(http.StatusNotFound, twilio.CodeNotFound,
			fmt.Sprintf("The requested resource %s was not found", r.URL.Path))
	}
	return nil
}

// readForm reads the parameters: the query of a GET or DELETE, the
// form-encoded body of a POST.
func readForm(w http.ResponseWriter, r *http.Request) (url.Values, *twilio.Error) {
	if r.Method != http.MethodPost {
		return r.URL.Query(), nil
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		return nil, twilio.NewError(http.StatusRequestEntityTooLarge, 20001, "The request body is too large.")
	}
	v, err := url.ParseQuery(string(b))
	if err != nil {
		return nil, twilio.NewError(http.StatusBadRequest, 20001, "The request body is not form-encoded.")
	}
	return v, nil
}

func writeError(w http.ResponseWriter, e *twilio.Error) {
	w.WriteHeader(e.Status)
	w.Write(e.Body())
}

func internal(status int) *twilio.Error {
	return twilio.NewError(status, twilio.CodeInternal, "Internal Server Error (simulated by twiliosim)")
}

func invalid(code int, format string, args ...any) *twilio.Error {
	return twilio.NewError(http.StatusBadRequest, code, fmt.Sprintf(format, args...))
}

func notFound(path string) *twilio.Error {
	return twilio.NewError(http.StatusNotFound, twilio.CodeNotFound, fmt.Sprintf("The requested resource %s was not found", path))
}

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("twiliosim: encode %T: %v", v, err))
	}
	return b
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newSid returns a Twilio sid: prefix and 32 lower-case hex digits.
func newSid(prefix string) string { return prefix + randomHex(16) }

// date renders a time as Twilio does: RFC 1123 with a numeric zone.
func date(t time.Time) string { return t.UTC().Format(time.RFC1123Z) }

// priceString renders micros as Twilio's negative decimal price with
// five places, rounded up: "-0.00790".
func priceString(m keybrake.Micros) string {
	tenth := (m + 9) / 10 // 1e-5 dollars
	return fmt.Sprintf("-%d.%05d", tenth/100_000, tenth%100_000)
}
