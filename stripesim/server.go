package stripesim

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/keybrake/keybrake/internal/simfault"
	"github.com/keybrake/keybrake/stripe"
)

// Options configures a Server. The zero value is ready to use.
type Options struct {
	// Now is the base clock, time.Now by default; the simulator adds its own
	// Advance offset to it.
	Now func() time.Time
	// StatePath, when set, is the file the state is loaded from at start and
	// saved to, atomically, after every mutating request.
	StatePath string
	// Logger receives persistence failures and fault firings; nil discards.
	Logger *slog.Logger
	// MaxObjects, when positive, bounds the memory of a long-running
	// simulator: of charges, payment intents, refunds, transfers, payouts
	// and saved idempotent responses, about this many of each are kept, the
	// oldest finished ones forgotten (bound.go); Moved stays exact. 0 keeps
	// every object, as tests that read GroundTruth need.
	MaxObjects int
}

// Server is the simulator. It is an http.Handler serving the Stripe API
// subset under /v1/ and the admin API under /_sim/. It is safe for
// concurrent use.
type Server struct {
	opts Options
	base func() time.Time
	log  *slog.Logger

	mu       sync.Mutex // guards st, inflight, saves
	st       *state
	inflight map[string]*idemRecord // Idempotency-Keys whose first request is executing
	saves    int

	faults simfault.Injector

	pmu sync.Mutex // serialises writes of StatePath
}

// New returns a Server, loading the state saved at opts.StatePath if the
// file exists.
func New(opts Options) (*Server, error) {
	s := &Server{opts: opts, base: opts.Now, log: opts.Logger, inflight: map[string]*idemRecord{}}
	if s.base == nil {
		s.base = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	st, err := load(opts.StatePath)
	if err != nil {
		return nil, err
	}
	s.st = st
	return s, nil
}

// Now returns the simulator clock: the base clock plus every Advance.
func (s *Server) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nowLocked()
}

// Advance moves the simulator clock forward by d, for instance past the 24
// hours after which Idempotency-Keys are forgotten, and applies what fell
// due meanwhile: uncaptured authorizations older than 7 days are released.
func (s *Server) Advance(d time.Duration) {
	s.mu.Lock()
	s.st.OffsetNanos += int64(d)
	s.tickLocked()
	s.mu.Unlock()
	s.persist()
}

// Close flushes the state to StatePath. The Server stays usable.
func (s *Server) Close() error {
	return s.save()
}

// GroundTruth returns a copy of every object created, in creation order,
// including those whose response was lost to a fault; with
// Options.MaxObjects, of every object still kept.
func (s *Server) GroundTruth() GroundTruth {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tickLocked()
	return GroundTruth{
		Customers:      copyAll(s.st.Customers),
		Charges:        copyAll(s.st.Charges),
		PaymentIntents: copyAll(s.st.PaymentIntents),
		Refunds:        copyAll(s.st.Refunds),
		Transfers:      copyAll(s.st.Transfers),
		Payouts:        copyAll(s.st.Payouts),
		InvoiceItems:   copyAll(s.st.InvoiceItems),
		Invoices:       copyInvoices(s.st.Invoices),
		Products:       copyAll(s.st.Products),
		Prices:         copyAll(s.st.Prices),
		PaymentLinks:   copyAll(s.st.PaymentLinks),
	}
}

// copyInvoices copies invoices with their lines, which later changes to the
// invoices must not reach.
func copyInvoices(items []*Invoice) []Invoice {
	out := copyAll(items)
	for i := range out {
		out[i].Lines = make([]*InvoiceLine, len(items[i].Lines))
		for j, l := range items[i].Lines {
			cp := *l
			out[i].Lines[j] = &cp
		}
	}
	return out
}

func copyAll[T any](items []*T) []T {
	out := make([]T, len(items))
	for i, it := range items {
		out[i] = *it
	}
	return out
}

// ServeHTTP serves the Stripe API under /v1/ and the admin API under /_sim/.
// Every response carries a Request-Id.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Request-Id", newRequestID())
	h.Set("Content-Type", "application/json")
	if strings.HasPrefix(r.URL.Path, "/_sim/") {
		s.serveAdmin(w, r)
		return
	}
	s.serveAPI(w, r)
}

// call is one API request as the resource handlers see it.
type call struct {
	form    *stripe.Form
	scope   string // API key and account: objects and keys live in a scope
	account string // the Stripe-Account or Stripe-Context header
	version string // the Stripe-Version header, "" for the account's default
	id      string // the object id in the path, if any
	now     time.Time
}

// handler serves one endpoint. It runs with s.mu held and returns the object
// to answer with, or a Stripe error.
type handler func(s *Server, c *call) (any, *apiError)

// serveAPI runs a request through authentication, parsing, faults,
// idempotency and the endpoint, in the order Stripe's own windows open.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	apiKey, aerr := authenticate(r)
	if aerr != nil {
		w.Header().Set("Www-Authenticate", `Bearer realm="Stripe"`)
		writeJSON(w, aerr.Status, aerr)
		return
	}
	form, aerr := readForm(w, r)
	if aerr != nil {
		writeJSON(w, aerr.Status, aerr)
		return
	}
	h, id, ok := route(r.Method, r.URL.Path)
	if !ok {
		aerr := newError(http.StatusNotFound, typeInvalidRequest, "", "",
			"Unrecognized request URL (%s: %s). Please see https://stripe.com/docs or we can help at https://support.stripe.com/.",
			r.Method, r.URL.Path)
		writeJSON(w, aerr.Status, aerr)
		return
	}
	account, aerr := accountOf(r)
	if aerr != nil {
		writeJSON(w, aerr.Status, aerr)
		return
	}
	c := &call{form: form, scope: scopeOf(apiKey, account), account: account, version: strings.TrimSpace(r.Header.Get("Stripe-Version")), id: id}
	if strings.HasPrefix(apiKey, publishableKeyPrefix) {
		if c.scope, aerr = s.publishableScope(r.Method, r.URL.Path, c); aerr != nil {
			writeJSON(w, aerr.Status, aerr)
			return
		}
	}

	idemKey := ""
	if k := r.Header.Get("Idempotency-Key"); k != "" && r.Method == http.MethodPost {
		if len(k) > maxIdempotencyKey {
			aerr := invalid("", "", "Idempotency-Key must be at most %d characters long (it is %d).", maxIdempotencyKey, len(k))
			writeJSON(w, aerr.Status, aerr)
			return
		}
		w.Header().Set("Idempotency-Key", k)
		idemKey = idempotencyScope(c.scope, k)
	}

	plan := s.faults.Plan(r.Method, r.URL.Path)
	var idem idemOutcome
	if idemKey != "" {
		idem = s.beginIdempotent(idemKey, r.Method, r.URL.Path, canonicalParams(form))
	}
	plan.Delay(r)
	if plan.Mode == FaultFailBefore {
		if idem.acquired {
			s.finishIdempotent(idemKey, false, 0, nil)
		}
		s.log.Debug("stripesim: fault fail_before", "method", r.Method, "path", r.URL.Path)
		writeJSON(w, plan.Status, errInternal(plan.Status))
		return
	}

	var status int
	var body []byte
	switch {
	case idem.err != nil:
		status, body = idem.err.Status, mustMarshal(idem.err)
	case idem.replay != nil:
		status, body = idem.replay.Status, idem.replay.Body
		w.Header().Set("Idempotent-Replayed", "true")
	default:
		status, body = s.execute(h, c)
		if idem.acquired {
			s.finishIdempotent(idemKey, shouldSave(status), status, body)
		}
		if r.Method != http.MethodGet && shouldSave(status) {
			s.persist()
		}
	}

	switch plan.Mode {
	case FaultFailAfter:
		s.log.Debug("stripesim: fault fail_after", "method", r.Method, "path", r.URL.Path)
		w.Header().Del("Idempotent-Replayed")
		writeJSON(w, plan.Status, errInternal(plan.Status))
		return
	case FaultCutAfter:
		s.log.Debug("stripesim: fault cut_after", "method", r.Method, "path", r.URL.Path)
		simfault.Cut(w)
		return
	}
	w.WriteHeader(status)
	w.Write(body)
}

// execute runs the endpoint under the state lock and renders its answer.
func (s *Server) execute(h handler, c *call) (int, []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tickLocked()
	c.now = s.nowLocked()
	v, aerr := h(s, c)
	defer s.trimLocked()
	if aerr != nil {
		return aerr.Status, mustMarshal(aerr)
	}
	return http.StatusOK, mustMarshal(v)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.WriteHeader(status)
	w.Write(mustMarshal(v))
}

// mustMarshal encodes the simulator's own types, which always encode.
func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("stripesim: encode %T: %v", v, err))
	}
	return b
}

// scopeOf names the data of one API key and Connect account. The key is
// hashed so that it is never written to the state file.
func scopeOf(apiKey, account string) string {
	sum := sha256.Sum256([]byte(apiKey))
	return hex.EncodeToString(sum[:8]) + "/" + account
}

const requestIDLen = 14

func newRequestID() string {
	b := make([]byte, 0, 4+requestIDLen)
	b = append(b, "req_"...)
	for range requestIDLen {
		b = append(b, idAlphabet[rand.IntN(len(idAlphabet))])
	}
	return string(b)
}
