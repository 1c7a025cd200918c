package console

import (
	"bytes"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
)

// page is what every page template receives.
type page struct {
	Title  string
	Nav    string // the active navigation entry
	CSRF   string
	Stream string // the live feed's URL, "" for none
	Flash  string
	Data   any
}

var funcs = template.FuncMap{
	"usd":      usd,
	"usdPtr":   usdPtr,
	"money":    money,
	"time":     timeTag,
	"timePtr":  timePtrTag,
	"bar":      bar,
	"kind":     keybrake.RefusalKind,
	"join":     strings.Join,
	"statuses": func() []string { return []string{"active", "expired", "revoked"} },
	"caps":     func() []formField { return capFields },
	"lists":    func() []formField { return listFields },
	"field":    func(f keyForm, name string) string { return f.value(name) },
	"row":      func(f feed, e *keybrake.Event) eventRow { return eventRow{E: e, ShowKey: f.ShowKey} },
}

// parsePages parses each page with the layout and the shared fragments.
func parsePages() map[string]*template.Template {
	names, err := fs.Glob(assets, "assets/*.html")
	if err != nil {
		panic(err)
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		base := path.Base(n)
		if base == "layout.html" {
			continue
		}
		pages[base] = template.Must(template.New(base).Funcs(funcs).ParseFS(assets, "assets/layout.html", n))
	}
	return pages
}

// render writes a full page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	if sess, ok := r.Context().Value(sessionKey{}).(*session); ok {
		p.CSRF = sess.csrf
	}
	var buf bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		c.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fragment renders one named template of a page, for live updates.
func (c *Console) fragment(page, name string, data any) (string, error) {
	var buf bytes.Buffer
	if err := c.pages[page].ExecuteTemplate(&buf, name, data); err != nil {
		return "", err
	}
	return buf.String(), nil
}

// fail answers an unexpected error without showing its detail.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := keybrake.ErrorCode(err)
	status := http.StatusInternalServerError
	switch code {
	case keybrake.ENOTFOUND:
		c.notFound(w, r)
		return
	case keybrake.EUNAVAILABLE:
		status = http.StatusServiceUnavailable
	}
	c.Logger.Error("console error", "method", r.Method, "path", r.URL.Path, "err", err)
	http.Error(w, "The console could not answer: "+keybrake.ErrorMessage(err), status)
}

func (c *Console) notFound(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusNotFound, "notfound.html", page{Title: "Not found"})
}

// serveSignIn shows the sign-in form and exchanges a correct admin token
// for a session cookie. The token travels only in this form's POST body.
func (c *Console) serveSignIn(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"))
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		c.render(w, r, http.StatusOK, "signin.html", page{Title: "Sign in", Data: map[string]string{"Next": next}})
	case http.MethodPost:
		if err := checkSameOrigin(r); err != nil {
			http.Error(w, "Forbidden: "+err.Error(), http.StatusForbidden)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		token := strings.TrimSpace(r.PostFormValue("token"))
		next = safeNext(r.PostFormValue("next"))
		if !c.tokenAccepted(r, token) {
			c.Logger.Warn("console sign-in refused", "remote", r.RemoteAddr)
			c.render(w, r, http.StatusUnauthorized, "signin.html", page{Title: "Sign in", Data: map[string]string{
				"Next": next, "Error": "That is not an admin token of this server: KEYBRAKE_ADMIN_TOKEN (or the one `keybrake serve` printed at start), or a named token from `keybrake admin-tokens create`.",
			}})
			return
		}
		tok, _ := c.sessions.start(c.SessionTTL, token)
		http.SetCookie(w, sessionCookie(r, tok, int(c.SessionTTL/time.Second)))
		c.Logger.Info("console sign-in", "remote", r.RemoteAddr)
		http.Redirect(w, r, next, http.StatusSeeOther)
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "Method not allowed.", http.StatusMethodNotAllowed)
	}
}

func (c *Console) serveSignOut(w http.ResponseWriter, r *http.Request) {
	c.sessions.end(r)
	http.SetCookie(w, sessionCookie(r, "", -1))
	http.Redirect(w, r, "/console/signin", http.StatusSeeOther)
}

// safeNext keeps a post-sign-in redirect inside the console.
func safeNext(next string) string {
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil ||
		!strings.HasPrefix(u.Path, "/console/") || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return "/console/"
	}
	return u.RequestURI()
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }
