package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// cookieName is the session cookie. The __Host- prefix would pin it to
// Secure, which plain-HTTP loopback use cannot set; Path limits it to the
// console.
const cookieName = "keybrake_console"

// session is a signed-in operator. The cookie holds a random token; the
// server keeps only its SHA-256, so a dump of memory or logs cannot be
// replayed as a cookie.
type session struct {
	csrf    string // sent in every form, checked on every state change
	expires time.Time
	// adminToken is the admin token the operator signed in with, kept in
	// this process's memory only (never in a cookie or a page): the
	// console's admin API calls carry it, so the admin API's roles and
	// its audit of who changed what apply to console sessions too.
	adminToken string
}

type sessionKey struct{}

// sessions are the live sessions, by the hash of their token.
type sessions struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[string]*session
}

func newSessions(now func() time.Time) *sessions {
	return &sessions{now: now, m: map[string]*session{}}
}

// start creates a session and returns its token, for the cookie.
func (s *sessions) start(ttl time.Duration, adminToken string) (string, *session) {
	token := randomHex(32)
	sess := &session{csrf: randomHex(32), expires: s.now().Add(ttl), adminToken: adminToken}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for h, old := range s.m { // sessions are few; sweep the expired on each sign-in
		if !now.Before(old.expires) {
			delete(s.m, h)
		}
	}
	s.m[hashToken(token)] = sess
	return token, sess
}

// find returns the request's live session, or nil.
func (s *sessions) find(r *http.Request) *session {
	ck, err := r.Cookie(cookieName)
	if err != nil || len(ck.Value) != 64 {
		return nil
	}
	h := hashToken(ck.Value)
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.m[h]
	if sess == nil {
		return nil
	}
	if !s.now().Before(sess.expires) {
		delete(s.m, h)
		return nil
	}
	return sess
}

// end forgets the request's session.
func (s *sessions) end(r *http.Request) {
	if ck, err := r.Cookie(cookieName); err == nil {
		s.mu.Lock()
		delete(s.m, hashToken(ck.Value))
		s.mu.Unlock()
	}
}

func hashToken(t string) string {
	sum := sha256.Sum256([]byte(t))
	return hex.EncodeToString(sum[:])
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// sessionCookie is the cookie carrying token, or clearing it when maxAge
// is negative.
func sessionCookie(r *http.Request, token string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name:     cookieName,
		Value:    token,
		Path:     "/console",
		MaxAge:   maxAge,
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	}
}

// checkSameOrigin refuses a state change sent from another origin. Browsers
// send Origin on every POST; a request with neither Origin nor Referer is
// refused too, since the console is only driven by browsers and tests that
// act like them.
func checkSameOrigin(r *http.Request) error {
	want := "http://" + r.Host
	if r.TLS != nil {
		want = "https://" + r.Host
	}
	if o := r.Header.Get("Origin"); o != "" {
		if o != want {
			return errors.New("the request came from another origin")
		}
		return nil
	}
	if ref, err := url.Parse(r.Referer()); err == nil && ref.Host != "" {
		if ref.Scheme+"://"+ref.Host != want {
			return errors.New("the request came from another origin")
		}
		return nil
	}
	return errors.New("the request carries no Origin")
}

// checkCSRF checks a state change's origin and CSRF token.
func checkCSRF(r *http.Request, sess *session) error {
	if err := checkSameOrigin(r); err != nil {
		return err
	}
	token := r.Header.Get("X-CSRF-Token")
	if token == "" {
		r.Body = http.MaxBytesReader(nil, r.Body, maxFormBytes)
		token = r.PostFormValue("csrf")
	}
	if subtle.ConstantTimeCompare([]byte(token), []byte(sess.csrf)) != 1 {
		return errors.New("missing or wrong CSRF token; reload the page and try again")
	}
	return nil
}

// maxFormBytes bounds a console form.
const maxFormBytes = 64 << 10

// tokenAccepted reports whether the admin API accepts the typed token: the
// built-in KEYBRAKE_ADMIN_TOKEN or any named admin token (admin or viewer),
// checked by the admin API itself in-process, with its per-address limit on
// failures, from the browser's address.
func (c *Console) tokenAccepted(r *http.Request, token string) bool {
	return c.tokenStatus(r, token) == http.StatusOK
}

// tokenStatus is the admin API's answer to token, from r's address: 200
// when it accepts it, 401 when it is not (or no longer) an admin token.
func (c *Console) tokenStatus(r *http.Request, token string) int {
	if token == "" {
		return http.StatusUnauthorized
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, "http://console.invalid/vault/keys?limit=1", nil)
	if err != nil {
		return http.StatusInternalServerError
	}
	req.RemoteAddr = r.RemoteAddr
	req.Header.Set("Authorization", "Bearer "+token)
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	c.Admin.ServeHTTP(rec, req)
	return rec.status
}

// sessionRevoked reports whether the admin token sess signed in with is no
// longer accepted (revoked, or gone from the tokens file), and then ends
// the session. The console reads the audit log and the spend from the
// store itself, so a session outliving its token kept showing them, live,
// for the rest of its 12 hours. Any other failure (the store down, the
// address rate-limited) leaves the session as it is.
func (c *Console) sessionRevoked(r *http.Request, sess *session) bool {
	if sess.adminToken == "" || c.tokenStatus(r, sess.adminToken) != http.StatusUnauthorized {
		return false
	}
	c.sessions.end(r)
	c.Logger.Warn("console session ended: its admin token is no longer accepted", "path", r.URL.Path)
	return true
}
