package http

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/keybrake/keybrake"
)

// keyScanPage is how many keys listKeys reads from the store at a time
// while filtering.
const keyScanPage = 100

// keyListFilter is what GET /vault/keys may filter on, as Stripe's list
// endpoints do: status, label, vendor and metadata[k]=v, all of which must
// match.
type keyListFilter struct {
	status, label, vendor string
	metadata              map[string]string
}

func parseKeyListFilter(q url.Values) (keyListFilter, error) {
	f := keyListFilter{status: q.Get("status"), label: q.Get("label"), vendor: q.Get("vendor"), metadata: map[string]string{}}
	for name, vs := range q {
		switch {
		case name == "limit" || name == "starting_after" || name == "status" || name == "label" || name == "vendor":
			if len(vs) > 1 {
				return f, keybrake.ErrorParam(name, "%s is given %d times; give it once.", name, len(vs))
			}
		case strings.HasPrefix(name, "metadata[") && strings.HasSuffix(name, "]") && len(name) > len("metadata[]"):
			if len(vs) > 1 {
				return f, keybrake.ErrorParam(name, "%s is given %d times; give it once.", name, len(vs))
			}
			f.metadata[name[len("metadata["):len(name)-1]] = vs[0]
		default:
			return f, keybrake.ErrorParam(name, "Unknown parameter %q. GET /vault/keys takes limit, starting_after, status, label, vendor and metadata[KEY]=VALUE.", name)
		}
	}
	switch f.status {
	case "", keybrake.StatusActive, keybrake.StatusSuspended, keybrake.StatusExpired, keybrake.StatusRevoked:
	default:
		return f, keybrake.ErrorParam("status", "status must be active, suspended, expired or revoked.")
	}
	return f, nil
}

func (f keyListFilter) match(k *keybrake.Key, s *Server) bool {
	if f.status != "" && k.Status(s.Now()) != f.status {
		return false
	}
	if f.label != "" && k.Label != f.label {
		return false
	}
	if f.vendor != "" && k.Vendor != f.vendor {
		return false
	}
	for mk, mv := range f.metadata {
		if v, ok := k.Metadata[mk]; !ok || v != mv {
			return false
		}
	}
	return true
}

// listKeys serves GET /vault/keys: keys oldest first, filtered, limit per
// page, has_more, and starting_after the last ID of the previous page. It
// reads the store in pages and filters them, so a filter matching few keys
// costs a scan of the keys (admin lists are small and rare).
func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) {
	limit, err := parseLimit(r)
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	q := r.URL.Query()
	after := q.Get("starting_after")
	if after != "" && !validID(after) {
		s.writeAdminError(w, r, keybrake.ErrorParam("starting_after", "starting_after %q is not a key id.", after))
		return
	}
	f, err := parseKeyListFilter(q)
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	data := []keyView{}
	more := false
	for {
		keys, storeMore, err := s.Store.FindKeys(r.Context(), keybrake.KeyFilter{Limit: keyScanPage, StartingAfter: after})
		if err != nil {
			s.writeAdminError(w, r, err)
			return
		}
		for _, k := range keys {
			if !f.match(k, s) {
				continue
			}
			if len(data) == limit {
				more = true
				break
			}
			data = append(data, keyView{Key: present(k), Object: "vault_key", Status: k.Status(s.Now())})
		}
		if more || !storeMore || len(keys) == 0 {
			break
		}
		after = keys[len(keys)-1].ID
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data, "has_more": more})
}
