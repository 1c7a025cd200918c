package http

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/keybrake/keybrake"
)

// maxGracePeriod bounds how long a rotated-out secret keeps working.
const maxGracePeriod = 30 * 24 * time.Hour

// serveKeyLifecycle serves POST /vault/keys/{id}/{action} for rotate,
// suspend and resume; it returns false for any other action.
func (s *Server) serveKeyLifecycle(w http.ResponseWriter, r *http.Request, id, action string) bool {
	switch action {
	case "rotate", "suspend", "resume":
	default:
		return false
	}
	if _, ok := s.Store.(keybrake.KeyLifecycleService); !ok {
		s.writeAdminError(w, r, keybrake.Errorf(keybrake.EINVALID, "This store cannot %s keys.", action))
		return true
	}
	now := s.Now().UTC().Truncate(time.Microsecond)
	var (
		k      *keybrake.Key
		err    error
		secret string
		detail string
	)
	switch action {
	case "rotate":
		var grace time.Duration
		if grace, err = parseGrace(r); err != nil {
			s.writeAdminError(w, r, err)
			return true
		}
		secret = randomID(keybrake.VaultKeyPrefix, 32)
		args := keybrake.RotateArgs{SecretHash: HashSecret(secret), SecretPrefix: secret[:len(keybrake.VaultKeyPrefix)+4], Now: now}
		if grace > 0 {
			until := now.Add(grace)
			args.GraceUntil = &until
		}
		detail = "grace_period " + grace.String()
		k, err = s.changeKeyAudited(r, id, detail, keybrake.KeyChange{Action: action, Rotate: &args, Now: now})
	case "suspend":
		k, err = s.changeKeyAudited(r, id, "", keybrake.KeyChange{Action: action, Reason: suspendedBy(r), Now: now})
	case "resume":
		k, err = s.changeKeyAudited(r, id, "", keybrake.KeyChange{Action: action, Now: now})
	}
	if err != nil {
		s.writeAdminError(w, r, err)
		return true
	}
	s.evictKey(k.ID)
	writeJSON(w, http.StatusOK, keyView{Key: present(k), Object: "vault_key", VaultKey: secret, Status: k.Status(now)})
	return true
}

// parseGrace reads {"grace_period": "24h"} (a Go duration, or seconds as
// a number); an empty body means no grace: the old secret stops at once.
func parseGrace(r *http.Request) (time.Duration, error) {
	if r.ContentLength == 0 {
		return 0, nil
	}
	fields, err := decodeObject(r)
	if err != nil {
		return 0, err
	}
	var grace time.Duration
	for name, raw := range fields {
		if name != "grace_period" {
			return 0, keybrake.ErrorParam(name, "Unknown field %q. Known fields: grace_period.", name)
		}
		var str string
		var secs int64
		if json.Unmarshal(raw, &str) == nil {
			if grace, err = time.ParseDuration(str); err != nil {
				return 0, keybrake.ErrorParam(name, `grace_period must be a duration like "24h" or "90m", or a number of seconds.`)
			}
		} else if json.Unmarshal(raw, &secs) == nil {
			grace = time.Duration(secs) * time.Second
		} else {
			return 0, keybrake.ErrorParam(name, `grace_period must be a duration like "24h" or "90m", or a number of seconds.`)
		}
	}
	if grace < 0 || grace > maxGracePeriod {
		return 0, keybrake.ErrorParam("grace_period", "grace_period must be from 0 to %s.", maxGracePeriod)
	}
	return grace, nil
}

// suspendedBy is the reason an operator's suspension records: who did it.
func suspendedBy(r *http.Request) string {
	if id := adminIdentity(r.Context()); id != nil {
		return "suspended by admin " + id.Name
	}
	return "suspended by an admin"
}
