// Package jetstream connects the billing Processor to NATS
// (github.com/nats-io/nats.go): a JetStream Worker on a durable pull
// consumer, a Core NATS QueueWorker on a queue group, Publishers that set
// Nats-Msg-Id to the event's content key, and checks for the topologies that
// charge twice (several plain subscribers on a billing subject, several
// durables on one stream subject).
//
// It closes the three JetStream failure modes of the seeds:
//
//   - AckWait expiring during a slow Stripe call: the Worker sends
//     InProgress every AckWait/3 while the Handler runs, so the server never
//     redelivers a message that is being charged; the ledger's lease covers a
//     worker that dies mid-call.
//   - Fan-out: the QueueWorker always subscribes in a queue group, and
//     CheckFanOut (from the server's /connz monitoring) reports every billing
//     subject that more than one plain subscriber or queue group receives;
//     CheckDurables does the same for JetStream consumers.
//   - A durable deleted and recreated with DeliverPolicy all: the Worker
//     records the consumer's ack floor in a FloorStore (a JetStream KV bucket
//     by default) and, when the durable has disappeared, recreates it from
//     floor+1; without a floor it refuses to start unless an explicit
//     StartPolicy says where to begin.
//
// The Handler sees only the message body, never delivery metadata (stream
// sequence, delivery count, consumer name), so every redelivery carries the
// same content key and the ledger settles it exactly once.
package jetstream

import (
	"context"

	"github.com/keybrake/keybrake/billing"
)

// Handler processes the body of one message and says what to do with it.
// billing.Processor implements it. A panic in Process is recovered and the
// message retried.
type Handler interface {
	Process(ctx context.Context, body []byte) billing.Result
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, body []byte) billing.Result

// Process calls f.
func (f HandlerFunc) Process(ctx context.Context, body []byte) billing.Result { return f(ctx, body) }

var _ Handler = (*billing.Processor)(nil)

// process calls h, turning a panic into a retry.
func process(ctx context.Context, h Handler, body []byte) (res billing.Result) {
	defer func() {
		if r := recover(); r != nil {
			res = billing.Result{Outcome: billing.OutcomeTransient, Action: billing.ActionRetry, Reason: "handler panic: " + fmtAny(r)}
		}
	}()
	return h.Process(ctx, body)
}
