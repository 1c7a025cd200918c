package zmq

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/billing"
)

// MaxMessageBytes is the largest request envelope a worker reads: the event's
// own limit plus room for the key and the envelope.
const MaxMessageBytes = billing.MaxEventBytes + 1024

// Envelope is the request every ZeroMQ client sends: the event and its
// content idempotency key, computed by the producer before the first send
// (NewEnvelope) so that every resend, from whatever socket, carries it.
//
//	{"key": "kb_<namespace>_<hex>", "event": {…billing.Event…}}
//
// The worker recomputes the key from the event and refuses an envelope
// whose key differs, so a producer that built its key from socket metadata
// (a creation timestamp, an ack counter, a DEALER identity) is told so
// before anything is charged.
type Envelope struct {
	Key   string          `json:"key"`
	Event json.RawMessage `json:"event"`
	// Token, optional, is echoed in the reply: the PUSH producer sets its
	// own (Producer.Send) and drops acks without it, since its ack port
	// takes pushes from any peer and the key alone is guessable. Not part
	// of the key; at most MaxTokenBytes of printable ASCII.
	Token string `json:"token,omitempty"`
}

// MaxTokenBytes bounds an envelope's token.
const MaxTokenBytes = 64

// NewEnvelope validates ev and returns its envelope under namespace: the
// event as JSON and its content key. Returns EINVALID naming the field if
// the namespace or the event is invalid.
func NewEnvelope(namespace string, ev *billing.Event) (*Envelope, error) {
	if err := billing.ValidateNamespace(namespace); err != nil {
		return nil, err
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("encode event: %w", err)
	}
	// Round-trip through the worker's decoder so a producer learns of an
	// invalid event here, not from a dead-letter reply.
	if _, err := billing.DecodeEvent(body); err != nil {
		return nil, err
	}
	return &Envelope{Key: ev.Key(namespace), Event: body}, nil
}

// Marshal returns the envelope's JSON.
func (e *Envelope) Marshal() []byte {
	b, err := json.Marshal(e)
	if err != nil {
		panic(err) // a string and a valid RawMessage always encode
	}
	return b
}

// Status is the worker's answer to one envelope.
type Status string

// Statuses of a Reply.
const (
	// StatusCharged: the event is charged (now, or by an earlier delivery);
	// ChargeID names the charge. Final.
	StatusCharged Status = "charged"
	// StatusDeclined: the card was declined and the ledger recorded it.
	// Final: resending would only decline again.
	StatusDeclined Status = "declined"
	// StatusRetry: the outcome is not known yet (Stripe 5xx or timeout,
	// over cap, another worker holds the event). Resend the same envelope
	// after RetryAfterMS.
	StatusRetry Status = "retry"
	// StatusDeadLetter: the envelope can never be charged as sent
	// (malformed, key mismatch, a conflicting event already owns the key, a
	// permanent Stripe failure). Final; Reason and Param say why.
	StatusDeadLetter Status = "dead_letter"
)

// Final reports whether the status is an outcome the producer must not
// resend for.
func (s Status) Final() bool { return s != StatusRetry }

// Reply is the worker's answer to an envelope: the REP and ROUTER reply,
// and the ack the PULL worker pushes back.
//
//	{"status": "charged", "key": "kb_…", "charge_id": "ch_…", "outcome": "charged"}
//	{"status": "retry", "key": "kb_…", "reason": "…", "retry_after_ms": 1000, "outcome": "transient"}
//	{"status": "dead_letter", "key": "kb_…", "reason": "…", "param": "amount", "outcome": "malformed"}
type Reply struct {
	Status   Status `json:"status"`
	Key      string `json:"key"` // the envelope's key; "" when the envelope could not be read
	ChargeID string `json:"charge_id,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// Param names the offending field of a malformed envelope or event.
	Param string `json:"param,omitempty"`
	// Outcome is billing's finer outcome (charged, already_done, declined,
	// transient, malformed, failed).
	Outcome billing.Outcome `json:"outcome,omitempty"`
	// RetryAfterMS is, for StatusRetry, how long to wait before resending.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
	// Token is the envelope's token, echoed; "" when it had none or could
	// not be read.
	Token string `json:"token,omitempty"`
}

// RetryAfter returns RetryAfterMS as a duration.
func (r *Reply) RetryAfter() time.Duration { return time.Duration(r.RetryAfterMS) * time.Millisecond }

// Marshal returns the reply's JSON.
func (r *Reply) Marshal() []byte {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err) // strings and integers always encode
	}
	return b
}

// DecodeReply decodes a worker's reply. Returns EINVALID if it is not a
// reply.
func DecodeReply(b []byte) (*Reply, error) {
	var r Reply
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&r); err != nil {
		return nil, keybrake.Errorf(keybrake.EINVALID, "The reply is not a keybrake ZeroMQ reply: %v.", err)
	}
	switch r.Status {
	case StatusCharged, StatusDeclined, StatusRetry, StatusDeadLetter:
	default:
		return nil, keybrake.Errorf(keybrake.EINVALID, "The reply has an unknown status %q.", r.Status)
	}
	return &r, nil
}

// decodeEnvelope reads and verifies one request envelope: strict JSON with
// exactly the fields key and event, an event billing.DecodeEvent accepts,
// and a key equal to the event's content key under namespace. It returns
// the envelope, or the dead-letter reply explaining the refusal.
func decodeEnvelope(b []byte, namespace string) (*Envelope, *Reply) {
	reject := func(key string, err error) *Reply {
		return &Reply{Status: StatusDeadLetter, Key: key, Outcome: billing.OutcomeMalformed,
			Reason: keybrake.ErrorMessage(err), Param: keybrake.ErrorParamOf(err)}
	}
	if len(b) > MaxMessageBytes {
		return nil, reject("", keybrake.Errorf(keybrake.EINVALID, "The message is %d bytes; at most %d are accepted.", len(b), MaxMessageBytes))
	}
	var env Envelope
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&env); err != nil {
		return nil, reject("", keybrake.Errorf(keybrake.EINVALID, `The message is not a keybrake envelope {"key": …, "event": {…}}: %v.`, err))
	}
	if d.More() {
		return nil, reject("", keybrake.Errorf(keybrake.EINVALID, "The message has data after its envelope."))
	}
	if !validToken(env.Token) {
		return nil, reject("", keybrake.ErrorParam("token", "The envelope token must be at most %d bytes of printable ASCII.", MaxTokenBytes))
	}
	echo := func(r *Reply) *Reply { r.Token = env.Token; return r }
	if env.Key == "" {
		return nil, echo(reject("", keybrake.ErrorParam("key", "The envelope has no key: the producer computes the event's content key before the first send.")))
	}
	if len(env.Event) == 0 || bytes.Equal(env.Event, []byte("null")) {
		return nil, echo(reject(env.Key, keybrake.ErrorParam("event", "The envelope has no event.")))
	}
	ev, err := billing.DecodeEvent(env.Event)
	if err != nil {
		return nil, echo(reject(env.Key, err))
	}
	if want := ev.Key(namespace); env.Key != want {
		return nil, echo(reject(env.Key, keybrake.ErrorParam("key", "The envelope key %q is not the content key of its event in namespace %q (%s): build it from the namespace, customer_id and billing_period only, never from socket metadata.", clip(env.Key), namespace, want)))
	}
	return &env, nil
}

// replyOf maps the Handler's result for env to the reply.
func replyOf(key string, r billing.Result) *Reply {
	rep := &Reply{Key: key, ChargeID: r.ChargeID, Reason: r.Reason, Outcome: r.Outcome}
	switch {
	case r.Action == billing.ActionRetry:
		rep.Status = StatusRetry
		rep.RetryAfterMS = r.Delay.Milliseconds()
	case r.Action == billing.ActionDeadLetter:
		rep.Status = StatusDeadLetter
	case r.Outcome == billing.OutcomeDeclined:
		rep.Status = StatusDeclined
	case r.Outcome == billing.OutcomeAlreadyDone:
		rep.Status = alreadyDoneStatus(r)
	default:
		rep.Status = StatusCharged
	}
	return rep
}

// alreadyDoneStatus is the status of an event an earlier delivery finished,
// from the ledger entry's final state; without one, a charge counts as
// charged and no charge as declined, never as something to resend.
func alreadyDoneStatus(r billing.Result) Status {
	switch r.State {
	case keybrake.EntryCharged:
		return StatusCharged
	case keybrake.EntryDeclined:
		return StatusDeclined
	case keybrake.EntryFailed:
		return StatusDeadLetter
	}
	switch {
	case r.ChargeID != "":
		return StatusCharged
	}
	return StatusDeclined
}

// clip shortens hostile input before it goes into a reply.
func clip(s string) string {
	if len(s) <= 140 {
		return s
	}
	return s[:140] + "…"
}

// validNamespace returns EINVALID unless ns is a valid billing namespace.
func validNamespace(ns string) error {
	return billing.ValidateNamespace(ns)
}

// closeErr drops the error of closing a socket whose connections a peer
// already closed: go-zeromq reports it as "use of closed network
// connection", and it means nothing for a worker shutting down.
func closeErr(err error) error {
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// validToken reports whether t is an acceptable envelope token: at most
// MaxTokenBytes of printable ASCII, so that echoing it cannot grow a reply
// or carry anything but an opaque value.
func validToken(t string) bool {
	if len(t) > MaxTokenBytes {
		return false
	}
	for i := 0; i < len(t); i++ {
		if t[i] < 0x21 || t[i] > 0x7e {
			return false
		}
	}
	return true
}
