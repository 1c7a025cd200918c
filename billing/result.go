// Package billing turns an at-least-once stream of billing events into
// exactly-once charges: a content-hash idempotency key from business fields
// only, a durable ledger entry claimed before the Stripe call, recovery of
// interrupted claims with the same key, and a vault key as backstop.
//
// Transports (nsq/, jetstream/, zmq/) hand each message body to
// Processor.Process and map the Result's Action to their own verbs: FIN or
// Ack, REQ or NakWithDelay, and a dead-letter publish.
package billing

import "time"

// Action is what a transport must do with a message after processing.
type Action int

const (
	// ActionAck acknowledges the message: the ledger has a final outcome
	// (charged, declined, or already done by an earlier delivery).
	ActionAck Action = iota
	// ActionRetry redelivers the message later (after Result.Delay), never
	// acknowledging it: the outcome is not known yet.
	ActionRetry
	// ActionDeadLetter moves the message to the dead-letter destination with
	// Result.Reason: retrying cannot help (malformed event, key mismatch).
	ActionDeadLetter
)

// String names the action for logs.
func (a Action) String() string {
	switch a {
	case ActionAck:
		return "ack"
	case ActionRetry:
		return "retry"
	case ActionDeadLetter:
		return "dead_letter"
	}
	return "unknown"
}

// Outcome is what happened to one delivery of a billing event.
type Outcome string

// Outcomes of Processor.Process.
const (
	OutcomeCharged     Outcome = "charged"      // this delivery created (or recovered) the charge
	OutcomeDeclined    Outcome = "declined"     // the card was declined; recorded, not retried
	OutcomeAlreadyDone Outcome = "already_done" // an earlier delivery reached a final state
	OutcomeTransient   Outcome = "transient"    // 5xx, timeout, network, 409 in use, lease held, over cap
	OutcomeMalformed   Outcome = "malformed"    // the message is not a valid event
	OutcomeFailed      Outcome = "failed"       // permanent failure recorded in the ledger (e.g. key reused with another amount)
)

// Result is the result of processing one delivery.
type Result struct {
	Outcome  Outcome
	Action   Action
	Key      string        // the event's idempotency key, "" if the event could not be decoded
	ChargeID string        // the Stripe charge, when there is one
	State    string        // the ledger entry's state when it is final: keybrake.EntryCharged, EntryDeclined or EntryFailed
	Reason   string        // why, for logs and dead letters
	Delay    time.Duration // for ActionRetry: how long to wait before redelivery
}
