package twiliosim

import (
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/twilio"
)

// Message is a message as the simulator keeps it.
type Message struct {
	Sid                 string
	To, From            string
	MessagingServiceSid string
	Body                string
	NumMedia            int
	NumSegments         int
	Status              string // scheduled, queued, sending, sent, delivered, canceled, failed
	Created             time.Time
	SendAt              time.Time // zero: send now
	DateSent            time.Time // when it reached sent
	Price               keybrake.Micros
	Priced              bool // Price is known: the message reached sent (or failed: the fee)
	Redacted            bool
	Deleted             bool

	cost    keybrake.Micros // what Twilio will bill, known at creation
	failing bool            // To FailingTo: it fails instead of being sent
}

// Message states, in order.
const (
	StatusScheduled = "scheduled"
	StatusQueued    = "queued"
	StatusSending   = "sending"
	StatusSent      = "sent"
	StatusDelivered = "delivered"
	StatusCanceled  = "canceled"
	StatusFailed    = "failed"
)

// FailingTo is the number a message to which is accepted and then fails:
// failed 2 s after it was queued, error 30008, its price reading
// "0.00000" while Billed counts Twilio's failed-message processing fee
// (twilio.FailedMessageFee), the case keybrake cannot see in the price.
const FailingTo = "+15005550012"

// tick moves the message to the state its age gives it:
//
//	scheduled → queued      at SendAt
//	queued    → sending     1 s after it was queued
//	sending   → sent        2 s after (the price and date_sent are set)
//	sent      → delivered   4 s after
//	scheduled → canceled    by Status=canceled, never billed
//	queued    → failed      2 s after, To FailingTo (billed the fee)
func (m *Message) tick(now time.Time) {
	if m.Status == StatusCanceled {
		return
	}
	start := m.Created
	if !m.SendAt.IsZero() {
		start = m.SendAt
		if now.Before(start) {
			m.Status = StatusScheduled
			return
		}
	}
	if m.failing && now.Sub(start) >= 2*time.Second {
		m.Status = StatusFailed
		m.Priced, m.Price = true, twilio.FailedMessageFee
		return
	}
	switch age := now.Sub(start); {
	case age < time.Second:
		m.Status = StatusQueued
	case age < 2*time.Second:
		m.Status = StatusSending
	case age < 4*time.Second:
		m.Status = StatusSent
	default:
		m.Status = StatusDelivered
	}
	if (m.Status == StatusSent || m.Status == StatusDelivered) && !m.Priced {
		m.Priced, m.Price, m.DateSent = true, m.cost, start.Add(2*time.Second)
	}
}

func (m *Message) final() bool {
	return m.Status == StatusDelivered || m.Status == StatusCanceled || m.Status == StatusFailed
}

func (m *Message) wire(account string) map[string]any {
	uri := "/2010-04-01/Accounts/" + account + "/Messages/" + m.Sid + ".json"
	v := map[string]any{
		"sid": m.Sid, "account_sid": account, "api_version": twilio.APIVersion,
		"to": m.To, "from": nullable(m.From), "messaging_service_sid": nullable(m.MessagingServiceSid),
		"body": m.Body, "status": m.Status, "direction": "outbound-api",
		"num_segments": strconv.Itoa(m.NumSegments), "num_media": strconv.Itoa(m.NumMedia),
		"date_created": date(m.Created), "date_updated": date(m.Created), "date_sent": nil,
		"price": nil, "price_unit": "USD", "error_code": nil, "error_message": nil, "uri": uri,
		"subresource_uris": map[string]string{"media": strings.TrimSuffix(uri, ".json") + "/Media.json"},
	}
	if m.Priced {
		v["price"] = priceString(m.Price)
		v["date_sent"] = date(m.DateSent)
	}
	if m.Status == StatusCanceled {
		v["price"] = "0.00000"
	}
	if m.Status == StatusFailed {
		v["price"], v["date_sent"], v["error_code"], v["error_message"] = "0.00000", nil, 30008, "Unknown error"
	}
	return v
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// form turns url.Values into the twilio package's Form for pricing.
func form(v url.Values) *twilio.Form {
	f := &twilio.Form{}
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, x := range v[k] {
			f.Pairs = append(f.Pairs, twilio.Pair{Name: k, Value: x})
		}
	}
	return f
}

func (s *Server) createMessage(req *request) (any, *twilio.Error) {
	f := req.form
	to, from, svc, body := f.Get("To"), f.Get("From"), f.Get("MessagingServiceSid"), f.Get("Body")
	switch {
	case to == "":
		return nil, invalid(21604, "A 'To' phone number is required.")
	case to == "+15005550001":
		return nil, invalid(21211, "The 'To' number %s is not a valid phone number.", to)
	case from == "" && svc == "":
		return nil, invalid(21603, "A 'From' phone number is required.")
	case body == "" && len(f["MediaUrl"]) == 0:
		return nil, invalid(21602, "Message body is required.")
	case utf8.RuneCountInString(body) > twilio.MaxBodyChars:
		return nil, invalid(21617, "The concatenated message body exceeds the 1600 character limit.")
	}
	cost, err := s.messageCost(req.op, f)
	if err != nil {
		return nil, invalid(21211, "%s", keybrake.ErrorMessage(err))
	}
	prefix := "SM"
	if len(f["MediaUrl"]) > 0 {
		prefix = "MM" // Twilio's sids of messages with media
	}
	m := &Message{Sid: newSid(prefix), To: to, From: from, MessagingServiceSid: svc, Body: body,
		NumMedia: len(f["MediaUrl"]), NumSegments: max(cost.Segments, 1), Created: req.now, cost: cost.Micros}
	m.failing = to == FailingTo
	if f.Get("ScheduleType") == "fixed" || f.Get("SendAt") != "" {
		at, err := time.Parse(time.RFC3339, f.Get("SendAt"))
		switch {
		case svc == "":
			return nil, invalid(35111, "MessagingServiceSid is required to schedule a message.")
		case err != nil || f.Get("ScheduleType") != "fixed":
			return nil, invalid(35101, "SendAt must be an ISO 8601 time and ScheduleType must be fixed.")
		case at.Sub(req.now) < 15*time.Minute || at.Sub(req.now) > 35*24*time.Hour:
			return nil, invalid(35114, "SendAt must be between 15 minutes and 35 days from now.")
		}
		m.SendAt = at.UTC()
	}
	m.tick(req.now)
	s.messages = append(s.messages, m)
	s.bySid[m.Sid] = m
	return m.wire(s.opts.AccountSid), nil
}

// converterLink is the link MMS Converter puts in place of one medium.
const converterLink = "https://m.twil.io/Ab3dE9xZ"

// messageCost is what Twilio bills for a message: its SMS segments, one
// MMS, or, to a carrier in Options.NoMMS, the SMS that MMS Converter sends
// instead (the body, then a line with a link for each medium).
func (s *Server) messageCost(op twilio.Operation, f url.Values) (twilio.Cost, error) {
	cost, err := (&twilio.Pricer{Rates: s.opts.Rates}).Price(op, form(f))
	if err != nil {
		return cost, err
	}
	if !cost.MMS {
		// Billed by Twilio's own count of segments, not keybrake's.
		sms, err := s.opts.Rates.Rate(cost.Country, "sms")
		cost.Encoding, cost.Segments = segments(f.Get("Body"), f.Get("SmartEncoded") == "true")
		if strings.HasPrefix(f.Get("From"), "rcs:") {
			// RCS in the United States: segments of 160 UTF-8 bytes.
			cost.Encoding, cost.Segments = "UTF-8", max(1, (len(f.Get("Body"))+159)/160)
		}
		cost.Micros = sms * keybrake.Micros(cost.Segments)
		return cost, err
	}
	if s.noMMS(f.Get("To")) {
		sms, err := s.opts.Rates.Rate(cost.Country, "sms")
		cost.Encoding, cost.Segments = segments(f.Get("Body")+strings.Repeat("\n"+converterLink, len(f["MediaUrl"])), f.Get("SmartEncoded") == "true")
		cost.Micros = sms * keybrake.Micros(cost.Segments)
		return cost, err
	}
	cost.Encoding, cost.Segments = "", 0
	cost.Micros, err = s.opts.Rates.Rate(cost.Country, "mms")
	return cost, err
}

// noMMS reports whether to is on a carrier that takes no MMS.
func (s *Server) noMMS(to string) bool {
	for _, p := range s.opts.NoMMS {
		if strings.HasPrefix(to, p) {
			return true
		}
	}
	return false
}

func (s *Server) findMessage(sid string) (*Message, *twilio.Error) {
	m, ok := s.bySid[sid].(*Message)
	if !ok || m.Deleted {
		return nil, notFound("/2010-04-01/Accounts/" + s.opts.AccountSid + "/Messages/" + sid + ".json")
	}
	return m, nil
}

func (s *Server) message(sid string) (any, *twilio.Error) {
	m, e := s.findMessage(sid)
	if e != nil {
		return nil, e
	}
	return m.wire(s.opts.AccountSid), nil
}

func (s *Server) updateMessage(req *request) (any, *twilio.Error) {
	m, e := s.findMessage(req.op.ID)
	if e != nil {
		return nil, e
	}
	if status := req.form.Get("Status"); status != "" {
		if status != StatusCanceled || m.Status != StatusScheduled {
			return nil, invalid(30409, "Only a scheduled message can be canceled (this one is %s).", m.Status)
		}
		m.Status = StatusCanceled
	}
	if _, ok := req.form["Body"]; ok {
		if req.form.Get("Body") != "" {
			return nil, invalid(21211, "Body can only be updated to the empty string (redaction).")
		}
		if !m.final() {
			return nil, invalid(20009, "Cannot redact message because it is in progress.")
		}
		m.Body, m.Redacted = "", true
	}
	return m.wire(s.opts.AccountSid), nil
}

func (s *Server) deleteMessage(sid string) *twilio.Error {
	m, e := s.findMessage(sid)
	if e != nil {
		return e
	}
	if !m.final() {
		return invalid(20009, "Cannot delete message because it is in progress.")
	}
	m.Deleted = true
	return nil
}

// listMessages reads the account's messages as Twilio does: filtered by
// To, From and the DateSent filters, most recently sent first. Twilio
// sorts by date_sent, which is null until a message is sent; the
// simulator puts those (scheduled, queued, sending) first, newest first,
// and a DateSent filter never matches them.
func (s *Server) listMessages(req *request) (any, *twilio.Error) {
	f := req.form
	on, after, before := f.Get("DateSent"), f.Get("DateSent>"), f.Get("DateSent<")
	for _, d := range []string{on, after, before} {
		if _, ok := parseDateFilter(d); d != "" && !ok {
			return nil, invalid(20001, "Invalid DateSent filter %q: use YYYY-MM-DD or an ISO 8601 time in GMT.", d)
		}
	}
	var ms []*Message
	for _, m := range s.messages {
		if m.Deleted || (f.Get("To") != "" && f.Get("To") != m.To) || (f.Get("From") != "" && f.Get("From") != m.From) {
			continue
		}
		if !inRange(m.DateSent, m.Priced, on, after, before) {
			continue
		}
		ms = append(ms, m)
	}
	sort.SliceStable(ms, func(i, j int) bool {
		a, b := ms[i], ms[j]
		switch {
		case a.Priced != b.Priced:
			return !a.Priced // not sent yet: first
		case a.Priced && !a.DateSent.Equal(b.DateSent):
			return a.DateSent.After(b.DateSent)
		}
		return a.Created.After(b.Created) || (a.Created.Equal(b.Created) && a.Sid > b.Sid)
	})
	out := make([]map[string]any, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.wire(s.opts.AccountSid))
	}
	return page(req, "messages", out)
}

// parseDateFilter reads a date filter's value: a GMT day (YYYY-MM-DD), as
// Twilio documents it, or an RFC 3339 time, as twilio-go sends it.
func parseDateFilter(s string) (time.Time, bool) {
	if d, err := time.Parse(time.DateOnly, s); err == nil {
		return d, true
	}
	if d, err := time.Parse(time.RFC3339, s); err == nil {
		return d.UTC(), true
	}
	return time.Time{}, false
}

// inRange applies Twilio's date filters to a date that is known (sent):
// Name=D on that GMT day, Name>=D (sent as the parameter "Name>") on or
// after it, Name<=D ("Name<") on or before it, each inclusive. A day
// (YYYY-MM-DD) compares whole days; an RFC 3339 time compares instants,
// except Name=, which is always a day. An unknown date (not sent yet)
// matches no filter. Values were checked by parseDateFilter.
func inRange(t time.Time, known bool, on, after, before string) bool {
	if on == "" && after == "" && before == "" {
		return true
	}
	if !known {
		return false
	}
	t = t.UTC()
	day := func(x time.Time) time.Time { return x.UTC().Truncate(24 * time.Hour) }
	cmp := func(v string) int {
		d, _ := parseDateFilter(v)
		if len(v) == len(time.DateOnly) {
			return day(t).Compare(d)
		}
		return t.Compare(d)
	}
	if on != "" {
		if d, _ := parseDateFilter(on); !day(t).Equal(day(d)) {
			return false
		}
	}
	if after != "" && cmp(after) < 0 {
		return false
	}
	if before != "" && cmp(before) > 0 {
		return false
	}
	return true
}

// page cuts one page of a list as Twilio does: PageSize (default 50, at
// most 1000) and Page (from 0), with next_page_uri null on the last page.
func page(req *request, key string, items []map[string]any) (any, *twilio.Error) {
	size, num := 50, 0
	if v := req.form.Get("PageSize"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return nil, invalid(20001, "PageSize must be from 1 to 1000.")
		}
		size = n
	}
	if v := req.form.Get("Page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, invalid(20001, "Page must be a non-negative integer.")
		}
		num = n
	}
	start := min(num*size, len(items))
	end := min(start+size, len(items))
	uri := func(n int) string {
		q := url.Values{}
		for k, v := range req.form {
			if k != "Page" && k != "PageToken" {
				q[k] = v
			}
		}
		q.Set("PageSize", strconv.Itoa(size))
		q.Set("Page", strconv.Itoa(n))
		return req.path + "?" + q.Encode()
	}
	var next any
	if end < len(items) {
		next = uri(num+1) + "&PageToken=PA" + strconv.Itoa(end)
	}
	var prev any
	if num > 0 {
		prev = uri(num - 1)
	}
	data := items[start:end]
	if data == nil {
		data = []map[string]any{}
	}
	return map[string]any{
		key: data, "page": num, "page_size": size, "start": start, "end": max(end-1, 0),
		"uri": uri(num), "first_page_uri": uri(0), "next_page_uri": next, "previous_page_uri": prev,
	}, nil
}
