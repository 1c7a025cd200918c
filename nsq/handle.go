package nsq

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	gonsq "github.com/nsqio/go-nsq"

	"github.com/keybrake/keybrake/billing"
	"github.com/keybrake/keybrake/internal/every"
)

// handleMessage is go-nsq's handler: it runs Handler under TOUCH keepalives
// and answers nsqd from the Result. It always returns nil: every answer is
// explicit.
func (w *Worker) handleMessage(m *gonsq.Message) error {
	m.DisableAutoResponse()
	w.inflight.Add(1)
	defer w.inflight.Done()
	d := Delivery{ID: string(m.ID[:]), Attempts: m.Attempts, NSQD: m.NSQDAddress, Timestamp: m.Timestamp}
	stop := w.keepAlive(m)
	res := w.process(context.WithValue(w.ctx, deliveryKey{}, d), m.Body)
	stop()
	w.respond(m, d, res)
	return nil
}

// process calls Handler, turning a panic into a retry so that one bad
// message cannot take the worker down with its in-flight neighbours.
func (w *Worker) process(ctx context.Context, body []byte) (res billing.Result) {
	defer func() {
		if r := recover(); r != nil {
			w.Logger.Error("nsq worker: handler panicked; retrying the message", "panic", r, "stack", string(debug.Stack()))
			res = billing.Result{Outcome: billing.OutcomeTransient, Action: billing.ActionRetry, Reason: fmt.Sprintf("handler panicked: %v", r)}
		}
	}()
	return w.Handler.Process(ctx, body)
}

// keepAlive TOUCHes m every MsgTimeout/3 until the returned stop is called,
// which returns once no TOUCH can be sent any more.
func (w *Worker) keepAlive(m *gonsq.Message) (stop func()) {
	return every.Start(w.MsgTimeout/3, m.Touch)
}

// respond answers nsqd for m from res.
func (w *Worker) respond(m *gonsq.Message, d Delivery, res billing.Result) {
	r := Response{Delivery: d, Result: res}
	switch {
	case res.Action == billing.ActionAck:
		m.Finish()
		w.acked.Add(1)
		r.Verb = VerbFinish
		if w.Logger.Enabled(context.Background(), slog.LevelDebug) {
			w.logger(m, res).Debug("nsq worker: FIN", "charge", res.ChargeID)
		}
	case res.Action == billing.ActionRetry && m.Attempts < w.MaxAttempts:
		r.Verb, r.Delay = VerbRequeue, w.retryDelay(res, m.Attempts)
		m.RequeueWithoutBackoff(r.Delay)
		w.retried.Add(1)
		w.logger(m, res).Info("nsq worker: REQ", "delay", r.Delay, "reason", res.Reason)
	default:
		reason := res.Reason
		switch res.Action {
		case billing.ActionRetry:
			reason = fmt.Sprintf("gave up after %d attempts: %s", m.Attempts, res.Reason)
		case billing.ActionDeadLetter:
		default:
			reason = fmt.Sprintf("unknown action %d: %s", res.Action, res.Reason)
		}
		r.Verb = VerbDeadLetter
		if r.Err = w.deadLetter(m, res, reason); r.Err != nil {
			// Never drop: the message stays in NSQ until a dead letter
			// holds it.
			r.Verb, r.Delay = VerbRequeue, w.retryDelay(billing.Result{}, m.Attempts)
			m.RequeueWithoutBackoff(r.Delay)
			w.failed.Add(1)
			w.retried.Add(1)
			w.logger(m, res).Error("nsq worker: dead-letter publish failed; requeued", "topic", w.DeadLetterTopic, "reason", reason, "err", r.Err, "delay", r.Delay)
			break
		}
		m.Finish()
		w.deadLettered.Add(1)
		w.logger(m, res).Warn("nsq worker: dead-lettered", "topic", w.DeadLetterTopic, "reason", reason)
	}
	if w.OnResponse != nil {
		w.OnResponse(r)
	}
}

// logger is the Worker's logger with m's and res's attributes, built only
// for the answers that log: building it cost the FIN of every event.
func (w *Worker) logger(m *gonsq.Message, res billing.Result) *slog.Logger {
	return w.Logger.With("msg", hex.EncodeToString(m.ID[:]), "attempts", m.Attempts, "key", res.Key, "outcome", res.Outcome)
}

// retryDelay is res.Delay, or Backoff's when the handler gave none, capped
// at MaxRequeueDelay.
func (w *Worker) retryDelay(res billing.Result, attempts uint16) time.Duration {
	d := res.Delay
	if d <= 0 {
		d = w.Backoff(attempts)
	}
	return max(0, min(d, w.MaxRequeueDelay))
}
