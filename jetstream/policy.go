package jetstream

import (
	"fmt"
	"time"

	jsapi "github.com/nats-io/nats.go/jetstream"
)

// Deliver policies a StartPolicy may name.
const (
	DeliverNone            = ""                  // no explicit policy: resume from the recorded floor or refuse
	DeliverNew             = "new"               // only messages published after the consumer is created
	DeliverAll             = "all"               // the whole stream: replays history, on purpose only
	DeliverLast            = "last"              // the last message of the stream, then new ones
	DeliverLastPerSubject  = "last_per_subject"  // the last message of each subject, then new ones
	DeliverByStartSequence = "by_start_sequence" // from StartSequence
	DeliverByStartTime     = "by_start_time"     // from the first message at or after StartTime
)

// StartPolicy says where a durable that does not exist, and has no recorded
// ack floor, starts. The zero value (DeliverNone) refuses to guess: a
// recreated durable must never silently replay the stream from the start.
type StartPolicy struct {
	Deliver       string    // one of the Deliver constants
	StartSequence uint64    // for DeliverByStartSequence; at least 1
	StartTime     time.Time // for DeliverByStartTime
}

// Validate returns an error naming the field when p is inconsistent.
func (p StartPolicy) Validate() error {
	switch p.Deliver {
	case DeliverNone, DeliverNew, DeliverAll, DeliverLast, DeliverLastPerSubject:
		if p.StartSequence != 0 || !p.StartTime.IsZero() {
			return fmt.Errorf("deliver_policy %q takes no start_sequence or start_time", p.Deliver)
		}
	case DeliverByStartSequence:
		if p.StartSequence == 0 || !p.StartTime.IsZero() {
			return fmt.Errorf("deliver_policy %q needs start_sequence ≥ 1 and no start_time", p.Deliver)
		}
	case DeliverByStartTime:
		if p.StartTime.IsZero() || p.StartSequence != 0 {
			return fmt.Errorf("deliver_policy %q needs start_time and no start_sequence", p.Deliver)
		}
	default:
		return fmt.Errorf("deliver_policy %q: want new, all, last, last_per_subject, by_start_sequence or by_start_time", p.Deliver)
	}
	return nil
}

// apply sets the deliver fields of cfg from p, which must be valid and not
// DeliverNone.
func (p StartPolicy) apply(cfg *jsapi.ConsumerConfig) {
	switch p.Deliver {
	case DeliverNew:
		cfg.DeliverPolicy = jsapi.DeliverNewPolicy
	case DeliverAll:
		cfg.DeliverPolicy = jsapi.DeliverAllPolicy
	case DeliverLast:
		cfg.DeliverPolicy = jsapi.DeliverLastPolicy
	case DeliverLastPerSubject:
		cfg.DeliverPolicy = jsapi.DeliverLastPerSubjectPolicy
	case DeliverByStartSequence:
		cfg.DeliverPolicy = jsapi.DeliverByStartSequencePolicy
		cfg.OptStartSeq = p.StartSequence
	case DeliverByStartTime:
		cfg.DeliverPolicy = jsapi.DeliverByStartTimePolicy
		t := p.StartTime
		cfg.OptStartTime = &t
	}
}

// String describes p for logs.
func (p StartPolicy) String() string {
	switch p.Deliver {
	case DeliverNone:
		return "none"
	case DeliverByStartSequence:
		return fmt.Sprintf("%s=%d", p.Deliver, p.StartSequence)
	case DeliverByStartTime:
		return fmt.Sprintf("%s=%s", p.Deliver, p.StartTime.Format(time.RFC3339))
	}
	return p.Deliver
}

func fmtAny(v any) string { return fmt.Sprint(v) }
