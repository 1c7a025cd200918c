package http

import (
	"bufio"
	"context"
	"crypto/subtle"
	"fmt"
	"math"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/keybrake/keybrake"
)

// AdminTokens holds the admin identities read from a file, one per line:
//
//	# name   role    token (or sha256:<hex of its SHA-256>)
//	alice    admin   sha256:9f86d081884c7d65…
//	grafana  viewer  kbadm_…
//
// The file is read again when its modification time or size changes
// (checked at most once a second, on use) and on Reload (serve calls it on
// SIGHUP). A file that no longer parses keeps the previous identities and
// is logged. Plain tokens in the file are held only as hashes in memory.
type AdminTokens struct {
	Path string

	mu        sync.Mutex
	byHash    map[string]*keybrake.AdminToken
	stamp     string
	checkedAt time.Time
	err       error
}

// LoadAdminTokens reads path. A missing or malformed file, or a weak token
// in it, is an error naming the line.
func LoadAdminTokens(path string) (*AdminTokens, error) {
	a := &AdminTokens{Path: path}
	if err := a.Reload(); err != nil {
		return nil, err
	}
	return a, nil
}

// Reload reads the file again; on error the previous identities stay.
func (a *AdminTokens) Reload() error {
	fi, err := os.Stat(a.Path)
	if err != nil {
		return fmt.Errorf("admin tokens file: %w", err)
	}
	stamp := fmt.Sprintf("%d/%d", fi.ModTime().UnixNano(), fi.Size())
	byHash, err := parseAdminTokens(a.Path)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.checkedAt = time.Now()
	if err != nil {
		a.err = err
		return err
	}
	a.byHash, a.stamp, a.err = byHash, stamp, nil
	return nil
}

// find returns the identity hashing to hash, reloading a changed file.
func (a *AdminTokens) find(hash string, logf func(msg string, args ...any)) *keybrake.AdminToken {
	a.mu.Lock()
	check := time.Since(a.checkedAt) >= time.Second
	a.mu.Unlock()
	if check {
		if fi, err := os.Stat(a.Path); err == nil {
			a.mu.Lock()
			changed := fmt.Sprintf("%d/%d", fi.ModTime().UnixNano(), fi.Size()) != a.stamp
			a.checkedAt = time.Now()
			a.mu.Unlock()
			if changed {
				if err := a.Reload(); err != nil {
					logf("admin tokens file changed but does not load; keeping the previous tokens", "path", a.Path, "err", err)
				} else {
					logf("admin tokens file reloaded", "path", a.Path)
				}
			}
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.byHash[hash]
}

// All returns the file's identities.
func (a *AdminTokens) All() []*keybrake.AdminToken {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*keybrake.AdminToken, 0, len(a.byHash))
	for _, t := range a.byHash {
		out = append(out, t)
	}
	return out
}

func parseAdminTokens(path string) (map[string]*keybrake.AdminToken, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("admin tokens file: %w", err)
	}
	defer f.Close()
	out := map[string]*keybrake.AdminToken{}
	names := map[string]bool{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 {
			return nil, fmt.Errorf("%s:%d: want `name role token` (or `name role sha256:<hex>`), got %d fields", path, n, len(fields))
		}
		name, role, tok := fields[0], fields[1], fields[2]
		if err := validTokenName(name); err != nil {
			return nil, fmt.Errorf("%s:%d: %s", path, n, keybrake.ErrorMessage(err))
		}
		if names[name] {
			return nil, fmt.Errorf("%s:%d: the name %q appears twice", path, n, name)
		}
		names[name] = true
		if role != keybrake.RoleAdmin && role != keybrake.RoleViewer {
			return nil, fmt.Errorf("%s:%d: role %q: want admin or viewer", path, n, role)
		}
		t := &keybrake.AdminToken{Name: name, Role: role, Source: "file"}
		if h, ok := strings.CutPrefix(tok, "sha256:"); ok {
			if len(h) != 64 || strings.Trim(strings.ToLower(h), "0123456789abcdef") != "" {
				return nil, fmt.Errorf("%s:%d: sha256: wants 64 hex digits", path, n)
			}
			t.TokenHash = strings.ToLower(h)
		} else {
			if err := CheckTokenStrength(tok); err != nil {
				return nil, fmt.Errorf("%s:%d: token of %q: %v", path, n, name, err)
			}
			t.TokenHash, t.Prefix = HashSecret(tok), tokenPrefix(tok)
		}
		if _, dup := out[t.TokenHash]; dup {
			return nil, fmt.Errorf("%s:%d: the token of %q is also another name's", path, n, name)
		}
		out[t.TokenHash] = t
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("admin tokens file: %w", err)
	}
	return out, nil
}

func tokenPrefix(tok string) string {
	if len(tok) > 10 {
		return tok[:10]
	}
	return ""
}

// CheckTokenStrength refuses an admin token that can be guessed: shorter
// than 24 characters, or with less than 96 bits of entropy estimated from
// its length and the character classes it uses (a kbadm_ prefix counts
// for nothing), or made of fewer than 8 distinct characters.
func CheckTokenStrength(tok string) error {
	body := strings.TrimPrefix(tok, keybrake.AdminTokenPrefix)
	if len(tok) < 24 {
		return fmt.Errorf("too short (%d characters; at least 24). Generate one with: openssl rand -hex 24", len(tok))
	}
	var lower, upper, digit, other bool
	distinct := map[rune]bool{}
	for _, c := range body {
		distinct[c] = true
		switch {
		case c >= 'a' && c <= 'z':
			lower = true
		case c >= 'A' && c <= 'Z':
			upper = true
		case c >= '0' && c <= '9':
			digit = true
		default:
			other = true
		}
	}
	alphabet := 0
	for _, c := range []struct {
		in bool
		n  int
	}{{lower, 26}, {upper, 26}, {digit, 10}, {other, 33}} {
		if c.in {
			alphabet += c.n
		}
	}
	bits := float64(len(body)) * math.Log2(float64(max(alphabet, 1)))
	if bits < 96 || len(distinct) < 8 {
		return fmt.Errorf("low entropy (about %.0f bits, %d distinct characters; want 96 bits and 8). Generate one with: openssl rand -hex 24", bits, len(distinct))
	}
	return nil
}

func validTokenName(name string) error {
	if name == "" || len(name) > 64 || strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-@") != "" {
		return keybrake.ErrorParam("name", "A token name is 1 to 64 letters, digits, '_', '.', '-' or '@'; got %q.", name)
	}
	return nil
}

type identityKey struct{}

// adminIdentity returns who is calling the admin API.
func adminIdentity(ctx context.Context) *keybrake.AdminToken {
	t, _ := ctx.Value(identityKey{}).(*keybrake.AdminToken)
	return t
}

// envIdentity is KEYBRAKE_ADMIN_TOKEN's identity.
var envIdentity = &keybrake.AdminToken{Name: "env", Role: keybrake.RoleAdmin, Source: "env"}

// adminGate authenticates an admin request and checks its role: every
// method but GET and HEAD changes something and needs the admin role. It
// writes the refusal and returns false when the request may not proceed.
func (s *Server) adminGate(w http.ResponseWriter, r *http.Request, write bool) (*http.Request, bool) {
	if !s.checkAuthLimit(w, r, false) {
		return r, false
	}
	id, err := s.findAdmin(r)
	if err != nil {
		s.writeAdminError(w, r, err)
		return r, false
	}
	if id == nil {
		addr := s.clientAddr(r)
		s.limiter.fail(addr)
		s.metrics.authFailed()
		s.addAdminEvent(r, "", "auth.failed", r.Method+" "+truncate(r.URL.EscapedPath(), 200), "", addr.String())
		w.Header().Set("WWW-Authenticate", `Bearer realm="keybrake admin"`)
		s.writeAdminError(w, r, keybrake.Errorf(keybrake.EUNAUTHORIZED, "The admin API needs Authorization: Bearer <admin token>: KEYBRAKE_ADMIN_TOKEN, a token of --admin-tokens-file, or one made with `keybrake admin-tokens create`."))
		return r, false
	}
	if write && id.Role != keybrake.RoleAdmin {
		s.writeAdminError(w, r, keybrake.Errorf(keybrake.EFORBIDDEN, "The admin token %q has the role %s, which only reads; this needs a token with the role admin.", id.Name, id.Role))
		return r, false
	}
	return r.WithContext(context.WithValue(r.Context(), identityKey{}, id)), true
}

// findAdmin returns the identity of the request's bearer token, nil if
// none matches. A store error is returned as EUNAVAILABLE.
func (s *Server) findAdmin(r *http.Request) (*keybrake.AdminToken, error) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" || len(token) > 256 {
		return nil, nil
	}
	if s.AdminToken != "" && subtle.ConstantTimeCompare([]byte(token), []byte(s.AdminToken)) == 1 {
		return envIdentity, nil
	}
	hash := HashSecret(token)
	if s.AdminTokens != nil {
		if t := s.AdminTokens.find(hash, s.logger().Warn); t != nil {
			return t, nil
		}
	}
	as, ok := s.Store.(keybrake.AdminStore)
	if !ok {
		return nil, nil
	}
	t, err := as.FindAdminTokenByHash(r.Context(), hash)
	switch {
	case keybrake.ErrorCode(err) == keybrake.ENOTFOUND:
		return nil, nil
	case err != nil:
		return nil, storeError(err)
	case t.RevokedAt != nil && !s.Now().Before(*t.RevokedAt):
		return nil, nil
	}
	return t, nil
}

// addAdminEvent records an admin action or a failed admin authentication.
// It is written at once: admin actions are rare, and failures are bounded
// by the auth limit.
func (s *Server) addAdminEvent(r *http.Request, actor, action, target, detail, client string) {
	as, ok := s.Store.(keybrake.AdminStore)
	if !ok {
		return
	}
	e := s.newAdminEvent(r, actor, action, target, detail, client)
	if err := as.AddAdminEvent(r.Context(), e); err != nil {
		s.logger().Error("admin audit event not written", "action", action, "actor", actor, "target", target, "err", err)
	}
}

// newAdminEvent is the admin audit event of an action now; client ""
// means the request's client address.
func (s *Server) newAdminEvent(r *http.Request, actor, action, target, detail, client string) *keybrake.AdminEvent {
	if client == "" {
		client = s.clientAddr(r).String()
	}
	return &keybrake.AdminEvent{Time: s.Now().UTC().Truncate(time.Microsecond), Actor: actor, Action: action, Target: target, Detail: truncate(detail, 1000), Client: client}
}

// audited records what the calling admin did.
func (s *Server) audited(r *http.Request, action, target, detail string) {
	s.logAdminAction(r, action, target)
	s.addAdminEvent(r, adminName(r), action, target, detail, "")
}

// adminName is the calling admin's name, the actor of its audit events.
func adminName(r *http.Request) string {
	if id := adminIdentity(r.Context()); id != nil {
		return id.Name
	}
	return ""
}

// logAdminAction logs what the calling admin did.
func (s *Server) logAdminAction(r *http.Request, action, target string) {
	s.logger().Info("admin action", "actor", adminName(r), "action", action, "target", target)
}
