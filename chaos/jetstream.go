package chaos

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	jsapi "github.com/nats-io/nats.go/jetstream"
)

// natsBroker is an embedded nats-server with JetStream, shared by the runs
// of one harness; each run has its own stream.
type natsBroker struct {
	s  *server.Server
	nc *nats.Conn
	js jsapi.JetStream
}

func (h *harness) jetstream() (*natsBroker, error) {
	if h.nats != nil {
		return h.nats, nil
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: filepath.Join(h.dir, "nats"), NoLog: true, NoSigs: true})
	if err != nil {
		return nil, fmt.Errorf("nats-server: %w", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, errors.New("nats-server: not ready after 10s")
	}
	b := &natsBroker{s: s}
	if b.nc, err = nats.Connect(s.ClientURL(), nats.Name("keybrake-chaos")); err != nil {
		s.Shutdown()
		return nil, err
	}
	if b.js, err = jsapi.New(b.nc); err != nil {
		b.close()
		return nil, err
	}
	h.nats = b
	return b, nil
}

func (b *natsBroker) close() {
	if b.nc != nil {
		b.nc.Close()
	}
	b.s.Shutdown()
	b.s.WaitForShutdown()
}

// jsSpec is how a mode uses JetStream.
type jsSpec int

const (
	// jsAckWaitSpec: one durable, AckWait shorter than the slow calls,
	// four pull workers; nobody sends InProgress.
	jsAckWaitSpec jsSpec = iota
	// jsTwoDurablesSpec: two durables on the same subject, as during a
	// rollout from billing-worker-v1 to -v2.
	jsTwoDurablesSpec
	// jsRecreateSpec: the durable is deleted after every event was acked,
	// and recreated with DeliverPolicy all.
	jsRecreateSpec
)

// jsRun drives one run on JetStream.
type jsRun struct {
	r       *run
	b       *natsBroker
	stream  string
	subject string
	wg      sync.WaitGroup
}

// driveJetStream publishes every event to a fresh stream and consumes it
// with the seed's pull workers: fetch, run the strategy's worker, then Ack
// (or Nak with a delay for a retry), never InProgress.
func driveJetStream(ctx context.Context, r *run, spec jsSpec) error {
	b, err := r.h.jetstream()
	if err != nil {
		return err
	}
	d := &jsRun{r: r, b: b, stream: "CHAOS_" + r.name, subject: "chaos." + r.name + ".events"}
	st, err := b.js.CreateStream(ctx, jsapi.StreamConfig{Name: d.stream, Subjects: []string{d.subject}, Storage: jsapi.MemoryStorage})
	if err != nil {
		return fmt.Errorf("create stream: %w", err)
	}
	defer b.js.DeleteStream(context.WithoutCancel(ctx), d.stream)
	if err := d.publish(ctx); err != nil {
		return err
	}
	workers, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		d.wg.Wait()
	}()
	switch spec {
	case jsAckWaitSpec:
		cons, err := d.consumer(ctx, st, "billing-worker", jsapi.DeliverAllPolicy)
		if err != nil {
			return err
		}
		d.start(workers, cons, 16)
		if err := r.waitFor(ctx, "every event to be settled", r.allSettled); err != nil {
			return err
		}
		return r.quiet(ctx, "the consumer to have nothing pending", func() bool { return d.idle(ctx, cons) })
	case jsTwoDurablesSpec:
		v1, err := d.consumer(ctx, st, "billing-worker-v1", jsapi.DeliverAllPolicy)
		if err != nil {
			return err
		}
		v2, err := d.consumer(ctx, st, "billing-worker-v2", jsapi.DeliverAllPolicy)
		if err != nil {
			return err
		}
		d.start(workers, v1, 2)
		d.start(workers, v2, 2)
		if err := r.waitFor(ctx, "every event to be settled on both durables", r.allSettled); err != nil {
			return err
		}
		return r.quiet(ctx, "both consumers to have nothing pending", func() bool { return d.idle(ctx, v1) && d.idle(ctx, v2) })
	case jsRecreateSpec:
		cons, err := d.consumer(ctx, st, "billing-worker", jsapi.DeliverAllPolicy)
		if err != nil {
			return err
		}
		first, stop := context.WithCancel(workers)
		d.start(first, cons, 4)
		if err := r.waitFor(ctx, "every event to be charged once", func() bool { return r.settledTimes(1) }); err != nil {
			stop()
			return err
		}
		if err := r.quiet(ctx, "the consumer to have nothing pending", func() bool { return d.idle(ctx, cons) }); err != nil {
			stop()
			return err
		}
		stop()
		d.wg.Wait()
		// A cleanup job deletes the durable; the next deploy recreates it
		// without a start policy: DeliverPolicy all, the NATS default.
		if err := st.DeleteConsumer(ctx, "billing-worker"); err != nil {
			return fmt.Errorf("delete consumer: %w", err)
		}
		cons, err = d.consumer(ctx, st, "billing-worker", jsapi.DeliverAllPolicy)
		if err != nil {
			return err
		}
		d.start(workers, cons, 4)
		if err := r.waitFor(ctx, "every event to be settled again", r.allSettled); err != nil {
			return err
		}
		return r.quiet(ctx, "the recreated consumer to have nothing pending", func() bool { return d.idle(ctx, cons) })
	}
	return fmt.Errorf("unknown jetstream spec %d", spec)
}

func (d *jsRun) publish(ctx context.Context) error {
	futures := make([]jsapi.PubAckFuture, 0, len(d.r.events))
	for _, ev := range d.r.events {
		f, err := d.b.js.PublishAsync(d.subject, ev.body)
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("publish: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (d *jsRun) consumer(ctx context.Context, st jsapi.Stream, name string, policy jsapi.DeliverPolicy) (jsapi.Consumer, error) {
	cons, err := st.CreateOrUpdateConsumer(ctx, jsapi.ConsumerConfig{Durable: name, AckPolicy: jsapi.AckExplicitPolicy,
		AckWait: jsAckWait, MaxDeliver: -1, DeliverPolicy: policy, FilterSubject: d.subject, MaxAckPending: 1000})
	if err != nil {
		return nil, fmt.Errorf("create consumer %s: %w", name, err)
	}
	return cons, nil
}

// start runs n pull workers on cons until ctx ends.
func (d *jsRun) start(ctx context.Context, cons jsapi.Consumer, n int) {
	for range n {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			for ctx.Err() == nil {
				fctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				msg, err := cons.Next(jsapi.FetchContext(fctx))
				cancel()
				if err != nil {
					continue
				}
				d.handle(ctx, msg)
			}
		}()
	}
}

// handle is the seed's loop body: charge, then ack.
func (d *jsRun) handle(ctx context.Context, msg jsapi.Msg) {
	v := d.r.process(ctx, msg.Data(), "")
	switch v.kind {
	case ack:
		msg.Ack()
	case retry:
		msg.NakWithDelay(min(v.delay, 2*time.Second))
	case crash:
		// No answer: the server redelivers after AckWait.
	}
}

// idle reports whether cons has nothing pending or unacknowledged.
func (d *jsRun) idle(ctx context.Context, cons jsapi.Consumer) bool {
	info, err := cons.Info(ctx)
	return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0
}
