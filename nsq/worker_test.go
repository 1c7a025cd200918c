package nsq_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsqio/nsq/nsqd"

	"github.com/keybrake/keybrake/billing"
	"github.com/keybrake/keybrake/nsq"
)

func ack(key string) billing.Result {
	return billing.Result{Outcome: billing.OutcomeCharged, Action: billing.ActionAck, Key: key}
}

func retry(reason string) billing.Result {
	return billing.Result{Outcome: billing.OutcomeTransient, Action: billing.ActionRetry, Reason: reason}
}

// attemptsOf returns the delivery's Attempts from the handler's context.
func attemptsOf(tb testing.TB, ctx context.Context) uint16 {
	d, ok := nsq.DeliveryFrom(ctx)
	if !ok {
		tb.Error("no Delivery in the handler's context")
	}
	return d.Attempts
}

func TestWorker(t *testing.T) {
	t.Run("AckFinishes", func(t *testing.T) {
		n := MustNSQD(t, nil)
		hook, resp := Responses()
		var calls atomic.Int32
		MustOpen(t, &nsq.Worker{Topic: "billing", NSQDAddrs: []string{n.TCP}, OnResponse: hook,
			Handler: nsq.HandlerFunc(func(ctx context.Context, body []byte) billing.Result {
				calls.Add(1)
				return ack(string(body))
			})})
		MustPublish(t, n.TCP, "billing", "ev1")
		r := Receive(t, resp)
		if r.Verb != nsq.VerbFinish || r.Result.Key != "ev1" || r.Delivery.Attempts != 1 {
			t.Fatalf("response %+v", r)
		}
		Eventually(t, "the channel to be empty", func() bool {
			c := n.Channel("billing", "billing")
			return c.Depth == 0 && c.InFlightCount == 0 && c.DeferredCount == 0 && c.MessageCount == 1
		})
		if c := n.Channel("billing", "billing"); c.RequeueCount != 0 || c.TimeoutCount != 0 || calls.Load() != 1 {
			t.Fatalf("requeues %d, timeouts %d, calls %d", c.RequeueCount, c.TimeoutCount, calls.Load())
		}
	})

	t.Run("RetryRequeuesWithDelay", func(t *testing.T) {
		n := MustNSQD(t, nil)
		hook, resp := Responses()
		MustOpen(t, &nsq.Worker{Topic: "billing", NSQDAddrs: []string{n.TCP}, OnResponse: hook,
			Handler: nsq.HandlerFunc(func(ctx context.Context, body []byte) billing.Result {
				if attemptsOf(t, ctx) < 3 {
					r := retry("stripe 503")
					r.Delay = 20 * time.Millisecond
					return r
				}
				return ack("k")
			})})
		MustPublish(t, n.TCP, "billing", "ev")
		for want := uint16(1); want <= 3; want++ {
			r := Receive(t, resp)
			if r.Delivery.Attempts != want {
				t.Fatalf("attempts %d, want %d", r.Delivery.Attempts, want)
			}
			if want < 3 && (r.Verb != nsq.VerbRequeue || r.Delay != 20*time.Millisecond) {
				t.Fatalf("response %+v, want REQ after 20ms", r)
			}
			if want == 3 && r.Verb != nsq.VerbFinish {
				t.Fatalf("response %+v, want FIN", r)
			}
		}
	})

	t.Run("DelayCapped", func(t *testing.T) {
		n := MustNSQD(t, nil)
		hook, resp := Responses()
		MustOpen(t, &nsq.Worker{Topic: "billing", NSQDAddrs: []string{n.TCP}, OnResponse: hook, MaxRequeueDelay: 50 * time.Millisecond,
			Handler: nsq.HandlerFunc(func(ctx context.Context, body []byte) billing.Result {
				if attemptsOf(t, ctx) == 1 {
					r := retry("lease held")
					r.Delay = time.Hour
					return r
				}
				return ack("k")
			})})
		MustPublish(t, n.TCP, "billing", "ev")
		if r := Receive(t, resp); r.Verb != nsq.VerbRequeue || r.Delay != 50*time.Millisecond {
			t.Fatalf("response %+v, want REQ capped at 50ms", r)
		}
		if r := Receive(t, resp); r.Verb != nsq.VerbFinish {
			t.Fatalf("response %+v", r)
		}
	})

	t.Run("DeadLetter", func(t *testing.T) {
		n := MustNSQD(t, nil)
		dead := Subscribe(t, n.TCP, "billing.dead")
		hook, resp := Responses()
		MustOpen(t, &nsq.Worker{Topic: "billing", NSQDAddrs: []string{n.TCP}, OnResponse: hook,
			Handler: nsq.HandlerFunc(func(ctx context.Context, body []byte) billing.Result {
				return billing.Result{Outcome: billing.OutcomeMalformed, Action: billing.ActionDeadLetter, Reason: "malformed event: amount: not an integer"}
			})})
		MustPublish(t, n.TCP, "billing", `{"amount":"12"}`)
		d := MustDeadLetter(t, dead)
		if d.Reason != "malformed event: amount: not an integer" || d.Outcome != billing.OutcomeMalformed || d.Attempts != 1 ||
			d.Topic != "billing" || d.Channel != "billing" || d.Body != `{"amount":"12"}` || d.BodyBase64 != "" || len(d.MessageID) != 32 || d.NSQD != n.TCP {
			t.Fatalf("dead letter %+v", d)
		}
		if r := Receive(t, resp); r.Verb != nsq.VerbDeadLetter || r.Err != nil {
			t.Fatalf("response %+v", r)
		}
		Eventually(t, "the message to be finished", func() bool {
			c := n.Channel("billing", "billing")
			return c.Depth == 0 && c.InFlightCount == 0 && c.DeferredCount == 0
		})
	})

	t.Run("DeadLetterBinaryBody", func(t *testing.T) {
		n := MustNSQD(t, nil)
		dead := Subscribe(t, n.TCP, "billing.dead")
		MustOpen(t, &nsq.Worker{Topic: "billing", NSQDAddrs: []string{n.TCP},
			Handler: nsq.HandlerFunc(func(ctx context.Context, body []byte) billing.Result {
				return billing.Result{Outcome: billing.OutcomeMalformed, Action: billing.ActionDeadLetter, Reason: "not UTF-8"}
			})})
		MustPublish(t, n.TCP, "billing", "\xff\xfe{")
		d := MustDeadLetter(t, dead)
		body, err := d.OriginalBody()
		if err != nil || string(body) != "\xff\xfe{" || d.Body != "" {
			t.Fatalf("dead letter %+v: body %q, %v", d, body, err)
		}
	})

	t.Run("RetryExhausted", func(t *testing.T) {
		n := MustNSQD(t, nil)
		dead := Subscribe(t, n.TCP, "billing.failed")
		hook, resp := Responses()
		MustOpen(t, &nsq.Worker{Topic: "billing", NSQDAddrs: []string{n.TCP}, OnResponse: hook, MaxAttempts: 3, DeadLetterTopic: "billing.failed",
			Handler: nsq.HandlerFunc(func(ctx context.Context, body []byte) billing.Result {
				r := retry("stripe 500")
				r.Key = "key-1"
				return r
			})})
		MustPublish(t, n.TCP, "billing", "ev")
		d := MustDeadLetter(t, dead)
		if d.Attempts != 3 || d.Key != "key-1" || d.Outcome != billing.OutcomeTransient || d.Reason != "gave up after 3 attempts: stripe 500" {
			t.Fatalf("dead letter %+v", d)
		}
		verbs := []nsq.Verb{Receive(t, resp).Verb, Receive(t, resp).Verb, Receive(t, resp).Verb}
		if verbs[0] != nsq.VerbRequeue || verbs[1] != nsq.VerbRequeue || verbs[2] != nsq.VerbDeadLetter {
			t.Fatalf("verbs %v", verbs)
		}
	})

	t.Run("DeadLetterPublishFailsRequeues", func(t *testing.T) {
		n := MustNSQD(t, nil)
		dead := Subscribe(t, n.TCP, "billing.dead")
		hook, resp := Responses()
		real, err := nsq.NewPublisher([]string{n.TCP}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer real.Close()
		pub := &flakyPublisher{fail: 2, next: real}
		MustOpen(t, &nsq.Worker{Topic: "billing", NSQDAddrs: []string{n.TCP}, OnResponse: hook, Producer: pub, MaxAttempts: 2,
			Handler: nsq.HandlerFunc(func(ctx context.Context, body []byte) billing.Result {
				return billing.Result{Outcome: billing.OutcomeFailed, Action: billing.ActionDeadLetter, Reason: "idempotency_error"}
			})})
		MustPublish(t, n.TCP, "billing", "ev")
		for i := 1; i <= 2; i++ {
			if r := Receive(t, resp); r.Verb != nsq.VerbRequeue || r.Err == nil {
				t.Fatalf("response %d: %+v, want REQ after a failed publish", i, r)
			}
		}
		if r := Receive(t, resp); r.Verb != nsq.VerbDeadLetter || r.Delivery.Attempts != 3 {
			t.Fatalf("response %+v", r)
		}
		if d := MustDeadLetter(t, dead); d.Reason != "idempotency_error" || d.Attempts != 3 {
			t.Fatalf("dead letter %+v", d)
		}
	})

	t.Run("SlowHandlerTouched", func(t *testing.T) {
		n := MustNSQD(t, func(o *nsqd.Options) { o.MsgTimeout = time.Second })
		hook, resp := Responses()
		MustOpen(t, &nsq.Worker{Topic: "billing", NSQDAddrs: []string{n.TCP}, OnResponse: hook, MsgTimeout: time.Second,
			Handler: nsq.HandlerFunc(func(ctx context.Context, body []byte) billing.Result {
				// A Stripe call slower than the message timeout.
				<-time.After(2500 * time.Millisecond)
				return ack("k")
			})})
		MustPublish(t, n.TCP, "billing", "ev")
		if r := Receive(t, resp); r.Verb != nsq.VerbFinish || r.Delivery.Attempts != 1 {
			t.Fatalf("response %+v", r)
		}
		if c := n.Channel("billing", "billing"); c.TimeoutCount != 0 || c.RequeueCount != 0 {
			t.Fatalf("nsqd timed the message out %d times, requeued %d", c.TimeoutCount, c.RequeueCount)
		}
	})

	t.Run("CloseWaitsForInFlight", func(t *testing.T) {
		n := MustNSQD(t, nil)
		started, release := make(chan struct{}), make(chan struct{})
		w := MustOpen(t, &nsq.Worker{Topic: "billing", NSQDAddrs: []string{n.TCP},
			Handler: nsq.HandlerFunc(func(ctx context.Context, body []byte) billing.Result {
				close(started)
				<-release
				return ack("k")
			})})
		MustPublish(t, n.TCP, "billing", "ev")
		Receive(t, started)
		closed := make(chan error)
		go func() { closed <- w.Close() }()
		// Close cannot return while the handler is blocked.
		select {
		case err := <-closed:
			t.Fatalf("Close returned %v with a handler in flight", err)
		default:
		}
		close(release)
		if err := Receive(t, closed); err != nil {
			t.Fatal(err)
		}
		if s := w.Stats(); s.Acked != 1 {
			t.Fatalf("stats %+v", s)
		}
		Eventually(t, "the message to be finished", func() bool {
			c := n.Channel("billing", "billing")
			return c.Depth == 0 && c.InFlightCount == 0 && c.DeferredCount == 0 && c.RequeueCount == 0
		})
	})

	t.Run("PanicRetries", func(t *testing.T) {
		n := MustNSQD(t, nil)
		hook, resp := Responses()
		var once sync.Once
		MustOpen(t, &nsq.Worker{Topic: "billing", NSQDAddrs: []string{n.TCP}, OnResponse: hook,
			Handler: nsq.HandlerFunc(func(ctx context.Context, body []byte) billing.Result {
				once.Do(func() { panic("boom") })
				return ack("k")
			})})
		MustPublish(t, n.TCP, "billing", "ev")
		if r := Receive(t, resp); r.Verb != nsq.VerbRequeue || !strings.Contains(r.Result.Reason, "boom") {
			t.Fatalf("response %+v", r)
		}
		if r := Receive(t, resp); r.Verb != nsq.VerbFinish {
			t.Fatalf("response %+v", r)
		}
	})
}

func TestWorkerOpenErrors(t *testing.T) {
	h := nsq.HandlerFunc(func(context.Context, []byte) billing.Result { return ack("") })
	for _, tc := range []struct {
		name string
		w    *nsq.Worker
		want string
	}{
		{"ErrNoHandler", &nsq.Worker{Topic: "t", Channel: "c", NSQDAddrs: []string{"127.0.0.1:1"}}, "Handler"},
		{"ErrTopic", &nsq.Worker{Topic: "bad topic", Channel: "c", NSQDAddrs: []string{"127.0.0.1:1"}, Handler: h}, "Topic"},
		{"ErrChannel", &nsq.Worker{Topic: "t", Channel: "", NSQDAddrs: []string{"127.0.0.1:1"}, Handler: h}, "Channel"},
		{"ErrDeadLetterTopic", &nsq.Worker{Topic: "t", Channel: "c", DeadLetterTopic: "t", NSQDAddrs: []string{"127.0.0.1:1"}, Handler: h}, "DeadLetterTopic"},
		{"ErrNoAddrs", &nsq.Worker{Topic: "t", Channel: "c", Handler: h}, "NSQDAddrs or LookupdAddrs"},
		{"ErrBothAddrs", &nsq.Worker{Topic: "t", Channel: "c", NSQDAddrs: []string{"a:1"}, LookupdAddrs: []string{"b:2"}, Handler: h}, "not both"},
		{"ErrMsgTimeout", &nsq.Worker{Topic: "t", Channel: "c", NSQDAddrs: []string{"a:1"}, MsgTimeout: time.Millisecond, Handler: h}, "MsgTimeout"},
		{"ErrUnreachable", &nsq.Worker{Topic: "t", Channel: "c", NSQDAddrs: []string{"127.0.0.1:1"}, Handler: h}, "connect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.w.Open()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open: %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// flakyPublisher fails its first fail publishes.
type flakyPublisher struct {
	mu   sync.Mutex
	fail int
	next nsq.DeadLetterPublisher
}

func (p *flakyPublisher) Publish(topic string, body []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail > 0 {
		p.fail--
		return errors.New("nsqd unreachable")
	}
	return p.next.Publish(topic, body)
}
