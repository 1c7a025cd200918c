package resend

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/mail"
	"strings"

	"github.com/keybrake/keybrake"
)

// MaxRecipients is the most recipients (to, cc and bcc together) keybrake
// lets one email have; Resend accepts at most 50 in to.
const MaxRecipients = 50

// MaxBatch is the most emails one emails.batch request may carry.
const MaxBatch = 100

// MaxBody bounds a request body: Resend accepts 40 MB with attachments.
const MaxBody = 40 << 20

// emailFields are the fields of an email keybrake has reviewed; none
// sends more than the email itself. Any other field is refused, so that
// a field Resend adds later is looked at before it is passed through.
var emailFields = map[string]bool{
	"from": true, "to": true, "subject": true, "bcc": true, "cc": true, "reply_to": true,
	"html": true, "text": true, "headers": true, "attachments": true, "tags": true,
	"scheduled_at": true, "template": true, "topic_id": true,
}

// recipientHeaders name recipients: set through the headers field, they
// would be outside what keybrake prices and counts (to, cc and bcc), so
// they are refused on every key. Sender headers are refused under a scope
// only (Policy).
var recipientHeaders = map[string]bool{"to": true, "cc": true, "bcc": true, "resent-to": true, "resent-cc": true, "resent-bcc": true}

// Email is what keybrake reads of one email to send.
type Email struct {
	From        string   // the sender's address, without display name
	To, Cc, Bcc []string // recipients' addresses, without display names
	Subject     string
	ScheduledAt string // as sent; "" to send now
	Attachments int
	Headers     []string // the names of the custom headers, as sent
}

// Recipients returns how many addresses the email goes to: to, cc and bcc
// together, each counted as often as it is listed.
func (e *Email) Recipients() int { return len(e.To) + len(e.Cc) + len(e.Bcc) }

// Domains returns the domains of every recipient, lower-cased, each once.
func (e *Email) Domains() []string {
	var out []string
	seen := map[string]bool{}
	for _, list := range [][]string{e.To, e.Cc, e.Bcc} {
		for _, a := range list {
			d := domainOf(a)
			if !seen[d] {
				seen[d] = true
				out = append(out, d)
			}
		}
	}
	return out
}

// ParseEmail reads the body of emails.send strictly: one JSON object
// with no field given twice and no field keybrake has not reviewed, from,
// to and subject present, every address parseable (RFC 5322, with or
// without a display name), at most MaxRecipients recipients, and nothing
// after the object. Returns EINVALID naming the field.
func ParseEmail(body []byte) (*Email, error) {
	fields, err := object(body, "")
	if err != nil {
		return nil, err
	}
	return email(fields, "")
}

// ParseBatch reads the body of emails.batch: a JSON array of 1 to
// MaxBatch emails, each as ParseEmail reads it, without scheduled_at or
// attachments, which Resend refuses in a batch. Returns EINVALID naming
// the field as "[i].field".
func ParseBatch(body []byte) ([]*Email, error) {
	var items []json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&items); err != nil {
		return nil, keybrake.Errorf(keybrake.EINVALID, "The body must be a JSON array of emails.")
	}
	if dec.More() || trailing(dec) {
		return nil, keybrake.Errorf(keybrake.EINVALID, "The body has data after the JSON array.")
	}
	if len(items) == 0 || len(items) > MaxBatch {
		return nil, keybrake.Errorf(keybrake.EINVALID, "A batch must have 1 to %d emails (it has %d).", MaxBatch, len(items))
	}
	out := make([]*Email, len(items))
	for i, raw := range items {
		prefix := "[" + itoa(i) + "]."
		fields, err := object(raw, prefix)
		if err != nil {
			return nil, err
		}
		for _, f := range []string{"scheduled_at", "attachments"} {
			if _, ok := fields[f]; ok {
				return nil, keybrake.ErrorParam(prefix+f, "%s is not supported in a batch.", f)
			}
		}
		if out[i], err = email(fields, prefix); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ParseUpdate reads the body of emails.update for the email id in the
// path: an object with scheduled_at and, as resend-go sends it, the same
// id. Returns EINVALID for any other field or another id.
func ParseUpdate(body []byte, id string) (scheduledAt string, err error) {
	fields, err := object(body, "")
	if err != nil {
		return "", err
	}
	if raw, ok := fields["id"]; ok {
		var got string
		if json.Unmarshal(raw, &got) != nil || got != id {
			return "", keybrake.ErrorParam("id", "The id in the body is not the id in the path.")
		}
	}
	for k := range fields {
		if k != "scheduled_at" && k != "id" {
			return "", keybrake.ErrorParam(k, "Only scheduled_at can be updated (got %s).", printable(k))
		}
	}
	if err := json.Unmarshal(fields["scheduled_at"], &scheduledAt); err != nil || scheduledAt == "" {
		return "", keybrake.ErrorParam("scheduled_at", "Missing `scheduled_at` field.")
	}
	return scheduledAt, nil
}

func email(fields map[string]json.RawMessage, prefix string) (*Email, error) {
	for k := range fields {
		if !emailFields[k] {
			return nil, keybrake.ErrorParam(prefix+k, "keybrake does not pass the field %s%s through; it has not been reviewed.", prefix, printable(k))
		}
	}
	e := &Email{}
	var err error
	if e.From, err = address(fields["from"], prefix+"from"); err != nil {
		return nil, err
	}
	if e.To, err = addresses(fields["to"], prefix+"to", true); err != nil {
		return nil, err
	}
	if e.Cc, err = addresses(fields["cc"], prefix+"cc", false); err != nil {
		return nil, err
	}
	if e.Bcc, err = addresses(fields["bcc"], prefix+"bcc", false); err != nil {
		return nil, err
	}
	if raw, ok := fields["reply_to"]; ok {
		if _, err := addresses(raw, prefix+"reply_to", false); err != nil {
			return nil, err
		}
	}
	_, template := fields["template"]
	if raw, ok := fields["template"]; ok && string(raw) != "null" {
		if err := checkTemplate(raw, prefix+"template"); err != nil {
			return nil, err
		}
	}
	if err := optionalString(fields["subject"], &e.Subject); err != nil || (e.Subject == "" && !template) {
		return nil, keybrake.ErrorParam(prefix+"subject", "Missing `subject` field.")
	}
	if strings.ContainsAny(e.Subject, "\r\n\x00") {
		return nil, keybrake.ErrorParam(prefix+"subject", "keybrake does not pass a subject with a line break: written into the message's header, it could add a header such as Bcc that names recipients keybrake neither prices nor counts.")
	}
	if err := optionalString(fields["scheduled_at"], &e.ScheduledAt); err != nil {
		return nil, keybrake.ErrorParam(prefix+"scheduled_at", "scheduled_at must be a string.")
	}
	if raw, ok := fields["headers"]; ok && string(raw) != "null" {
		h, err := object(raw, prefix+"headers.")
		if err != nil {
			return nil, err
		}
		for name, raw := range h {
			if recipientHeaders[strings.ToLower(name)] {
				return nil, keybrake.ErrorParam(prefix+"headers."+name, "keybrake does not pass the %s header in headers: it names recipients that keybrake neither prices nor counts; use to, cc and bcc.", printable(name))
			}
			// A line break in a name or value ends the header and starts
			// another, which may be a Bcc: the same recipients as above,
			// smuggled. RFC 5322 field names are printable ASCII but ':'.
			var value string
			if !fieldName(name) || json.Unmarshal(raw, &value) != nil || strings.ContainsAny(value, "\r\n\x00") {
				return nil, keybrake.ErrorParam(prefix+"headers."+printable(name), "keybrake passes a custom header only with a name of printable ASCII other than ':' and a string value without line breaks: a line break could add a header such as Bcc that names recipients keybrake neither prices nor counts.")
			}
			e.Headers = append(e.Headers, name)
		}
	}
	if raw, ok := fields["attachments"]; ok {
		var list []json.RawMessage
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, keybrake.ErrorParam(prefix+"attachments", "attachments must be an array.")
		}
		e.Attachments = len(list)
	}
	if n := e.Recipients(); n > MaxRecipients {
		return nil, keybrake.ErrorParam(prefix+"to", "Too many recipients: %d in to, cc and bcc (at most %d).", n, MaxRecipients)
	}
	return e, nil
}

// object decodes one JSON object into its fields, refusing a field given
// twice (Resend would read one of them, keybrake perhaps the other) and
// anything after the object.
func object(body []byte, prefix string) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, keybrake.Errorf(keybrake.EINVALID, "The body%s must be a JSON object.", at(prefix))
	}
	fields := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		key, ok := tok.(string)
		if err != nil || !ok {
			return nil, keybrake.Errorf(keybrake.EINVALID, "The body%s is not valid JSON.", at(prefix))
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, keybrake.ErrorParam(prefix+key, "The value of %s%s is not valid JSON.", prefix, printable(key))
		}
		if _, dup := fields[key]; dup {
			return nil, keybrake.ErrorParam(prefix+key, "The field %s%s is given more than once.", prefix, printable(key))
		}
		fields[key] = v
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') || trailing(dec) {
		return nil, keybrake.Errorf(keybrake.EINVALID, "The body%s is not one valid JSON object.", at(prefix))
	}
	return fields, nil
}

func at(prefix string) string {
	if prefix == "" {
		return ""
	}
	return " " + strings.TrimSuffix(prefix, ".")
}

// trailing reports whether anything but white space follows the value
// dec has read.
func trailing(dec *json.Decoder) bool {
	_, err := dec.Token()
	return err != io.EOF
}

func optionalString(raw json.RawMessage, dst *string) error {
	if raw == nil || string(raw) == "null" {
		return nil
	}
	return json.Unmarshal(raw, dst)
}

// address reads a required single address.
func address(raw json.RawMessage, param string) (string, error) {
	var s string
	if raw == nil || json.Unmarshal(raw, &s) != nil || s == "" {
		return "", keybrake.ErrorParam(param, "Missing `%s` field.", param)
	}
	a, err := parseAddress(s)
	if err != nil {
		return "", keybrake.ErrorParam(param, "Invalid `%s` field. The email address needs to follow the `email@example.com` or `Name <email@example.com>` format.", param)
	}
	return a, nil
}

// parseAddress reads one address in the two plain forms Resend documents,
// email@example.com and Name <email@example.com>, and returns the
// address. RFC 5322 allows much more (comments, groups, quoted local
// parts with @ in them, display names with commas, @ and <…>), which
// another parser, Resend's, may read as another address or as several:
// "\"x@evil.example, y\" <a@example.com>" is one address to net/mail and
// perhaps two to a split on commas. Those are refused.
func parseAddress(s string) (string, error) {
	a, err := mail.ParseAddress(s)
	if err != nil {
		return "", err
	}
	if strings.Count(a.Address, "@") != 1 || strings.ContainsAny(a.Address, "\"(),;:<>\\ ") {
		return "", errors.New("not a plain address")
	}
	if s == a.Address {
		return a.Address, nil
	}
	name, ok := strings.CutSuffix(s, "<"+a.Address+">")
	if !ok || strings.ContainsAny(name, "<>@(),;:\\") {
		return "", errors.New("not a plain display name and address")
	}
	return a.Address, nil
}

// addresses reads a string or an array of strings of addresses.
func addresses(raw json.RawMessage, param string, required bool) ([]string, error) {
	if raw == nil || string(raw) == "null" {
		if required {
			return nil, keybrake.ErrorParam(param, "Missing `%s` field.", param)
		}
		return nil, nil
	}
	var list []string
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		list = []string{one}
	} else if err := json.Unmarshal(raw, &list); err != nil {
		return nil, keybrake.ErrorParam(param, "`%s` must be a string or an array of strings.", param)
	}
	if required && len(list) == 0 {
		return nil, keybrake.ErrorParam(param, "Missing `%s` field.", param)
	}
	out := make([]string, len(list))
	for i, s := range list {
		a, err := parseAddress(s)
		if err != nil {
			return nil, keybrake.ErrorParam(param, "Invalid `%s` field. The email address needs to follow the `email@example.com` or `Name <email@example.com>` format.", param)
		}
		out[i] = a
	}
	return out, nil
}

// fieldName reports whether s is an RFC 5322 header field name: one or
// more printable ASCII characters other than ':'.
func fieldName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 33 || s[i] > 126 || s[i] == ':' {
			return false
		}
	}
	return true
}

// domainOf returns the lower-cased domain of an address.
func domainOf(addr string) string {
	return strings.ToLower(addr[strings.LastIndexByte(addr, '@')+1:])
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// maxTemplateVariables is Resend's limit on a template's variables.
const maxTemplateVariables = 50

// checkTemplate reads the template field strictly: an object of id (a
// string) and variables (an object of strings and numbers, Resend's two
// variable types). A template's subject and reply-to take variables, so a
// variable is refused with a line break for the reason a subject is: written
// into the message's header, it could add a Bcc that keybrake neither prices
// nor counts.
func checkTemplate(raw json.RawMessage, param string) error {
	fields, err := object(raw, param+".")
	if err != nil {
		return err
	}
	for k := range fields {
		if k != "id" && k != "variables" {
			return keybrake.ErrorParam(param+"."+printable(k), "keybrake does not pass the field %s.%s through; a template takes id and variables.", param, printable(k))
		}
	}
	var id string
	if json.Unmarshal(fields["id"], &id) != nil || id == "" {
		return keybrake.ErrorParam(param+".id", "Missing `%s.id` field.", param)
	}
	vars, ok := fields["variables"]
	if !ok || string(vars) == "null" {
		return nil
	}
	values, err := object(vars, param+".variables.")
	if err != nil {
		return err
	}
	if len(values) > maxTemplateVariables {
		return keybrake.ErrorParam(param+".variables", "A template takes at most %d variables (got %d).", maxTemplateVariables, len(values))
	}
	for name, v := range values {
		var str string
		var num json.Number
		switch {
		case json.Unmarshal(v, &str) == nil:
			if strings.ContainsAny(str, "\r\n\x00") {
				return keybrake.ErrorParam(param+".variables."+printable(name), "keybrake does not pass a template variable with a line break: a template's subject and reply-to take variables, and written into the message's header a line break could add a header such as Bcc that names recipients keybrake neither prices nor counts.")
			}
		case len(v) > 0 && v[0] != '"' && json.Unmarshal(v, &num) == nil:
		default:
			return keybrake.ErrorParam(param+".variables."+printable(name), "A template variable must be a string or a number.")
		}
	}
	return nil
}
