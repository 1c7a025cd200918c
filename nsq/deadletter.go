package nsq

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	gonsq "github.com/nsqio/go-nsq"

	"github.com/keybrake/keybrake/billing"
)

// DeadLetter is the JSON body the Worker publishes to the dead-letter topic:
// the original message and why it could not be processed.
type DeadLetter struct {
	Reason    string          `json:"reason"`
	Outcome   billing.Outcome `json:"outcome,omitempty"`
	Key       string          `json:"key,omitempty"` // the event's idempotency key, if it decoded
	Attempts  uint16          `json:"attempts"`
	Topic     string          `json:"topic"`
	Channel   string          `json:"channel"`
	MessageID string          `json:"message_id"`
	NSQD      string          `json:"nsqd,omitempty"`
	// Body is the original body when it is valid UTF-8; otherwise
	// BodyBase64 holds it, base64-encoded (standard encoding).
	Body       string `json:"body,omitempty"`
	BodyBase64 string `json:"body_base64,omitempty"`
	// BodyTruncated says Body or BodyBase64 holds only the first
	// billing.MaxEventBytes of a body too big to be an event: the whole of
	// one near nsqd's --max-msg-size, JSON-escaped, would not fit in the
	// dead letter, which nsqd would refuse, and the message would be
	// requeued forever. BodyBytes and BodySHA256 identify the original.
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

// newDeadLetter describes m for the dead-letter topic.
func (w *Worker) newDeadLetter(m *gonsq.Message, res billing.Result, reason string) DeadLetter {
	d := DeadLetter{
		Reason: reason, Outcome: res.Outcome, Key: res.Key, Attempts: m.Attempts,
		Topic: w.Topic, Channel: w.Channel, MessageID: hex.EncodeToString(m.ID[:]), NSQD: m.NSQDAddress,
	}
	sum := sha256.Sum256(m.Body)
	body := m.Body
	d.BodyBytes, d.BodySHA256 = len(body), hex.EncodeToString(sum[:])
	if len(body) > billing.MaxEventBytes {
		body, d.BodyTruncated = body[:billing.MaxEventBytes], true
	}
	if utf8.Valid(body) {
		d.Body = string(body)
	} else {
		d.BodyBase64 = base64.StdEncoding.EncodeToString(body)
	}
	return d
}

// deadLetter publishes m's dead letter and returns nil once nsqd has it.
func (w *Worker) deadLetter(m *gonsq.Message, res billing.Result, reason string) error {
	body, err := json.Marshal(w.newDeadLetter(m, res, reason))
	if err != nil {
		return fmt.Errorf("encode dead letter: %w", err)
	}
	p, err := w.deadLetterProducer(m.NSQDAddress)
	if err != nil {
		return err
	}
	if err := p.Publish(w.DeadLetterTopic, body); err != nil {
		return fmt.Errorf("publish to %s: %w", w.DeadLetterTopic, err)
	}
	return nil
}

// deadLetterProducer returns Producer, or the producer to the nsqd at addr,
// creating it on first use.
func (w *Worker) deadLetterProducer(addr string) (DeadLetterPublisher, error) {
	if w.Producer != nil {
		return w.Producer, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.producers == nil {
		return nil, fmt.Errorf("dead letter: worker closed")
	}
	if p, ok := w.producers[addr]; ok {
		return p, nil
	}
	cfg := gonsq.NewConfig()
	if w.Config != nil {
		c := *w.Config
		cfg = &c
	}
	p, err := gonsq.NewProducer(addr, cfg)
	if err != nil {
		return nil, fmt.Errorf("dead letter producer for %s: %w", addr, err)
	}
	setProducerLogger(p, w.Logger.With("component", "go-nsq"))
	w.producers[addr] = p
	return p, nil
}
