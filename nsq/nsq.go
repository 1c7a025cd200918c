// Package nsq connects the billing Processor to NSQ (github.com/nsqio/go-nsq):
// a Worker that consumes a topic and turns each billing.Result into FIN, REQ
// or a dead-letter publish, and a Publisher that validates and publishes
// billing events.
//
// The Worker never lets NSQ delivery metadata reach the idempotency key: the
// Handler sees only the message body, so a redelivery after a crash (a higher
// Attempts), after a reconnect (a new connection) or after a slow Stripe call
// carries the same content key and the ledger settles it exactly once.
package nsq

import (
	"context"

	"github.com/keybrake/keybrake/billing"
)

// Handler processes the body of one message and says what to do with it.
// billing.Processor implements it. Process must not panic; a panic is
// recovered and the message retried.
type Handler interface {
	Process(ctx context.Context, body []byte) billing.Result
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, body []byte) billing.Result

// Process calls f.
func (f HandlerFunc) Process(ctx context.Context, body []byte) billing.Result { return f(ctx, body) }

// DeadLetterPublisher publishes dead letters. A *gonsq.Producer implements
// it. Publish returns nil only once the broker has the message.
type DeadLetterPublisher interface {
	Publish(topic string, body []byte) error
}
