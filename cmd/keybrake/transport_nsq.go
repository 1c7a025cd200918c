package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/keybrake/keybrake/nsq"
)

func init() {
	transports["nsq"] = transport{summary: "NSQ (nsqd, nsqlookupd)", flags: nsqFlags}
}

// nsqOptions are the flags of the NSQ transport.
type nsqOptions struct {
	nsqd    *listFlag
	lookupd *listFlag
}

func nsqFlags(fs *flag.FlagSet, env Env) transportOptions {
	o := &nsqOptions{nsqd: newListFlag(env, "KEYBRAKE_NSQD"), lookupd: newListFlag(env, "KEYBRAKE_NSQLOOKUPD")}
	fs.Var(o.nsqd, "nsqd", "nsq: nsqd TCP address, e.g. 127.0.0.1:4150; repeatable or comma-separated (KEYBRAKE_NSQD)")
	fs.Var(o.lookupd, "lookupd", "nsq: nsqlookupd HTTP address to discover nsqd (worker only), e.g. 127.0.0.1:4161; repeatable or comma-separated (KEYBRAKE_NSQLOOKUPD)")
	return o
}

func (o *nsqOptions) validate(publishing bool) error {
	switch {
	case publishing && len(o.nsqd.values) == 0:
		return fmt.Errorf("invalid --nsqd (KEYBRAKE_NSQD): publish needs at least one nsqd TCP address")
	case publishing && len(o.lookupd.values) > 0:
		return fmt.Errorf("invalid --lookupd (KEYBRAKE_NSQLOOKUPD): publish goes to nsqd directly; use --nsqd")
	case len(o.nsqd.values) == 0 && len(o.lookupd.values) == 0:
		return fmt.Errorf("invalid --nsqd (KEYBRAKE_NSQD): set --nsqd or --lookupd")
	case len(o.nsqd.values) > 0 && len(o.lookupd.values) > 0:
		return fmt.Errorf("invalid --lookupd (KEYBRAKE_NSQLOOKUPD): set --nsqd or --lookupd, not both")
	}
	for _, a := range o.nsqd.values {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("invalid --nsqd (KEYBRAKE_NSQD) %q: want host:port", a)
		}
	}
	for _, a := range o.lookupd.values {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("invalid --lookupd (KEYBRAKE_NSQLOOKUPD) %q: want host:port", a)
		}
	}
	return nil
}

func (o *nsqOptions) consume(ctx context.Context, c consumeConfig) (io.Closer, error) {
	w := &nsq.Worker{
		Topic:           c.Topic,
		Channel:         c.Channel,
		NSQDAddrs:       o.nsqd.values,
		LookupdAddrs:    o.lookupd.values,
		Handler:         c.Handler,
		MaxAttempts:     uint16(c.MaxAttempts),
		DeadLetterTopic: c.DeadLetterTopic,
		MsgTimeout:      c.AckTimeout,
		Concurrency:     c.Concurrency,
		Logger:          c.Logger,
	}
	if err := w.Open(); err != nil {
		return nil, err
	}
	return w, nil
}

func (o *nsqOptions) publisher(ctx context.Context, logger *slog.Logger) (eventPublisher, error) {
	p, err := nsq.NewPublisher(o.nsqd.values, nil, logger)
	if err != nil {
		return nil, err
	}
	if err := p.Ping(); err != nil {
		p.Close()
		return nil, fmt.Errorf("connect --nsqd (KEYBRAKE_NSQD): %w", err)
	}
	return nsqPublisher{p}, nil
}

// nsqPublisher publishes with MPUB.
type nsqPublisher struct{ p *nsq.Publisher }

func (n nsqPublisher) Publish(_ context.Context, topic string, bodies [][]byte) error {
	return n.p.MultiPublish(topic, bodies)
}

func (n nsqPublisher) Close() error { return n.p.Close() }
