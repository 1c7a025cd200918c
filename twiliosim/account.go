package twiliosim

import (
	"time"

	"github.com/keybrake/keybrake"
)

// account answers accounts.fetch as Twilio does — with the auth token in
// the body, which is why the proxy must redact it.
func (s *Server) account(req *request) any {
	return map[string]any{
		"sid": s.opts.AccountSid, "owner_account_sid": s.opts.AccountSid, "friendly_name": "twiliosim",
		"status": "active", "type": "Full", "auth_token": s.opts.AuthToken,
		"date_created": date(time.Unix(0, 0)), "date_updated": date(time.Unix(0, 0)),
		"uri": "/2010-04-01/Accounts/" + s.opts.AccountSid + ".json",
	}
}

func (s *Server) numbers(req *request) any {
	items := make([]map[string]any, len(s.opts.Numbers))
	for i, n := range s.opts.Numbers {
		items[i] = map[string]any{"sid": "PN" + randomHex(16), "account_sid": s.opts.AccountSid,
			"phone_number": n, "friendly_name": n, "capabilities": map[string]bool{"sms": true, "mms": true, "voice": true}}
	}
	v, _ := page(req, "incoming_phone_numbers", items)
	return v
}

func (s *Server) balance() any {
	left := s.opts.Balance - s.billedLocked()
	sign := ""
	if left < 0 {
		sign, left = "-", -left
	}
	return map[string]any{"account_sid": s.opts.AccountSid, "balance": sign + keybrake.Micros(left).String(), "currency": "USD"}
}

// tickLocked moves every message and call to the state the clock gives it.
func (s *Server) tickLocked(now time.Time) {
	for _, m := range s.messages {
		m.tick(now)
	}
	for _, c := range s.calls {
		c.tick(now)
	}
}

func (s *Server) billedLocked() keybrake.Micros {
	var total keybrake.Micros
	for _, m := range s.messages {
		if m.Priced {
			total += m.Price
		}
	}
	for _, c := range s.calls {
		if c.Priced {
			total += c.Price + c.Speech
		}
	}
	return total
}

// GroundTruth is every message and call created, in creation order,
// including those whose answer a fault lost, as of the simulator clock.
type GroundTruth struct {
	Messages []Message `json:"messages"`
	Calls    []Call    `json:"calls"`
}

// GroundTruth returns a copy of every message and call created.
func (s *Server) GroundTruth() GroundTruth {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tickLocked(s.nowLocked())
	g := GroundTruth{Messages: make([]Message, len(s.messages)), Calls: make([]Call, len(s.calls))}
	for i, m := range s.messages {
		g.Messages[i] = *m
	}
	for i, c := range s.calls {
		g.Calls[i] = *c
	}
	return g
}

// Billed is what the account was billed so far, and what it will be
// billed for what was already sent or placed: the ground truth keybrake's
// count must never fall below.
type Billed struct {
	Micros   keybrake.Micros `json:"billed_micros"`  // prices already reported
	Pending  keybrake.Micros `json:"pending_micros"` // messages not yet priced (calls still running count as their TimeLimit)
	Messages int             `json:"messages"`       // messages created and not canceled
	Calls    int             `json:"calls"`          // calls created
	Segments int             `json:"segments"`       // SMS segments of those messages
}

// Billed returns the account's bill on the simulator clock.
func (s *Server) Billed() Billed {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tickLocked(s.nowLocked())
	b := Billed{Micros: s.billedLocked(), Calls: len(s.calls)}
	for _, m := range s.messages {
		if m.Status == StatusCanceled {
			continue
		}
		b.Messages++
		b.Segments += m.NumSegments
		if !m.Priced {
			b.Pending += m.cost
		}
	}
	for _, c := range s.calls {
		if !c.Priced {
			b.Pending += c.rate*keybrake.Micros((c.TimeLimit+59)/60) + c.speech(c.TimeLimit)
		}
	}
	return b
}
