package nsq

import (
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
}

// OriginalBody returns the body of the message that was dead-lettered.
func (d DeadLetter) OriginalBody() ([]byte, error) {
	if d.BodyBase64 != "" {
		b, err := base64.StdEncoding.DecodeString(d.BodyBase64)
		if err != nil {
			return nil, fmt.Errorf("dead letter body_base64: %w", err)
		}
		return b, nil
	}
	return []byte(d.Body), nil
}

// newDeadLetter describes m for the dead-letter topic.
func (w *Worker) newDeadLetter(m *gonsq.Message, res billing.Result, reason string) DeadLetter {
	d := DeadLetter{
		Reason: reason, Outcome: res.Outcome, Key: res.Key, Attempts: m.Attempts,
		Topic: w.Topic, Channel: w.Channel, MessageID: hex.EncodeToString(m.ID[:]), NSQD: m.NSQDAddress,
	}
	if utf8.Valid(m.Body) {
		d.Body = string(m.Body)
	} else {
		d.BodyBase64 = base64.StdEncoding.EncodeToString(m.Body)
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
