package twilio

import (
	"encoding/json"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
)

// Twilio has no idempotency key: a create whose answer was lost cannot be
// replayed to learn what it did. What identifies the resource it may have
// created is the request itself, which keybrake keeps on the reservation:
// the destination, the sender, the body, and the time it was forwarded.
// This file is the API knowledge of finding it again with Twilio's list
// filters; the resolver (http/vendor_twilio_lookup.go) decides.
//
// Why not DateSent (Messages) or StartTime (Calls): they filter on
// date_sent and start_time, which are null while a message is queued,
// accepted or scheduled and while a call is queued or ringing, so a filter
// on them hides exactly the resources that were created but have not gone
// out yet; and Twilio documents DateSent to the day (YYYY-MM-DD, GMT). The
// lookup therefore filters on To and From only and compares date_created,
// which Twilio sets when it accepts the request, itself.

// LookupPageSize is the page size of a lookup: Twilio's maximum.
const LookupPageSize = 1000

// Sent is what identifies the message or call a forwarded create made,
// read back from the body keybrake forwarded.
type Sent struct {
	Kind                string // "Messages" or "Calls"
	To, From            string
	MessagingServiceSid string
	Body                string
	NumMedia            int
}

// ParseSent reads the forwarded body of a messages.create or calls.create
// (operation as keybrake names it, with or without the "twilio." prefix).
// Returns EINVALID for another operation or a body without To.
func ParseSent(operation, body string) (Sent, error) {
	f, err := ParseForm(body)
	if err != nil {
		return Sent{}, err
	}
	var s Sent
	switch strings.TrimPrefix(operation, "twilio.") {
	case "messages.create":
		s.Kind = "Messages"
		s.MessagingServiceSid, _ = f.Get("MessagingServiceSid")
		s.Body, _ = f.Get("Body")
		s.NumMedia = len(f.All("MediaUrl"))
	case "calls.create":
		s.Kind = "Calls"
	default:
		return Sent{}, keybrake.Errorf(keybrake.EINVALID, "%s creates nothing keybrake can look up.", operation)
	}
	s.To, _ = f.Get("To")
	s.From, _ = f.Get("From")
	if s.To == "" || (s.From == "" && s.MessagingServiceSid == "") {
		return Sent{}, keybrake.Errorf(keybrake.EINVALID, "The forwarded %s names no To or no sender.", operation)
	}
	return s, nil
}

// Signature is what two identical sends share: a lost answer cannot be
// told apart from another send with the same signature.
func (s Sent) Signature() string {
	return strings.Join([]string{s.Kind, s.To, s.From, s.MessagingServiceSid, strconv.Itoa(s.NumMedia), s.Body}, "\x00")
}

// Query is the list query of the lookup's first page: To, which pricing
// requires in E.164, and From when the request named one in E.164. Twilio
// normalises a number written otherwise ("+1 (415) 555-0100"), so a From
// filter as written could hide the message; such a From is compared on
// the results instead. A messaging service picks the sender itself.
func (s Sent) Query() url.Values {
	q := url.Values{"To": {s.To}, "PageSize": {strconv.Itoa(LookupPageSize)}}
	if IsE164(s.From) {
		q.Set("From", s.From)
	}
	return q
}

// IsE164 reports whether n is a phone number written as Twilio stores it:
// + and 8 to 15 digits, the first not 0.
func IsE164(n string) bool {
	digits, ok := strings.CutPrefix(n, "+")
	if !ok || len(digits) < 8 || len(digits) > 15 || digits[0] == '0' {
		return false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return false
		}
	}
	return true
}

// Resource is one message or call of a list page, as far as the lookup
// reads it.
type Resource struct {
	Sid                 string    `json:"sid"`
	To                  string    `json:"to"`
	From                string    `json:"from"`
	MessagingServiceSid string    `json:"messaging_service_sid"`
	Body                string    `json:"body"`
	NumMedia            string    `json:"num_media"`
	Direction           string    `json:"direction"`
	DateCreated         string    `json:"date_created"` // RFC 2822, GMT
	Status              string    `json:"status"`
	Price               *string   `json:"price"` // null until Twilio prices it
	PriceUnit           string    `json:"price_unit"`
	Created             time.Time `json:"-"`
}

// Page is one page of Messages.json or Calls.json.
type Page struct {
	Resources []Resource
	// NextPageURI is the path and query of the next page, "" on the last.
	NextPageURI string
}

// ParsePage reads a list page of kind ("Messages" or "Calls"). A resource
// whose date_created cannot be read makes the page unreadable: the lookup
// must not decide on what it could not read.
func ParsePage(kind string, body []byte) (Page, error) {
	var raw struct {
		Messages    []Resource `json:"messages"`
		Calls       []Resource `json:"calls"`
		NextPageURI *string    `json:"next_page_uri"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return Page{}, keybrake.Errorf(keybrake.EINVALID, "Unreadable %s page.", kind)
	}
	p := Page{Resources: raw.Messages}
	if kind == "Calls" {
		p.Resources = raw.Calls
	}
	if raw.NextPageURI != nil {
		p.NextPageURI = *raw.NextPageURI
	}
	for i := range p.Resources {
		r := &p.Resources[i]
		t, err := time.Parse(time.RFC1123Z, r.DateCreated)
		if err != nil || r.Sid == "" {
			return Page{}, keybrake.Errorf(keybrake.EINVALID, "A %s resource without a sid or a readable date_created (%q).", kind, r.DateCreated)
		}
		r.Created = t
	}
	return p, nil
}

// Match is how a resource relates to a lost create.
type Match int

// The matches, from none to exact.
const (
	// MatchNone: another destination, sender, direction or time.
	MatchNone Match = iota
	// MatchLoose: the same destination and sender in the window, but not
	// the same body: Twilio may have changed it (a trial account's prefix,
	// Smart Encoding, link shortening), so it may still be the one.
	MatchLoose
	// MatchExact: everything the request named.
	MatchExact
)

// Match reports how r relates to the create s forwarded, created within
// [from, until].
func (s Sent) Match(r Resource, from, until time.Time) Match {
	if r.To != s.To || !strings.HasPrefix(r.Direction, "outbound-api") || r.Created.Before(from) || r.Created.After(until) {
		return MatchNone
	}
	if s.From != "" && r.From != s.From {
		// Another sender, or this one as Twilio normalised it: never
		// proof that the request made nothing.
		return MatchLoose
	}
	if s.Kind == "Calls" {
		return MatchExact
	}
	if s.From == "" && r.MessagingServiceSid != s.MessagingServiceSid {
		return MatchLoose
	}
	if r.Body != s.Body || (r.NumMedia != "" && r.NumMedia != strconv.Itoa(s.NumMedia)) {
		return MatchLoose
	}
	return MatchExact
}

// SortResources orders resources by creation, then sid: the order in which
// identical sends are assigned to the reservations that made them.
func SortResources(rs []Resource) {
	sort.Slice(rs, func(i, j int) bool {
		if !rs[i].Created.Equal(rs[j].Created) {
			return rs[i].Created.Before(rs[j].Created)
		}
		return rs[i].Sid < rs[j].Sid
	})
}
