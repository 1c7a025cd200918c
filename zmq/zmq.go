// Package zmq connects the billing Processor to ZeroMQ through
// github.com/go-zeromq/zmq4, a pure-Go implementation of ZMTP 3.x that
// interoperates with libzmq peers (pyzmq, czmq, cppzmq). ZeroMQ has no
// broker, no persistence and no acknowledgements, so each socket pattern
// gets a worker and a client that add them, with the idempotency key
// computed from the event's content by the producer before the first send:
//
//   - REQ/REP: RepWorker answers ReqClient, a lazy-pirate client that
//     destroys and recreates its socket after a reply timeout and resends
//     the same envelope (same key).
//   - PUSH/PULL: PullWorker pushes an application ack for every message to
//     the Producer's ack PULL socket; the Producer resends on ack timeout
//     and matches acks to messages by content key, never by a counter.
//   - ROUTER/DEALER: RouterWorker serves DealerClient (and REQ clients);
//     the peer's routing identity only routes the reply, it never reaches
//     the key.
//
// Whatever the pattern, a resend after a worker crash, a socket
// recreation, a producer restart or a reconnect under a new identity
// carries the same key, and the ledger behind the Handler charges it once.
// See docs/zmq.md for the wire format.
package zmq

import (
	"context"

	"github.com/keybrake/keybrake/billing"
)

// Handler processes the body of one billing event and says what to do with
// it. billing.Processor implements it. Process must not panic; a panic is
// recovered and answered with StatusRetry.
type Handler interface {
	Process(ctx context.Context, body []byte) billing.Result
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, body []byte) billing.Result

// Process calls f.
func (f HandlerFunc) Process(ctx context.Context, body []byte) billing.Result { return f(ctx, body) }
