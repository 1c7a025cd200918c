package http

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

// Limits on admin input, so a hostile or mistaken request is refused with a
// clear message instead of stored.
const (
	maxLabelLen     = 200
	maxListEntries  = 100
	maxEntryLen     = 255
	maxMetadataKeys = 50
	maxAdminBody    = 64 << 10
)

// serveAdmin routes the admin API. raw is the escaped path.
func (s *Server) serveAdmin(w http.ResponseWriter, r *http.Request, raw string) {
	if raw == selfChildrenPath { // authenticated by the vault key, not the admin token (delegate.go)
		s.serveSelfMint(w, r)
		return
	}
	if id, ok := approvalLinkPath(raw); ok { // authenticated by the link's MAC (approval_link.go)
		s.serveApprovalLink(w, r, id)
		return
	}
	r, ok := s.adminGate(w, r, r.Method != http.MethodGet && r.Method != http.MethodHead)
	if !ok {
		return
	}
	if !strings.HasPrefix(raw, "/vault/keys") || (len(raw) > len("/vault/keys") && raw[len("/vault/keys")] != '/') {
		s.serveAdminMore(w, r, raw)
		return
	}
	parts := strings.Split(strings.TrimPrefix(raw, "/vault/keys"), "/")
	// parts[0] is "" (the slash); "/vault/keys" gives [""].
	switch {
	case len(parts) == 1 && r.Method == http.MethodPost:
		s.handleCreateKey(w, r)
	case len(parts) == 1 && r.Method == http.MethodGet:
		s.handleListKeys(w, r)
	case len(parts) == 2 && validID(parts[1]) && r.Method == http.MethodGet:
		s.handleGetKey(w, r, parts[1])
	case len(parts) == 2 && validID(parts[1]) && r.Method == http.MethodPatch:
		s.handleUpdateKey(w, r, parts[1])
	case len(parts) == 3 && validID(parts[1]) && parts[2] == "revoke" && r.Method == http.MethodPost:
		s.handleRevokeKey(w, r, parts[1])
	case len(parts) == 3 && validID(parts[1]) && parts[2] == "children" && r.Method == http.MethodPost:
		s.handleAdminMint(w, r, parts[1])
	case len(parts) == 3 && validID(parts[1]) && parts[2] == "events" && r.Method == http.MethodGet:
		s.handleListEvents(w, r, parts[1])
	case len(parts) == 3 && validID(parts[1]) && r.Method == http.MethodPost && s.serveKeyLifecycle(w, r, parts[1], parts[2]):
	default:
		s.writeAdminError(w, r, keybrake.Errorf(keybrake.ENOTFOUND, "No admin route for %s %s.", r.Method, raw))
	}
}

var idPattern = regexp.MustCompile(`^vk_[0-9A-Za-z]{1,64}$`)

func validID(s string) bool { return idPattern.MatchString(s) }

// present returns a copy of k with empty lists and metadata as [] and {}
// rather than null, so clients need no null checks.
func present(k *keybrake.Key) *keybrake.Key {
	c := *k
	for _, l := range []*[]string{&c.AllowedEndpoints, &c.AllowedCustomers, &c.AllowedAccounts, &c.AllowedCurrencies} {
		if *l == nil {
			*l = []string{}
		}
	}
	if c.Metadata == nil {
		c.Metadata = map[string]string{}
	}
	return &c
}

// keyView is a key as the admin API shows it.
type keyView struct {
	*keybrake.Key
	Object   string   `json:"object"`
	VaultKey string   `json:"vault_key,omitempty"` // only in the response to creation or rotation
	Status   string   `json:"status,omitempty"`
	Budget   *budget  `json:"budget,omitempty"`
	Notices  []string `json:"notices,omitempty"` // defaults creation chose, for the operator to see
}

func (s *Server) handleCreateKey(w http.ResponseWriter, r *http.Request) {
	fields, err := decodeObject(r)
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	now := s.Now().UTC().Truncate(time.Microsecond)
	k := &keybrake.Key{Vendor: keybrake.VendorStripe, Timezone: "UTC", CreatedAt: now, UpdatedAt: now}
	var upd keybrake.KeyUpdate
	notices := createDefaults(fields, &upd)
	if err := applyFields(fields, k, &upd, true); err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	if k.ExpiresAt != nil && !k.ExpiresAt.After(now) {
		s.writeAdminError(w, r, keybrake.ErrorParam("expires_at", "expires_at %s is not in the future.", k.ExpiresAt.Format(time.RFC3339)))
		return
	}
	secret := randomID(keybrake.VaultKeyPrefix, 32)
	k.ID = randomID("vk_", 24)
	k.SecretHash = HashSecret(secret)
	k.SecretPrefix = secret[:len(keybrake.VaultKeyPrefix)+4]
	if _, err := s.changeKeyAudited(r, k.ID, keyDetail(fields), keybrake.KeyChange{Action: keybrake.ActionCreate, Create: k, Now: now}); err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	b, err := s.budget(r.Context(), k, now)
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, keyView{Key: present(k), Object: "vault_key", VaultKey: secret, Budget: b, Notices: notices})
}

func (s *Server) handleListKeys(w http.ResponseWriter, r *http.Request) {
	s.listKeys(w, r) // keylist.go: filters and cursor pagination
}

func (s *Server) handleGetKey(w http.ResponseWriter, r *http.Request, id string) {
	k, err := s.Store.FindKeyByID(r.Context(), id)
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	b, err := s.budget(r.Context(), k, s.Now())
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, keyView{Key: present(k), Object: "vault_key", Budget: b, Status: k.Status(s.Now())})
}

func (s *Server) handleUpdateKey(w http.ResponseWriter, r *http.Request, id string) {
	fields, err := decodeObject(r)
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	var upd keybrake.KeyUpdate
	if err := applyFields(fields, nil, &upd, false); err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	if err := s.checkCountUpdate(r.Context(), id, upd); err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	if err := s.checkChildUpdate(r, id, upd); err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	now := s.Now().UTC().Truncate(time.Microsecond)
	k, err := s.changeKeyAudited(r, id, keyDetail(fields), keybrake.KeyChange{Action: keybrake.ActionUpdate, Update: &upd, Now: now})
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	s.evictKey(k.ID)
	b, err := s.budget(r.Context(), k, now)
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, keyView{Key: present(k), Object: "vault_key", Budget: b})
}

func (s *Server) handleRevokeKey(w http.ResponseWriter, r *http.Request, id string) {
	k, err := s.changeKeyAudited(r, id, "", keybrake.KeyChange{Action: keybrake.ActionRevoke, Now: s.Now().UTC().Truncate(time.Microsecond)})
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	s.evictKey(k.ID)
	s.returnEscrows(r.Context()) // what a revoked child did not spend goes back now (delegate.go)
	writeJSON(w, http.StatusOK, keyView{Key: present(k), Object: "vault_key"})
}

func (s *Server) handleListEvents(w http.ResponseWriter, r *http.Request, id string) {
	if _, err := s.Store.FindKeyByID(r.Context(), id); err != nil {
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
	s.audit.Flush()
	events, more, err := s.Store.FindEvents(r.Context(), keybrake.EventFilter{KeyID: id, Limit: limit, StartingAfter: after})
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	if events == nil {
		events = []*keybrake.Event{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": events, "has_more": more})
}

func parseLimit(r *http.Request) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return 10, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100 {
		return 0, keybrake.ErrorParam("limit", "limit must be an integer from 1 to 100.")
	}
	return n, nil
}

// strictNames refuses a JSON value in which one object names a field twice,
// exactly or in another case ("refusal_burst" and "REFUSAL_BURST", or
// "refuſal_burst"): encoding/json matches names without regard to case
// and keeps the last, so {"above_usd":50,"ABOVE_USD":100000} asked for
// approvals from $100,000 while whoever read the request, or the admin
// audit log's copy of it, saw $50. field names the admin API's field in the error.
func strictNames(raw json.RawMessage, field string) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	var walk func(depth int) error
	walk = func(depth int) error {
		if depth > 32 {
			return keybrake.ErrorParam(field, "%s is nested too deeply.", field)
		}
		tok, err := dec.Token()
		if err != nil {
			return nil // the decoder that follows reports bad JSON
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]string{}
			for dec.More() {
				t, err := dec.Token()
				if err != nil {
					return nil
				}
				name, _ := t.(string)
				if first, dup := seen[foldName(name)]; dup {
					return keybrake.ErrorParam(field, "%s names %q and %q, one field twice (names match regardless of case); send it once.", field, first, name)
				}
				seen[foldName(name)] = name
				if err := walk(depth + 1); err != nil {
					return err
				}
			}
			_, _ = dec.Token()
		case json.Delim('['):
			for dec.More() {
				if err := walk(depth + 1); err != nil {
					return err
				}
			}
			_, _ = dec.Token()
		}
		return nil
	}
	return walk(0)
}

// foldName maps every name that strings.EqualFold (and so encoding/json)
// takes for the same to one string: each rune to the smallest of its
// case-folding orbit.
func foldName(s string) string {
	var b strings.Builder
	for _, r := range s {
		min := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < min {
				min = f
			}
		}
		b.WriteRune(min)
	}
	return b.String()
}

// decodeObject reads a JSON object body strictly: bounded size, one object,
// no trailing data, no duplicate fields.
func decodeObject(r *http.Request) (map[string]json.RawMessage, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxAdminBody+1))
	if err != nil {
		return nil, keybrake.Errorf(keybrake.EINVALID, "Could not read the request body: %v", err)
	}
	if len(body) > maxAdminBody {
		return nil, keybrake.Errorf(keybrake.EINVALID, "The request body is larger than %d bytes.", maxAdminBody)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, keybrake.Errorf(keybrake.EINVALID, "The request body is empty; send a JSON object.")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, keybrake.Errorf(keybrake.EINVALID, "The request body must be a JSON object.")
	}
	fields := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, keybrake.Errorf(keybrake.EINVALID, "Invalid JSON: %v", err)
		}
		name := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, keybrake.ErrorParam(name, "Invalid JSON in field %q: %v", name, err)
		}
		if _, dup := fields[name]; dup {
			return nil, keybrake.ErrorParam(name, "Field %q appears more than once.", name)
		}
		fields[name] = raw
	}
	if _, err := dec.Token(); err != nil {
		return nil, keybrake.Errorf(keybrake.EINVALID, "Invalid JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, keybrake.Errorf(keybrake.EINVALID, "Unexpected data after the JSON object.")
	}
	return fields, nil
}

// applyFields validates the admin fields and applies them to k (creation)
// or upd (update). Unknown fields are an error naming the field, as Caddy
// decodes config: a typo must not silently drop a cap.
func applyFields(fields map[string]json.RawMessage, k *keybrake.Key, upd *keybrake.KeyUpdate, create bool) error {
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := applyField(name, fields[name], k, upd, create); err != nil {
			return err
		}
	}
	if create {
		// A new key is the empty key with the fields applied as an update.
		k.Apply(*upd)
		if k.Timezone == "" {
			k.Timezone = "UTC"
		}
		return checkVendorFields(k.Vendor, *upd) // scope.go
	}
	return nil
}

// applyField validates one admin field into upd; the fields that exist
// only at creation (vendor, timezone) go to k.
func applyField(name string, raw json.RawMessage, k *keybrake.Key, upd *keybrake.KeyUpdate, create bool) error {
	if ok, err := applyCountField(name, raw, upd); ok { // counts.go
		return err
	}
	if ok, err := applyScopeField(name, raw, upd); ok { // scope.go
		return err
	}
	isNull := string(raw) == "null"
	caps := map[string]struct {
		set *bool
		cap **keybrake.Micros
	}{
		"per_request_usd_cap": {&upd.SetPerRequest, &upd.PerRequest},
		"daily_usd_cap":       {&upd.SetDaily, &upd.Daily},
		"monthly_usd_cap":     {&upd.SetMonthly, &upd.Monthly},
		"total_usd_cap":       {&upd.SetTotal, &upd.Total},
	}
	lists := map[string]**[]string{
		"allowed_endpoints":  &upd.AllowedEndpoints,
		"allowed_customers":  &upd.AllowedCustomers,
		"allowed_accounts":   &upd.AllowedAccounts,
		"allowed_currencies": &upd.AllowedCurrencies,
	}
	if c, ok := caps[name]; ok {
		var cap *keybrake.Micros
		if !isNull {
			var m keybrake.Micros
			if err := json.Unmarshal(raw, &m); err != nil {
				return keybrake.ErrorParam(name, "%s must be a non-negative dollar amount with at most 6 decimals, like 250 or 0.50: %s", name, keybrake.ErrorMessage(err))
			}
			cap = &m
		}
		*c.set, *c.cap = true, cap
		return nil
	}
	if dst, ok := lists[name]; ok {
		var list []string
		if !isNull {
			if err := json.Unmarshal(raw, &list); err != nil {
				return keybrake.ErrorParam(name, "%s must be a list of strings.", name)
			}
		}
		list, err := validateList(name, list)
		if err != nil {
			return err
		}
		if name == "allowed_endpoints" && len(list) == 0 {
			return keybrake.ErrorParam(name, `allowed_endpoints must not be empty: list the operations (charges.create) or path prefixes (/v1/charges) the key may call, or ["*"] for every operation.`)
		}
		*dst = &list
		return nil
	}
	switch name {
	case "vendor":
		var v string
		if err := json.Unmarshal(raw, &v); err != nil || !keybrake.KnownVendor(v) {
			return keybrake.ErrorParam(name, `vendor must be one of %s.`, strings.Join(keybrake.Vendors(), ", "))
		}
		if !create {
			return keybrake.ErrorParam(name, "vendor cannot be changed.")
		}
		k.Vendor = v
	case "label":
		v, err := decodeString(name, raw, maxLabelLen)
		if err != nil {
			return err
		}
		upd.Label = &v
	case "timezone":
		v, err := decodeString(name, raw, 64)
		if err != nil {
			return err
		}
		if _, err := (&keybrake.Key{Timezone: v}).Location(); err != nil {
			return err
		}
		if !create {
			return keybrake.ErrorParam(name, "timezone cannot be changed: spend already counted in calendar windows of the old zone. Create a new key instead.")
		}
		k.Timezone = v
	case "allow_unpriced":
		var v bool
		if err := json.Unmarshal(raw, &v); err != nil {
			return keybrake.ErrorParam(name, "allow_unpriced must be true or false.")
		}
		upd.AllowUnpriced = &v
	case "allow_secret_reads":
		var v bool
		if err := json.Unmarshal(raw, &v); err != nil || isNull {
			return keybrake.ErrorParam(name, "allow_secret_reads must be true or false.")
		}
		upd.AllowSecretReads = &v
	case "metadata":
		var m map[string]string
		if !isNull {
			if err := json.Unmarshal(raw, &m); err != nil {
				return keybrake.ErrorParam(name, "metadata must be an object of string values.")
			}
		}
		if len(m) > maxMetadataKeys {
			return keybrake.ErrorParam(name, "metadata has %d keys; at most %d are allowed.", len(m), maxMetadataKeys)
		}
		for mk, mv := range m {
			if mk == "" || len(mk) > 40 || len(mv) > 500 {
				return keybrake.ErrorParam(name, "metadata keys must be 1 to 40 characters and values at most 500.")
			}
		}
		upd.Metadata = &m
	case "expires_at":
		var t *time.Time
		if !isNull {
			var v time.Time
			if err := json.Unmarshal(raw, &v); err != nil {
				return keybrake.ErrorParam(name, "expires_at must be an RFC 3339 time such as 2026-11-30T00:00:00Z.")
			}
			v = v.UTC().Truncate(time.Microsecond)
			t = &v
		}
		upd.SetExpiresAt, upd.ExpiresAt = true, t
	case "mint":
		var v bool
		if err := json.Unmarshal(raw, &v); err != nil || isNull {
			return keybrake.ErrorParam(name, "mint must be true or false.")
		}
		upd.Mint = &v
	case "approval":
		p, err := decodeApprovalPolicy(raw) // delegate.go
		if err != nil {
			return err
		}
		upd.Approval = p
	case "guards":
		g, err := decodeGuards(raw) // resume.go
		if err != nil {
			return err
		}
		upd.Guards = g
	default:
		return keybrake.ErrorParam(name, "Unknown field %q. Known fields: vendor, label, daily_usd_cap, monthly_usd_cap, total_usd_cap, per_request_usd_cap, allowed_endpoints, allowed_customers, allowed_accounts, allowed_currencies, timezone, allow_unpriced, allow_secret_reads, metadata, expires_at, guards, mint, approval, daily_message_cap, daily_email_cap, daily_call_cap, monthly_message_cap, monthly_email_cap, monthly_call_cap, twilio_scope, resend_scope.", name)
	}
	return nil
}

func decodeString(name string, raw json.RawMessage, max int) (string, error) {
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", keybrake.ErrorParam(name, "%s must be a string.", name)
	}
	if len(v) > max {
		return "", keybrake.ErrorParam(name, "%s is longer than %d characters.", name, max)
	}
	return v, nil
}

var opNamePattern = regexp.MustCompile(`^[a-z_]+(\.[a-z_]+)+$`)

// validateList checks each entry of an allowlist, naming the bad one.
func validateList(name string, list []string) ([]string, error) {
	if len(list) > maxListEntries {
		return nil, keybrake.ErrorParam(name, "%s has %d entries; at most %d are allowed.", name, len(list), maxListEntries)
	}
	out := make([]string, 0, len(list))
	for i, v := range list {
		if v == "" || len(v) > maxEntryLen {
			return nil, keybrake.ErrorParam(name, "%s[%d] must be 1 to %d characters.", name, i, maxEntryLen)
		}
		switch name {
		case "allowed_endpoints":
			if v == keybrake.AllEndpoints {
				if len(list) != 1 {
					return nil, keybrake.ErrorParam(name, `%s[%d] "*" allows every operation and must be the only entry.`, name, i)
				}
			} else if strings.HasPrefix(v, "/") {
				if _, err := stripe.ParseOperation("GET", strings.TrimSuffix(v, "/")); err != nil || !strings.HasPrefix(v, "/v1/") {
					return nil, keybrake.ErrorParam(name, "%s[%d] %q is not a clean Stripe path prefix like /v1/charges.", name, i, v)
				}
				v = strings.TrimSuffix(v, "/")
			} else if !opNamePattern.MatchString(v) {
				return nil, keybrake.ErrorParam(name, "%s[%d] %q is neither an operation name like charges.create nor a path prefix like /v1/charges.", name, i, v)
			}
		case "allowed_currencies":
			v = strings.ToLower(v)
			if _, ok := stripe.Exponent(v); !ok {
				return nil, keybrake.ErrorParam(name, "%s[%d] %q is not a currency keybrake knows.", name, i, v)
			}
		}
		out = append(out, v)
	}
	return out, nil
}

// budget is a key's spend and what is left, per window.
type budget struct {
	PerRequest *windowBudget           `json:"per_request,omitempty"`
	Daily      *windowBudget           `json:"daily"`
	Monthly    *windowBudget           `json:"monthly"`
	Total      *windowBudget           `json:"total"`
	Uncertain  keybrake.Micros         `json:"uncertain_usd"`
	Held       keybrake.Micros         `json:"held_usd"` // part of the spend held on objects that can still move money, not yet spent
	Timezone   string                  `json:"timezone"`
	Counts     map[string]*countBudget `json:"counts,omitempty"` // the daily count caps of a Twilio or Resend key (counts.go)
}

type windowBudget struct {
	Cap       *keybrake.Micros `json:"cap_usd"`
	Spent     keybrake.Micros  `json:"spent_usd"`
	Remaining *keybrake.Micros `json:"remaining_usd"`
	ResetsAt  *time.Time       `json:"resets_at,omitempty"`
}

func (s *Server) budget(ctx context.Context, k *keybrake.Key, now time.Time) (*budget, error) {
	loc, err := k.Location()
	if err != nil {
		return nil, err
	}
	day, month := keybrake.Buckets(now, loc)
	sp, err := s.Store.Spend(ctx, k.ID, day, month)
	if err != nil {
		return nil, fmt.Errorf("spend %s: %w", k.ID, err)
	}
	dr, mr := keybrake.DayReset(now, loc), keybrake.MonthReset(now, loc)
	b := &budget{
		Daily:     window(k.Daily, sp.Day, &dr),
		Monthly:   window(k.Monthly, sp.Month, &mr),
		Total:     window(k.Total, sp.Total, nil),
		Uncertain: sp.Uncertain,
		Held:      sp.Held,
		Timezone:  loc.String(),
	}
	if k.PerRequest != nil {
		b.PerRequest = &windowBudget{Cap: k.PerRequest, Remaining: k.PerRequest}
	}
	if b.Counts, err = s.countBudgets(ctx, k, now, loc); err != nil {
		return nil, err
	}
	return b, nil
}

func window(cap *keybrake.Micros, spent keybrake.Micros, reset *time.Time) *windowBudget {
	w := &windowBudget{Cap: cap, Spent: spent, ResetsAt: reset}
	if cap != nil {
		r := *cap - spent
		if r < 0 {
			r = 0
		}
		w.Remaining = &r
	}
	return w
}
