package http

import (
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
)

// serveAdminMore routes the admin API beyond /vault/keys: admin tokens and
// the admin audit log. The caller authenticated the request.
func (s *Server) serveAdminMore(w http.ResponseWriter, r *http.Request, raw string) {
	parts := strings.Split(strings.TrimPrefix(raw, "/vault/"), "/")
	switch {
	case len(parts) == 1 && parts[0] == "admin_tokens" && r.Method == http.MethodGet:
		s.handleListAdminTokens(w, r)
	case len(parts) == 1 && parts[0] == "admin_tokens" && r.Method == http.MethodPost:
		s.handleCreateAdminToken(w, r)
	case len(parts) == 3 && parts[0] == "admin_tokens" && parts[2] == "revoke" && r.Method == http.MethodPost:
		s.handleRevokeAdminToken(w, r, parts[1])
	case parts[0] == "approvals":
		s.serveApprovals(w, r, parts) // approval.go
	case len(parts) == 1 && parts[0] == "audit" && r.Method == http.MethodGet:
		s.handleAdminEvents(w, r)
	default:
		s.writeAdminError(w, r, keybrake.Errorf(keybrake.ENOTFOUND, "No admin route for %s %s.", r.Method, raw))
	}
}

func (s *Server) adminStore() (keybrake.AdminStore, error) {
	as, ok := s.Store.(keybrake.AdminStore)
	if !ok {
		return nil, keybrake.Errorf(keybrake.EINVALID, "This store keeps no admin tokens.")
	}
	return as, nil
}

// adminTokenView is an admin token as the API shows it.
type adminTokenView struct {
	*keybrake.AdminToken
	Object string `json:"object"`
	Token  string `json:"token,omitempty"` // only in the response to creation
}

func (s *Server) handleListAdminTokens(w http.ResponseWriter, r *http.Request) {
	data := []adminTokenView{}
	if s.AdminToken != "" {
		data = append(data, adminTokenView{AdminToken: envIdentity, Object: "admin_token"})
	}
	if s.AdminTokens != nil {
		file := s.AdminTokens.All()
		sort.Slice(file, func(i, j int) bool { return file[i].Name < file[j].Name })
		for _, t := range file {
			data = append(data, adminTokenView{AdminToken: t, Object: "admin_token"})
		}
	}
	if as, ok := s.Store.(keybrake.AdminStore); ok {
		ts, err := as.FindAdminTokens(r.Context())
		if err != nil {
			s.writeAdminError(w, r, err)
			return
		}
		for _, t := range ts {
			data = append(data, adminTokenView{AdminToken: t, Object: "admin_token"})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data, "has_more": false})
}

func (s *Server) handleCreateAdminToken(w http.ResponseWriter, r *http.Request) {
	as, err := s.adminStore()
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	fields, err := decodeObject(r)
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	var name, role string
	for f, raw := range fields {
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			s.writeAdminError(w, r, keybrake.ErrorParam(f, "%s must be a string.", f))
			return
		}
		switch f {
		case "name":
			name = v
		case "role":
			role = v
		default:
			s.writeAdminError(w, r, keybrake.ErrorParam(f, "Unknown field %q. Known fields: name, role.", f))
			return
		}
	}
	if err := validTokenName(name); err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	if name == envIdentity.Name {
		s.writeAdminError(w, r, keybrake.ErrorParam("name", "The name %q is KEYBRAKE_ADMIN_TOKEN's.", name))
		return
	}
	if role != keybrake.RoleAdmin && role != keybrake.RoleViewer {
		s.writeAdminError(w, r, keybrake.ErrorParam("role", `role must be "admin" (changes keys and tokens) or "viewer" (only reads).`))
		return
	}
	token := keybrake.AdminTokenPrefix + randomID("", 40)
	t := &keybrake.AdminToken{
		Name: name, Role: role, TokenHash: HashSecret(token), Prefix: tokenPrefix(token), Source: "store",
		CreatedBy: adminIdentity(r.Context()).Name, CreatedAt: s.Now().UTC().Truncate(time.Microsecond),
	}
	if err := as.CreateAdminToken(r.Context(), t, s.newAdminEvent(r, adminName(r), "token.create", name, "role "+role, "")); err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	s.logAdminAction(r, "token.create", name)
	writeJSON(w, http.StatusCreated, adminTokenView{AdminToken: t, Object: "admin_token", Token: token})
}

func (s *Server) handleRevokeAdminToken(w http.ResponseWriter, r *http.Request, name string) {
	as, err := s.adminStore()
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	if err := validTokenName(name); err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	t, err := as.RevokeAdminToken(r.Context(), name, s.Now().UTC().Truncate(time.Microsecond), s.newAdminEvent(r, adminName(r), "token.revoke", name, "", ""))
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	s.logAdminAction(r, "token.revoke", name)
	writeJSON(w, http.StatusOK, adminTokenView{AdminToken: t, Object: "admin_token"})
}

func (s *Server) handleAdminEvents(w http.ResponseWriter, r *http.Request) {
	as, err := s.adminStore()
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	limit, err := parseLimit(r)
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	var after int64
	if v := r.URL.Query().Get("starting_after"); v != "" {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil || after <= 0 {
			s.writeAdminError(w, r, keybrake.ErrorParam("starting_after", "starting_after must be an event id (a positive integer)."))
			return
		}
	}
	es, more, err := as.FindAdminEvents(r.Context(), keybrake.AdminEventFilter{Limit: limit, StartingAfter: after})
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	if es == nil {
		es = []*keybrake.AdminEvent{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": es, "has_more": more})
}

// keyDetail summarises the fields an admin sent, for the audit log: names
// and values (a key's fields hold no secret).
func keyDetail(fields map[string]json.RawMessage) string {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(n + "=" + string(fields[n]))
	}
	return b.String()
}
