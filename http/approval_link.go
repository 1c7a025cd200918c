package http

import (
	"context"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/alert"
)

// Signed approve/deny links, sent in approval_required alerts
// (alert.ApprovalLink). The MAC is the credential: no admin token. A GET
// only shows a confirmation page, so a chat app fetching a link for its
// preview decides nothing; the page's one button POSTs to the same URL,
// which decides. The approval's own state machine makes a link single-use:
// only a pending approval can be decided, so a second POST (of either
// link) answers 409. A link whose MAC does not verify counts as a failed
// authentication against the client's address (authlimit.go), like a
// wrong admin token.

// approvalLinkPath returns the approval id of /vault/approvals/{id}/decide.
func approvalLinkPath(raw string) (string, bool) {
	rest, ok := strings.CutPrefix(raw, "/vault/approvals/")
	if !ok {
		return "", false
	}
	id, ok := strings.CutSuffix(rest, "/decide")
	if !ok || !validApprovalID(id) {
		return "", false
	}
	return id, true
}

// publicURL is the base of links in alerts: PublicURL, else the admin
// listener's own URL.
func (s *Server) publicURL() string {
	if s.PublicURL != "" {
		return strings.TrimRight(s.PublicURL, "/")
	}
	return s.AdminURL()
}

// approvalLink is a link's query, parsed but not yet verified.
type approvalLink struct {
	id, action, endpoint, sig string
	exp                       int64
}

// parseApprovalLink reads the link's query; every parameter must appear
// exactly once, so no two readers of the URL can disagree on it.
func parseApprovalLink(r *http.Request, id string) (approvalLink, bool) {
	q := r.URL.Query()
	one := func(name string) (string, bool) {
		v := q[name]
		return strings.Join(v, ""), len(v) == 1 && len(v[0]) <= 128
	}
	l := approvalLink{id: id}
	var ok [4]bool
	var exp string
	l.action, ok[0] = one("action")
	l.endpoint, ok[1] = one("endpoint")
	exp, ok[2] = one("exp")
	l.sig, ok[3] = one("sig")
	if ok != [4]bool{true, true, true, true} || len(q) != 4 || (l.action != alert.LinkApprove && l.action != alert.LinkDeny) {
		return l, false
	}
	n, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || strconv.FormatInt(n, 10) != exp {
		return l, false
	}
	l.exp = n
	return l, true
}

// serveApprovalLink serves GET (the confirmation page) and POST (the
// decision) of a signed link.
func (s *Server) serveApprovalLink(w http.ResponseWriter, r *http.Request, id string) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer") // the URL carries the MAC
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodPost {
		h.Set("Allow", "GET, POST")
		s.linkPage(w, http.StatusMethodNotAllowed, linkView{Title: "Method not allowed", Message: "Open the link, then press the button."})
		return
	}
	if !s.checkAuthLimit(w, r, false) {
		return
	}
	l, ok := parseApprovalLink(r, id)
	secret, err := s.Store.LinkSecret(r.Context(), keybrake.LinkSecretApprovals)
	if err != nil {
		s.logger().Error("approval link secret unavailable", "err", err)
		s.linkPage(w, http.StatusServiceUnavailable, linkView{Title: "Unavailable", Message: "keybrake cannot check this link right now; try again shortly or use the console."})
		return
	}
	if !ok || !alert.VerifyLink(secret, l.id, l.action, l.endpoint, l.exp, l.sig) {
		s.authFailed(r, "approval link for "+id+" with a bad signature")
		s.linkPage(w, http.StatusForbidden, linkView{Title: "Invalid link", Message: "This link is not one keybrake signed, or it was changed. Use the console or the admin API."})
		return
	}
	now := s.Now()
	if !now.Before(time.Unix(l.exp, 0)) {
		s.linkPage(w, http.StatusGone, linkView{Title: "Link expired", Message: "This link expired at " + time.Unix(l.exp, 0).UTC().Format(time.RFC3339) + "; the approval has expired with it."})
		return
	}
	a, err := s.Store.FindApprovalByID(r.Context(), id)
	if err != nil {
		s.linkPage(w, ErrorStatus(keybrake.ErrorCode(err)), linkView{Title: "Not found", Message: "No such approval."})
		return
	}
	v := linkView{Approval: a, Action: l.action, Status: a.Status(now)}
	if r.Method != http.MethodPost {
		v.Title, v.Confirm = strings.ToUpper(l.action[:1])+l.action[1:]+" this request?", v.Status == keybrake.ApprovalPending
		if !v.Confirm {
			v.Message = "This approval is " + v.Status + "; it can no longer be decided."
		}
		s.linkPage(w, http.StatusOK, v)
		return
	}
	by := "signed link"
	if l.endpoint != "" {
		by += " (endpoint " + l.endpoint + ")"
	}
	// The decision is the admin audit's too: its actor is the link.
	r = r.WithContext(context.WithValue(r.Context(), identityKey{}, &keybrake.AdminToken{Name: by, Role: keybrake.RoleAdmin}))
	a, err = s.DecideApproval(r, id, l.action == alert.LinkApprove, by)
	if err != nil {
		st := ErrorStatus(keybrake.ErrorCode(err))
		if st >= 500 {
			s.logger().Error("approval link decision failed", "approval", id, "err", err)
		}
		s.linkPage(w, st, linkView{Title: "Not decided", Message: keybrake.ErrorMessage(err)})
		return
	}
	v.Approval, v.Status, v.Title = a, a.Status(now), "Request "+a.State
	v.Message = "Done. The client's retry with the same Idempotency-Key will be " + map[bool]string{true: "forwarded", false: "refused"}[a.State == keybrake.ApprovalApproved] + "."
	s.linkPage(w, http.StatusOK, v)
}

// linkView is what the link's page shows.
type linkView struct {
	Title, Message, Action, Status string
	Confirm                        bool
	Approval                       *keybrake.Approval
}

var linkTemplate = template.Must(template.New("link").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<meta name="robots" content="noindex"><title>keybrake: {{.Title}}</title>
<style>body{font:16px system-ui,sans-serif;max-width:36em;margin:2em auto;padding:0 1em}dt{font-weight:600}dd{overflow-wrap:anywhere}dd dl{margin:.2em 0}button{font-size:1.1em;padding:.5em 1.5em}</style>
</head><body><h1>{{.Title}}</h1>
{{with .Approval}}<dl>
<dt>Approval</dt><dd>{{.ID}} ({{$.Status}})</dd>
<dt>Key</dt><dd>{{.KeyID}}</dd>
<dt>Request</dt><dd>{{.Operation}}: {{.Method}} {{.Path}}{{if .Account}} on {{.Account}}{{end}}</dd>
<dt>Amount</dt><dd>{{if .Currency}}{{.Amount}} {{.Currency}} (${{.Micros}}){{else}}<strong>not priced</strong>: keybrake does not know what this operation moves; its amount is in the request's parameters{{end}}</dd>
<dt>Parameters</dt><dd>{{with .Params}}{{if or .List .More}}<dl>{{range .List}}<dt><code>{{.Name}}</code></dt><dd>{{if .Masked}}<em>{{.Value}}</em>{{else}}<code>{{.Value}}</code>{{end}}</dd>{{end}}</dl>{{with .More}}…and {{.}} more not shown{{end}}{{else}}<em>none</em>{{end}}{{else}}<em>parameters not recorded</em> (asked for before keybrake kept them){{end}}</dd>
<dt>Why</dt><dd>{{.Reason}}</dd>
<dt>Idempotency-Key</dt><dd>{{.IdempotencyKey}}</dd>
<dt>Expires</dt><dd>{{.ExpiresAt.UTC.Format "2006-01-02 15:04:05 UTC"}}</dd>
{{if .DecidedBy}}<dt>Decided by</dt><dd>{{.DecidedBy}}</dd>{{end}}
</dl>{{end}}
{{if .Message}}<p>{{.Message}}</p>{{end}}
{{if .Confirm}}<form method="post"><button type="submit">{{.Action}}</button></form>{{end}}
</body></html>
`))

func (s *Server) linkPage(w http.ResponseWriter, status int, v linkView) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := linkTemplate.Execute(w, v); err != nil {
		s.logger().Warn("approval link page", "err", err)
	}
}
