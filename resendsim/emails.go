package resendsim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/resend"
)

// Email is an email as the simulator keeps it.
type Email struct {
	ID          string
	From        string
	To, Cc, Bcc []string
	Subject     string
	Created     time.Time
	ScheduledAt time.Time // zero: send now
	Canceled    bool
	Batch       bool
}

// lastEvent is the email's state on the clock:
//
//	scheduled → queued   at ScheduledAt
//	queued    → sent     1 s after
//	sent      → delivered 3 s after
//	scheduled → canceled by emails.cancel, never sent
func (e *Email) lastEvent(now time.Time) string {
	if e.Canceled {
		return "canceled"
	}
	start := e.Created
	if !e.ScheduledAt.IsZero() {
		start = e.ScheduledAt
		if now.Before(start) {
			return "scheduled"
		}
	}
	switch age := now.Sub(start); {
	case age < time.Second:
		return "queued"
	case age < 3*time.Second:
		return "sent"
	}
	return "delivered"
}

func (e *Email) wire(now time.Time) map[string]any {
	v := map[string]any{
		"object": "email", "id": e.ID, "from": e.From, "to": e.To, "cc": nonNil(e.Cc), "bcc": nonNil(e.Bcc),
		"reply_to": []string{}, "subject": e.Subject, "html": nil, "text": nil,
		"created_at": e.Created.Format("2006-01-02 15:04:05.000000-07"), "last_event": e.lastEvent(now), "scheduled_at": nil,
	}
	if !e.ScheduledAt.IsZero() {
		v["scheduled_at"] = e.ScheduledAt.Format(time.RFC3339)
	}
	return v
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// accept checks what Resend checks beyond the body's shape — a verified
// sender domain and a readable scheduled_at — and returns the email.
func (s *Server) accept(e *resend.Email, now time.Time, batch bool) (*Email, *resend.Error) {
	d := strings.ToLower(e.From[strings.LastIndexByte(e.From, '@')+1:])
	ok := false
	for _, dom := range s.domains {
		ok = ok || dom.Name == d
	}
	if !ok {
		return nil, validation(http.StatusForbidden, "The %s domain is not verified. Please, add and verify your domain on https://resend.com/domains", d)
	}
	out := &Email{ID: newID(), From: e.From, To: e.To, Cc: e.Cc, Bcc: e.Bcc, Subject: e.Subject, Created: now, Batch: batch}
	if e.ScheduledAt != "" {
		at, err := time.Parse(time.RFC3339, e.ScheduledAt)
		if err != nil || at.Before(now) || at.After(now.Add(30*24*time.Hour)) {
			return nil, validation(http.StatusUnprocessableEntity, "scheduled_at must be an ISO 8601 time within the next 30 days.")
		}
		out.ScheduledAt = at.UTC()
	}
	return out, nil
}

func (s *Server) store(e *Email) {
	s.emails = append(s.emails, e)
	s.byID[e.ID] = e
}

func (s *Server) send(req *request) (any, *resend.Error) {
	parsed, err := resend.ParseEmail(req.body)
	if err != nil {
		return nil, asError(err)
	}
	e, rerr := s.accept(parsed, req.now, false)
	if rerr != nil {
		return nil, rerr
	}
	s.store(e)
	return map[string]string{"id": e.ID}, nil
}

// batch sends every email or none; with permissive validation, the valid
// ones, and lists the others by index.
func (s *Server) batch(req *request) (any, *resend.Error) {
	if !req.permissive {
		parsed, err := resend.ParseBatch(req.body)
		if err != nil {
			return nil, asError(err)
		}
		accepted := make([]*Email, len(parsed))
		for i, p := range parsed {
			e, rerr := s.accept(p, req.now, true)
			if rerr != nil {
				return nil, rerr
			}
			accepted[i] = e
		}
		data := make([]map[string]string, len(accepted))
		for i, e := range accepted {
			s.store(e)
			data[i] = map[string]string{"id": e.ID}
		}
		return map[string]any{"data": data}, nil
	}
	var items []json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(req.body))
	if err := dec.Decode(&items); err != nil || len(items) == 0 || len(items) > resend.MaxBatch {
		return nil, validation(http.StatusUnprocessableEntity, "The body must be a JSON array of 1 to %d emails.", resend.MaxBatch)
	}
	data := []map[string]string{}
	errs := []map[string]any{}
	for i, raw := range items {
		one, err := resend.ParseBatch(append(append([]byte("["), raw...), ']'))
		var e *Email
		rerr := asError(err)
		if err == nil {
			e, rerr = s.accept(one[0], req.now, true)
		}
		if rerr != nil {
			errs = append(errs, map[string]any{"index": i, "message": rerr.Message})
			continue
		}
		s.store(e)
		data = append(data, map[string]string{"id": e.ID})
	}
	return map[string]any{"data": data, "errors": errs}, nil
}

func asError(err error) *resend.Error {
	if err == nil {
		return nil
	}
	return validation(http.StatusUnprocessableEntity, "%s", keybrake.ErrorMessage(err))
}

func (s *Server) find(id string) (*Email, *resend.Error) {
	e, ok := s.byID[id]
	if !ok {
		return nil, &resend.Error{StatusCode: http.StatusNotFound, Name: resend.NameNotFound, Message: "Email not found"}
	}
	return e, nil
}

func (s *Server) get(id string) (any, *resend.Error) {
	e, rerr := s.find(id)
	if rerr != nil {
		return nil, rerr
	}
	return e.wire(s.nowLocked()), nil
}

func (s *Server) list() any {
	data := []map[string]any{}
	now := s.nowLocked()
	for i := len(s.emails) - 1; i >= 0 && len(data) < 100; i-- {
		data = append(data, s.emails[i].wire(now))
	}
	return map[string]any{"object": "list", "has_more": len(s.emails) > 100, "data": data}
}

func (s *Server) update(req *request) (any, *resend.Error) {
	e, rerr := s.find(req.op.ID)
	if rerr != nil {
		return nil, rerr
	}
	at, err := resend.ParseUpdate(req.body, req.op.ID)
	if err != nil {
		return nil, asError(err)
	}
	t, perr := time.Parse(time.RFC3339, at)
	switch {
	case e.lastEvent(req.now) != "scheduled":
		return nil, validation(http.StatusUnprocessableEntity, "Only scheduled emails can be updated.")
	case perr != nil || t.Before(req.now):
		return nil, validation(http.StatusUnprocessableEntity, "scheduled_at must be an ISO 8601 time in the future.")
	}
	e.ScheduledAt = t.UTC()
	return map[string]string{"object": "email", "id": e.ID}, nil
}

func (s *Server) cancel(id string) (any, *resend.Error) {
	e, rerr := s.find(id)
	if rerr != nil {
		return nil, rerr
	}
	if e.lastEvent(s.nowLocked()) != "scheduled" {
		return nil, validation(http.StatusUnprocessableEntity, "Only scheduled emails can be canceled.")
	}
	e.Canceled = true
	return map[string]string{"object": "email", "id": e.ID}, nil
}

func (s *Server) listDomains() any {
	data := make([]map[string]any, len(s.domains))
	for i, d := range s.domains {
		data[i] = d.wire()
	}
	return map[string]any{"object": "list", "has_more": false, "data": data}
}

func (s *Server) getDomain(id string) (any, *resend.Error) {
	for _, d := range s.domains {
		if d.ID == id {
			return d.wire(), nil
		}
	}
	return nil, &resend.Error{StatusCode: http.StatusNotFound, Name: resend.NameNotFound, Message: "Domain not found"}
}

func (d domain) wire() map[string]any {
	return map[string]any{"object": "domain", "id": d.ID, "name": d.Name, "status": "verified",
		"created_at": d.Created.UTC().Format("2006-01-02 15:04:05.000000-07"), "region": "us-east-1"}
}

// GroundTruth is every email created, in creation order, including those
// whose answer a fault lost.
type GroundTruth struct {
	Emails []Email `json:"emails"`
}

// GroundTruth returns a copy of every email created.
func (s *Server) GroundTruth() GroundTruth {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := GroundTruth{Emails: make([]Email, len(s.emails))}
	for i, e := range s.emails {
		g.Emails[i] = *e
		g.Emails[i].To = append([]string(nil), e.To...)
	}
	return g
}

// Billed counts what Resend bills: emails created and not canceled
// (scheduled ones included: they will be sent), and their recipients.
type Billed struct {
	Emails     int `json:"emails"`
	Recipients int `json:"recipients"`
}

// Billed returns the account's count on the simulator clock.
func (s *Server) Billed() Billed {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b Billed
	for _, e := range s.emails {
		if !e.Canceled {
			b.Emails++
			b.Recipients += len(e.To) + len(e.Cc) + len(e.Bcc)
		}
	}
	return b
}
