package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	jsapi "github.com/nats-io/nats.go/jetstream"

	"github.com/keybrake/keybrake/billing"
)

// ReasonHeader carries a dead letter's reason as a header too, for
// `nats stream view` and filters.
const ReasonHeader = "Keybrake-Reason"

// DeadLetter is the JSON body published to the dead-letter subject: the
// original message, where it came from, and why it could not be processed.
type DeadLetter struct {
	Reason       string          `json:"reason"`
	Outcome      billing.Outcome `json:"outcome,omitempty"`
	Key          string          `json:"key,omitempty"` // the event's idempotency key, if it decoded
	Subject      string          `json:"subject"`       // the original subject
	Stream       string          `json:"stream,omitempty"`
	Consumer     string          `json:"consumer,omitempty"`
	StreamSeq    uint64          `json:"stream_seq,omitempty"`
	NumDelivered uint64          `json:"num_delivered"`
	Time         time.Time       `json:"time"`
	// Body is the original body when it is valid UTF-8; otherwise
	// BodyBase64 holds it, base64-encoded (standard encoding).
	Body       string `json:"body,omitempty"`
	BodyBase64 string `json:"body_base64,omitempty"`
	// BodyTruncated says Body or BodyBase64 holds only the first
	// billing.MaxEventBytes of a body too big to be an event: the whole of
	// one near the server's max_payload, JSON-escaped, would not fit in the
	// dead letter, which the server would refuse, and the message would
	// never leave the stream. BodyBytes and BodySHA256 identify the
	// original.
	BodyTruncated bool   `json:"body_truncated,omitempty"`
	BodyBytes     int    `json:"body_bytes"`
	BodySHA256    string `json:"body_sha256"`
}

// OriginalBody returns the body of the message that was dead-lettered. For
// a truncated body it returns what the dead letter holds and an error
// saying so.
func (d DeadLetter) OriginalBody() ([]byte, error) {
	b := []byte(d.Body)
	if d.BodyBase64 != "" {
		var err error
		if b, err = base64.StdEncoding.DecodeString(d.BodyBase64); err != nil {
			return nil, fmt.Errorf("dead letter body_base64: %w", err)
		}
	}
	if d.BodyTruncated {
		return b, fmt.Errorf("dead letter holds the first %d of the body's %d bytes (sha256 %s)", len(b), d.BodyBytes, d.BodySHA256)
	}
	return b, nil
}

// setBody stores body in Body or BodyBase64, its first
// billing.MaxEventBytes if it is longer, with its size and SHA-256.
func (d *DeadLetter) setBody(body []byte) {
	sum := sha256.Sum256(body)
	d.BodyBytes, d.BodySHA256 = len(body), hex.EncodeToString(sum[:])
	if len(body) > billing.MaxEventBytes {
		body, d.BodyTruncated = body[:billing.MaxEventBytes], true
	}
	if utf8.Valid(body) {
		d.Body = string(body)
	} else {
		d.BodyBase64 = base64.StdEncoding.EncodeToString(body)
	}
}

// msgID is the Nats-Msg-Id of a dead letter: one per stream message, so the
// in-band dead letter, the MaxDeliver advisory of every worker, and a
// publish repeated after a crash land once in the dead-letter stream.
func (d DeadLetter) msgID() string {
	if d.Stream == "" {
		return ""
	}
	return fmt.Sprintf("keybrake-dead-letter.%s.%d", d.Stream, d.StreamSeq)
}

// publishDeadLetter publishes d to subject and returns nil once a stream
// stored it (or found it a duplicate).
func publishDeadLetter(ctx context.Context, js jsapi.JetStream, subject string, d DeadLetter) error {
	body, err := jsonMarshal(d)
	if err != nil {
		return err
	}
	m := nats.NewMsg(subject)
	m.Data = body
	m.Header.Set(ReasonHeader, clip(d.Reason, 1024))
	var opts []jsapi.PublishOpt
	if id := d.msgID(); id != "" {
		opts = append(opts, jsapi.WithMsgID(id))
	}
	if _, err := js.PublishMsg(ctx, m, opts...); err != nil {
		return fmt.Errorf("publish dead letter to %s: %w", subject, err)
	}
	return nil
}

// clip shortens s to n bytes on one line, for a header value.
func clip(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
	if len(s) <= n {
		return s
	}
	return s[:n]
}

func jsonMarshal(d DeadLetter) ([]byte, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encode dead letter: %w", err)
	}
	return b, nil
}
