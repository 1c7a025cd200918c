package http

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keybrake/keybrake"
)

// AuthLimit bounds failed authentications (an unknown, malformed or
// missing vault key; a wrong admin token) per client address: Burst
// failures at once, refilled at one every Every. Past it, every request
// from that address that carries credentials is refused with a 429 until
// a failure's slot refills, correct credentials included, so guessing is
// not sped up by watching which guess goes through.
type AuthLimit struct {
	Burst int
	Every time.Duration
}

// DefaultAuthFailures allows 20 failures at once and one more every 3 s
// (1,200 an hour) per client address.
var DefaultAuthFailures = AuthLimit{Burst: 20, Every: 3 * time.Second}

// maxLimiterEntries bounds the addresses tracked; past it, full buckets
// (addresses that have not failed lately) are dropped first.
const maxLimiterEntries = 100_000

// authLimiter is a token bucket per client address, counting failures only.
type authLimiter struct {
	limit AuthLimit
	now   func() time.Time

	mu      sync.Mutex
	buckets map[netip.Addr]*authBucket
}

type authBucket struct {
	tokens  float64
	updated time.Time
	warned  bool // the first refusal of a lockout was audited
}

func newAuthLimiter(l AuthLimit, now func() time.Time) *authLimiter {
	if l.Burst <= 0 || l.Every <= 0 {
		l = DefaultAuthFailures
	}
	return &authLimiter{limit: l, now: now, buckets: map[netip.Addr]*authBucket{}}
}

// bucket returns addr's bucket refilled to now; a.mu is held.
func (a *authLimiter) bucket(addr netip.Addr) *authBucket {
	now := a.now()
	b := a.buckets[addr]
	if b == nil {
		return &authBucket{tokens: float64(a.limit.Burst), updated: now}
	}
	if d := now.Sub(b.updated); d > 0 {
		b.tokens = math.Min(float64(a.limit.Burst), b.tokens+float64(d)/float64(a.limit.Every))
		b.updated = now
	}
	return b
}

// blocked reports whether addr is locked out, how long until it may try
// again, and whether this is the first refusal of the lockout (audited).
func (a *authLimiter) blocked(addr netip.Addr) (bool, time.Duration, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b := a.bucket(addr)
	if b.tokens >= 1 {
		return false, 0, false
	}
	first := !b.warned
	b.warned = true
	wait := time.Duration((1 - b.tokens) * float64(a.limit.Every))
	return true, wait, first
}

// fail takes one token from addr's bucket.
func (a *authLimiter) fail(addr netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b := a.bucket(addr)
	b.tokens--
	if b.tokens >= 1 {
		b.warned = false
	}
	if _, ok := a.buckets[addr]; !ok {
		if len(a.buckets) >= maxLimiterEntries {
			a.prune()
		}
		a.buckets[addr] = b
	}
}

// prune drops the buckets that have refilled; a.mu is held.
func (a *authLimiter) prune() {
	for addr := range a.buckets {
		if b := a.bucket(addr); b.tokens >= float64(a.limit.Burst) {
			delete(a.buckets, addr)
		}
	}
	if len(a.buckets) >= maxLimiterEntries {
		a.buckets = map[netip.Addr]*authBucket{}
	}
}

// clientAddr is the address the auth limit counts against (an IPv6
// address as its /64, which one client typically holds whole): the peer's,
// or, when the peer is a trusted proxy, the right-most X-Forwarded-For
// entry that is not itself a trusted proxy. The header is never believed
// from anyone else: a client choosing its own address would choose a new
// one per guess.
func (s *Server) clientAddr(r *http.Request) netip.Addr {
	a := s.peerOrForwarded(r)
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}

func (s *Server) peerOrForwarded(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		a, _ := netip.ParseAddr(host)
		return a.Unmap()
	}
	peer := ap.Addr().Unmap()
	if !s.trusted(peer) {
		return peer
	}
	hops := r.Header.Values("X-Forwarded-For")
	var all []string
	for _, h := range hops {
		all = append(all, strings.Split(h, ",")...)
	}
	for i := len(all) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(all[i]))
		if err != nil {
			return peer // a malformed hop: the proxy's own address, not a guess
		}
		if a = a.Unmap(); !s.trusted(a) {
			return a
		}
	}
	return peer
}

func (s *Server) trusted(a netip.Addr) bool {
	for _, p := range s.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// checkAuthLimit answers 429 and returns false when r's client is locked
// out. The first refusal of a lockout is audited; the rest only counted.
// stripeShaped picks the proxy's error shape over the admin API's.
func (s *Server) checkAuthLimit(w http.ResponseWriter, r *http.Request, stripeShaped bool) bool {
	secs, msg, locked := s.authLockout(r)
	if !locked {
		return true
	}
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	if stripeShaped {
		w.Header().Set("Stripe-Should-Retry", "false")
		writeJSON(w, http.StatusTooManyRequests, stripeError{Error: stripeErrorBody{Type: "invalid_request_error", Code: "rate_limit", Message: msg}})
		return false
	}
	writeJSON(w, http.StatusTooManyRequests, map[string]any{"error": map[string]string{"code": "rate_limit", "message": msg}})
	return false
}

// authLockout reports whether r's client is locked out, for how many more
// seconds and with what message, counting and auditing the refusal.
func (s *Server) authLockout(r *http.Request) (secs int, msg string, locked bool) {
	addr := s.clientAddr(r)
	blocked, wait, first := s.limiter.blocked(addr)
	if !blocked {
		return 0, "", false
	}
	secs = int(math.Ceil(wait.Seconds()))
	if secs < 1 {
		secs = 1
	}
	s.metrics.authRefused()
	if first {
		s.auditAuth(r, addr, "rate_limited", fmt.Sprintf("too many failed authentications from %s; refused for %ds", addr, secs))
	}
	msg = fmt.Sprintf("Too many failed authentications from your address (%s). Wait %d seconds, then retry with a valid key; keybrake refuses every authenticated request from this address until then.", addr, secs)
	return secs, msg, true
}

// authFailed counts a failed authentication against r's client and audits
// it: on the key when one was named (revoked, expired, suspended keys
// already are), else as an event with no key.
func (s *Server) authFailed(r *http.Request, reason string) {
	addr := s.clientAddr(r)
	s.limiter.fail(addr)
	s.metrics.authFailed()
	s.auditAuth(r, addr, "unauthorized", reason+" from "+addr.String())
}

// auditAuth writes an event with no key: who failed to authenticate where.
func (s *Server) auditAuth(r *http.Request, addr netip.Addr, op, reason string) {
	s.audit.add(&keybrake.Event{
		Time:      s.Now().UTC(),
		Operation: "auth." + op,
		Method:    r.Method,
		Path:      truncate(r.URL.EscapedPath(), 200),
		Decision:  keybrake.DecisionDeny,
		Reason:    reason,
	})
}
