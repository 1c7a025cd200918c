package twiliosim

import (
	"encoding/xml"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/twilio"
)

// Call is a call as the simulator keeps it.
type Call struct {
	Sid       string
	To, From  string
	Status    string // queued, ringing, in-progress, completed, canceled
	Created   time.Time
	TimeLimit int       // seconds
	Ended     time.Time // when it was hung up or canceled by a request; zero if not
	Duration  int       // seconds talked, once completed
	Price     keybrake.Micros
	Priced    bool

	// Speech is the text-to-speech billed for the call's <Say>s in priced
	// voices, apart from Price, once the call completed.
	Speech keybrake.Micros

	rate keybrake.Micros // per started minute
	talk int             // how long the callee would talk
	say  []said          // the priced <Say>s of its Twiml
	per  keybrake.Micros // text-to-speech per started 100 characters
}

// said is a <Say> in a priced voice: its characters and loop.
type said struct{ chars, loop int }

// charsPerSecond is how fast the simulator's voices speak, for a <Say>
// with loop="0", which repeats until the call ends.
const charsPerSecond = 15

// speech is what the call's priced <Say>s cost when it talked for
// seconds: each repetition billed by the started 100 characters.
func (c *Call) speech(seconds int) keybrake.Micros {
	var total keybrake.Micros
	for _, s := range c.say {
		reps := s.loop
		if reps == 0 {
			reps = max(1, (seconds*charsPerSecond+s.chars-1)/max(1, s.chars))
		}
		total += c.per * keybrake.Micros((s.chars+99)/100*reps)
	}
	return total
}

// parseSay reads the <Say>s of twiml that Twilio bills per character:
// those with a voice other than man or woman.
func parseSay(twiml, defaultVoice string) []said {
	var out []said
	dec := xml.NewDecoder(strings.NewReader(twiml))
	var cur *said
	for {
		tok, err := dec.Token()
		if err != nil {
			return out
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if t.Name.Local != "Say" {
				continue
			}
			voice, loop := defaultVoice, 1
			for _, a := range t.Attr {
				switch strings.ToLower(a.Name.Local) {
				case "voice":
					voice = a.Value
				case "loop":
					if n, err := strconv.Atoi(a.Value); err == nil && n >= 0 {
						loop = n
					}
				}
			}
			if voice != "" && voice != "man" && voice != "woman" {
				cur = &said{loop: loop}
			}
		case xml.CharData:
			if cur != nil {
				cur.chars += utf8.RuneCount(t)
			}
		case xml.EndElement:
			if t.Name.Local == "Say" && cur != nil {
				out = append(out, *cur)
				cur = nil
			}
		}
	}
}

// Call states.
const (
	CallQueued     = "queued"
	CallRinging    = "ringing"
	CallInProgress = "in-progress"
	CallCompleted  = "completed"
	CallCanceled   = "canceled"
)

// Answer and ring delays of every call.
const (
	ringAfter   = time.Second
	answerAfter = 5 * time.Second
)

// tick moves the call to the state its age gives it:
//
//	queued      → ringing      1 s after creation
//	ringing     → in-progress  5 s after creation (answered)
//	in-progress → completed    after min(CallSeconds, TimeLimit) talked, or when hung up; priced then
//	queued/ringing → canceled  by Status=canceled or completed; priced 0
func (c *Call) tick(now time.Time) {
	if c.Priced {
		return
	}
	answered := c.Created.Add(answerAfter)
	end := answered.Add(time.Duration(min(c.talk, c.TimeLimit)) * time.Second)
	if !c.Ended.IsZero() && c.Ended.Before(end) {
		end = c.Ended
	}
	switch {
	case !c.Ended.IsZero() && c.Ended.Before(answered):
		c.Status, c.Priced = CallCanceled, true
	case now.Before(c.Created.Add(ringAfter)):
		c.Status = CallQueued
	case now.Before(answered):
		c.Status = CallRinging
	case now.Before(end):
		c.Status = CallInProgress
	default:
		c.Status, c.Priced = CallCompleted, true
		c.Duration = int(end.Sub(answered) / time.Second)
		c.Price = c.rate * keybrake.Micros((c.Duration+59)/60)
		c.Speech = c.speech(c.Duration)
	}
}

func (c *Call) wire(account string) map[string]any {
	v := map[string]any{
		"sid": c.Sid, "account_sid": account, "api_version": twilio.APIVersion,
		"to": c.To, "to_formatted": c.To, "from": c.From, "from_formatted": c.From,
		"status": c.Status, "direction": "outbound-api", "parent_call_sid": nil,
		"date_created": date(c.Created), "date_updated": date(c.Created),
		"start_time": nil, "end_time": nil, "duration": nil, "price": nil, "price_unit": "USD",
		"answered_by": nil, "caller_name": nil, "queue_time": "0", "trunk_sid": nil,
		"uri": "/2010-04-01/Accounts/" + account + "/Calls/" + c.Sid + ".json",
	}
	if c.Status == CallInProgress || c.Status == CallCompleted {
		v["start_time"] = date(c.Created.Add(answerAfter))
	}
	if c.Priced {
		v["duration"] = strconv.Itoa(c.Duration)
		v["price"] = priceString(c.Price)
		v["end_time"] = date(c.Created.Add(answerAfter).Add(time.Duration(c.Duration) * time.Second))
		if c.Status == CallCanceled {
			v["price"], v["end_time"] = "0.00000", nil
		}
	}
	return v
}

func (s *Server) createCall(req *request) (any, *twilio.Error) {
	f := req.form
	to, from := f.Get("To"), f.Get("From")
	switch {
	case to == "":
		return nil, invalid(21201, "No 'To' number is specified")
	case to == "+15005550001":
		return nil, invalid(21211, "Invalid 'To' Phone Number: %s", to)
	case from == "":
		return nil, invalid(21213, "No 'From' number is specified")
	case f.Get("Url") == "" && f.Get("Twiml") == "" && f.Get("ApplicationSid") == "":
		return nil, invalid(21205, "Url parameter is required.")
	}
	limit := twilio.MaxTimeLimit
	if v := f.Get("TimeLimit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > twilio.MaxTimeLimit {
			return nil, invalid(21220, "TimeLimit must be from 1 to %d seconds.", twilio.MaxTimeLimit)
		}
		limit = n
	}
	country, err := twilio.Country("To", to)
	if err != nil {
		return nil, invalid(21211, "Invalid 'To' Phone Number: %s", to)
	}
	rate, ok := s.opts.Rates[country]
	if !ok || rate.Voice == 0 {
		rate = s.opts.Rates[twilio.AnyCountry]
	}
	c := &Call{Sid: newSid("CA"), To: to, From: from, Created: req.now, TimeLimit: limit, rate: rate.Voice, talk: s.opts.CallSeconds,
		say: parseSay(f.Get("Twiml"), s.opts.DefaultVoice), per: s.opts.SpeechPer100}
	c.tick(req.now)
	s.calls = append(s.calls, c)
	s.bySid[c.Sid] = c
	return c.wire(s.opts.AccountSid), nil
}

func (s *Server) findCall(sid string) (*Call, *twilio.Error) {
	c, ok := s.bySid[sid].(*Call)
	if !ok {
		return nil, notFound("/2010-04-01/Accounts/" + s.opts.AccountSid + "/Calls/" + sid + ".json")
	}
	return c, nil
}

func (s *Server) call(sid string) (any, *twilio.Error) {
	c, e := s.findCall(sid)
	if e != nil {
		return nil, e
	}
	return c.wire(s.opts.AccountSid), nil
}

func (s *Server) updateCall(req *request) (any, *twilio.Error) {
	c, e := s.findCall(req.op.ID)
	if e != nil {
		return nil, e
	}
	switch status := req.form.Get("Status"); {
	case status != CallCompleted && status != CallCanceled:
		return nil, invalid(21218, "Status must be completed or canceled.")
	case status == CallCanceled && c.Status == CallInProgress:
		return nil, invalid(21220, "Call is in progress: end it with Status=completed.")
	case c.Priced:
		// Ending an ended call changes nothing, as on Twilio.
	default:
		c.Ended = req.now
		c.tick(req.now)
	}
	return c.wire(s.opts.AccountSid), nil
}

// listCalls reads the account's calls, newest first, filtered by To, From,
// Status and the StartTime filters (StartTime, StartTime>, StartTime< by
// GMT day or RFC 3339 instant, inclusive, as DateSent on messages). A call
// that has not started (queued, ringing) has no start_time and matches no
// StartTime filter.
func (s *Server) listCalls(req *request) (any, *twilio.Error) {
	f := req.form
	on, after, before := f.Get("StartTime"), f.Get("StartTime>"), f.Get("StartTime<")
	for _, d := range []string{on, after, before} {
		if _, ok := parseDateFilter(d); d != "" && !ok {
			return nil, invalid(20001, "Invalid StartTime filter %q: use YYYY-MM-DD or an ISO 8601 time in GMT.", d)
		}
	}
	var out []map[string]any
	for i := len(s.calls) - 1; i >= 0; i-- {
		c := s.calls[i]
		if (f.Get("To") != "" && f.Get("To") != c.To) || (f.Get("From") != "" && f.Get("From") != c.From) ||
			(f.Get("Status") != "" && f.Get("Status") != c.Status) {
			continue
		}
		started := c.Status == CallInProgress || c.Status == CallCompleted // as wire sets start_time
		if !inRange(c.Created.Add(answerAfter), started, on, after, before) {
			continue
		}
		out = append(out, c.wire(s.opts.AccountSid))
	}
	return page(req, "calls", out)
}
