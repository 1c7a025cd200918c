package http

import (
	"bytes"
	"encoding/json"
	"io"
	"sort"
	"strings"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/resend"
	"github.com/keybrake/keybrake/twilio"
)

// scopeFields are the fields of each vendor's scope object, by admin
// field.
var scopeFields = map[string][]string{
	"twilio_scope": {"allowed_countries", "allowed_number_prefixes", "allowed_from", "allowed_messaging_services"},
	"resend_scope": {"allowed_senders", "allowed_recipient_domains", "max_recipients"},
}

// scopeVendor names the vendor whose keys each scope field applies to.
var scopeVendor = map[string]string{"twilio_scope": keybrake.VendorTwilio, "resend_scope": keybrake.VendorResend}

// applyScopeField validates twilio_scope or resend_scope (an object of
// the vendor's allowlists, or null to remove the scope) strictly into upd:
// unknown or repeated fields, wrong types and invalid entries are EINVALID
// naming the field. It reports whether name is one.
func applyScopeField(name string, raw json.RawMessage, upd *keybrake.KeyUpdate) (bool, error) {
	if _, ok := scopeFields[name]; !ok {
		return false, nil
	}
	fields := map[string]json.RawMessage{}
	if string(raw) != "null" {
		var err error
		if fields, err = scopeObject(name, raw); err != nil {
			return true, err
		}
	}
	lists := map[string][]string{}
	maxRecipients := 0
	for f, v := range fields {
		if f == "max_recipients" {
			n, err := decodeCount(v)
			if err != nil {
				return true, keybrake.ErrorParam(name+"."+f, "%s.%s must be a whole number from 0 to %d.", name, f, resend.MaxRecipients)
			}
			maxRecipients = n
			continue
		}
		var l []string
		if string(v) != "null" {
			if err := json.Unmarshal(v, &l); err != nil {
				return true, keybrake.ErrorParam(name+"."+f, "%s.%s must be a list of strings.", name, f)
			}
		}
		lists[f] = l
	}
	var err error
	switch name {
	case "twilio_scope":
		var sc keybrake.TwilioScope
		sc, err = twilio.NormalizePolicy(keybrake.TwilioScope{Countries: lists["allowed_countries"], NumberPrefixes: lists["allowed_number_prefixes"],
			From: lists["allowed_from"], MessagingServices: lists["allowed_messaging_services"]})
		upd.TwilioScope = &sc
	case "resend_scope":
		var sc keybrake.ResendScope
		sc, err = resend.NormalizePolicy(keybrake.ResendScope{Senders: lists["allowed_senders"], RecipientDomains: lists["allowed_recipient_domains"], MaxRecipients: maxRecipients})
		upd.ResendScope = &sc
	}
	return true, err
}

// scopeObject reads a scope object: one JSON object with known, distinct
// fields.
func scopeObject(name string, raw json.RawMessage) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, keybrake.ErrorParam(name, "%s must be an object with the fields %s, or null.", name, strings.Join(scopeFields[name], ", "))
	}
	fields := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, keybrake.ErrorParam(name, "Invalid JSON in %s.", name)
		}
		f := tok.(string)
		known := false
		for _, k := range scopeFields[name] {
			known = known || k == f
		}
		if !known {
			return nil, keybrake.ErrorParam(name+"."+f, "Unknown field %s.%s. Known fields: %s.", name, f, strings.Join(scopeFields[name], ", "))
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, keybrake.ErrorParam(name+"."+f, "Invalid JSON in %s.%s.", name, f)
		}
		if _, dup := fields[f]; dup {
			return nil, keybrake.ErrorParam(name+"."+f, "Field %s.%s appears more than once.", name, f)
		}
		fields[f] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, keybrake.ErrorParam(name, "Invalid JSON in %s.", name)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, keybrake.ErrorParam(name, "Unexpected data after %s.", name)
	}
	return fields, nil
}

// decodeCount reads a small whole number: digits only, no sign, fraction
// or exponent.
func decodeCount(raw json.RawMessage) (int, error) {
	s := string(raw)
	if s == "null" {
		return 0, nil
	}
	if s == "" || len(s) > 6 || strings.Trim(s, "0123456789") != "" || (len(s) > 1 && s[0] == '0') {
		return 0, keybrake.Errorf(keybrake.EINVALID, "not a whole number")
	}
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n, nil
}

// checkVendorFields refuses the fields of another vendor on a key: count
// caps of a kind its vendor never counts (counts.go) and another vendor's
// scope, which would silently restrict nothing.
func checkVendorFields(vendor string, upd keybrake.KeyUpdate) error {
	if err := checkCountVendor(vendor, upd); err != nil {
		return err
	}
	set := map[string]bool{"twilio_scope": upd.TwilioScope != nil, "resend_scope": upd.ResendScope != nil}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if set[n] && scopeVendor[n] != vendor {
			return keybrake.ErrorParam(n, "%s applies only to %s keys; this key's vendor is %s.", n, scopeVendor[n], vendor)
		}
	}
	return nil
}
