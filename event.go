package keybrake

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"
)

// Audit decisions.
const (
	DecisionAllow   = "allow"   // forwarded upstream
	DecisionDeny    = "deny"    // refused by keybrake, nothing forwarded
	DecisionReplay  = "replay"  // an Idempotency-Key already reserved; forwarded, not counted
	DecisionResolve = "resolve" // the resolver settled an uncertain reservation
	DecisionDrift   = "drift"   // the drift watch found money moved differently upstream (drift/)
)

// Event is one line of a key's audit log: one per proxied request, plus one
// per resolution of an uncertain reservation.
type Event struct {
	ID             int64     `json:"id"`
	KeyID          string    `json:"key_id"`
	Time           time.Time `json:"time"`
	Operation      string    `json:"operation"`
	Method         string    `json:"method"`
	Path           string    `json:"path"`
	Amount         int64     `json:"amount"`
	Currency       string    `json:"currency"`
	Micros         Micros    `json:"usd"`
	Decision       string    `json:"decision"`
	Reason         string    `json:"reason"`
	UpstreamStatus int       `json:"upstream_status"`
	ObjectID       string    `json:"object_id"`
	RequestID      string    `json:"request_id"`
	IdempotencyKey string    `json:"idempotency_key"`
	ReservationID  string    `json:"reservation_id"`
	// Via names the interface the request came through: ViaMCP for a tool
	// call on /mcp, "" for the REST proxy.
	Via string `json:"via,omitempty"`
	// MCPSession is the Mcp-Session-Id of the MCP session that made the
	// call, "" outside MCP.
	MCPSession string `json:"mcp_session_id,omitempty"`
	// MCPClient is the client name (and version) the MCP session gave in
	// its initialize request, "" outside MCP.
	MCPClient string `json:"mcp_client,omitempty"`

	// Seq, PrevHash and Hash chain the key's events (audit.go): the store
	// sets them when it inserts the event. Seq 0 marks an event written
	// before the chain existed.
	Seq      int64  `json:"seq"`
	PrevHash string `json:"prev_hash"`
	Hash     string `json:"hash"`
}

// CleanText returns s as both stores keep it: invalid UTF-8 and NUL bytes
// replaced by U+FFFD. Much of an event is text a client chose (a refused
// customer ID, a header, an MCP client's name), and PostgreSQL refuses
// text that is not UTF-8 or holds NUL: the event, or the suspension that
// quoted it, then failed to write, so one odd byte in a request kept it
// out of the audit log and out of the breaker's reach.
func CleanText(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// TruncateText cuts s to at most n bytes at a character boundary, marking
// the cut with "…". A cut inside a character would leave text that is
// not UTF-8 (see CleanText).
func TruncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// CleanText applies CleanText to every text field of e. Both stores call
// it on each event they add, before chaining it, so the hash is of what is
// kept.
func (e *Event) CleanText() {
	for _, f := range []*string{&e.KeyID, &e.Operation, &e.Method, &e.Path, &e.Currency, &e.Decision, &e.Reason,
		&e.ObjectID, &e.RequestID, &e.IdempotencyKey, &e.ReservationID, &e.Via, &e.MCPSession, &e.MCPClient} {
		*f = CleanText(*f)
	}
}

// ViaMCP marks an event of a tool call made through keybrake's MCP server.
const ViaMCP = "mcp"

// EventFilter selects a page of a key's events, newest first. The zero
// value of each field selects everything.
type EventFilter struct {
	KeyID         string
	Limit         int   // 0 means the default of 10
	StartingAfter int64 // the ID of the last event of the previous page
	NewerThan     int64 // only events with a larger ID: what a live feed has not shown yet
	Decision      string
	Operation     string
	Since         time.Time // only events at or after Since
	Until         time.Time // only events before Until
}

// EventService keeps the audit log.
type EventService interface {
	// AddEvent appends e, setting its ID.
	AddEvent(ctx context.Context, e *Event) error
	// AddEvents appends events in one write, setting their IDs in order
	// and chaining each to its key's previous event (Seq, PrevHash, Hash),
	// in the transaction that inserts them; if it fails, none was added.
	AddEvents(ctx context.Context, events []*Event) error
	// FindEvents returns a page of events and whether more follow.
	FindEvents(ctx context.Context, f EventFilter) ([]*Event, bool, error)
}
