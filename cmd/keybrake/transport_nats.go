package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	jsapi "github.com/nats-io/nats.go/jetstream"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/billing"
	"github.com/keybrake/keybrake/jetstream"
)

func init() {
	transports["jetstream"] = transport{summary: "NATS JetStream (durable pull consumer)", flags: func(fs *flag.FlagSet, env Env) transportOptions {
		return &natsTransport{natsOptions: natsFlags(fs, env), jetstream: true}
	}}
	transports["nats"] = transport{summary: "Core NATS (queue group; no redelivery, prefer jetstream)", flags: func(fs *flag.FlagSet, env Env) transportOptions {
		return &natsTransport{natsOptions: natsFlags(fs, env)}
	}}
}

// natsOptions are the flags shared by the jetstream and nats transports,
// registered once per FlagSet.
type natsOptions struct {
	fs                *flag.FlagSet
	env               Env
	url               string
	stream            string
	subject           string
	durable           string
	deliverPolicy     string
	startSequence     uint64
	startTime         string
	queue             string
	ackWait           time.Duration
	maxDeliver        int
	deadLetterSubject string
	deadLetterStream  string
	duplicates        time.Duration
	monitorURL        string

	start  jetstream.StartPolicy
	envErr error
}

var (
	natsFlagsMu sync.Mutex
	natsFlagSet = map[*flag.FlagSet]*natsOptions{}
)

// natsFlags registers the NATS flags on fs, once.
func natsFlags(fs *flag.FlagSet, env Env) *natsOptions {
	natsFlagsMu.Lock()
	defer natsFlagsMu.Unlock()
	if o := natsFlagSet[fs]; o != nil {
		return o
	}
	o := &natsOptions{fs: fs, env: env}
	natsFlagSet[fs] = o
	fs.StringVar(&o.url, "nats-url", envDefault(env, "KEYBRAKE_NATS_URL", nats.DefaultURL), "nats, jetstream: server URLs, comma-separated (KEYBRAKE_NATS_URL)")
	fs.StringVar(&o.subject, "subject", envDefault(env, "KEYBRAKE_NATS_SUBJECT", ""), "nats, jetstream: subject of the billing events; default --topic (KEYBRAKE_NATS_SUBJECT)")
	fs.StringVar(&o.deadLetterSubject, "dead-letter-subject", envDefault(env, "KEYBRAKE_DEAD_LETTER_SUBJECT", ""), "nats, jetstream: subject of the dead letters; default --dead-letter-topic (KEYBRAKE_DEAD_LETTER_SUBJECT)")
	fs.StringVar(&o.stream, "stream", envDefault(env, "KEYBRAKE_STREAM", "BILLING"), "jetstream: stream of the billing subject, created if missing (KEYBRAKE_STREAM)")
	fs.StringVar(&o.deadLetterStream, "dead-letter-stream", envDefault(env, "KEYBRAKE_DEAD_LETTER_STREAM", ""), "jetstream: stream of the dead letters, created if missing; default <stream>_DEAD (KEYBRAKE_DEAD_LETTER_STREAM)")
	fs.DurationVar(&o.duplicates, "duplicate-window", envDuration(env, "KEYBRAKE_DUPLICATE_WINDOW", 2*time.Minute), "jetstream: duplicate window (Nats-Msg-Id) of streams created by keybrake (KEYBRAKE_DUPLICATE_WINDOW)")
	fs.StringVar(&o.durable, "durable", envDefault(env, "KEYBRAKE_DURABLE", ""), "jetstream: durable consumer shared by all workers; default --channel (KEYBRAKE_DURABLE)")
	fs.StringVar(&o.deliverPolicy, "deliver-policy", envDefault(env, "KEYBRAKE_DELIVER_POLICY", ""), "jetstream: where a MISSING durable with no recorded ack floor starts: new, all, last, last_per_subject, by_start_sequence or by_start_time; unset = refuse to start rather than replay (KEYBRAKE_DELIVER_POLICY)")
	fs.Uint64Var(&o.startSequence, "start-sequence", o.envUint("KEYBRAKE_START_SEQUENCE", 0), "jetstream: stream sequence for --deliver-policy by_start_sequence (KEYBRAKE_START_SEQUENCE)")
	fs.StringVar(&o.startTime, "start-time", envDefault(env, "KEYBRAKE_START_TIME", ""), "jetstream: RFC 3339 time for --deliver-policy by_start_time (KEYBRAKE_START_TIME)")
	fs.DurationVar(&o.ackWait, "ack-wait", envDuration(env, "KEYBRAKE_ACK_WAIT", 0), "jetstream: AckWait of the durable; the worker sends InProgress every third of it; default --msg-timeout (KEYBRAKE_ACK_WAIT)")
	fs.IntVar(&o.maxDeliver, "max-deliver", envInt(env, "KEYBRAKE_MAX_DELIVER", 0), "jetstream: deliveries before dead-lettering; nats: in-process attempts; default --max-attempts (KEYBRAKE_MAX_DELIVER)")
	fs.StringVar(&o.queue, "queue", envDefault(env, "KEYBRAKE_QUEUE", ""), "nats: queue group shared by all workers; default --channel (KEYBRAKE_QUEUE)")
	fs.StringVar(&o.monitorURL, "nats-monitor-url", envDefault(env, "KEYBRAKE_NATS_MONITOR_URL", ""), "nats: the server's HTTP monitoring URL (e.g. http://127.0.0.1:8222), to warn when the subject has plain subscribers (KEYBRAKE_NATS_MONITOR_URL)")
	return o
}

// envUint returns the environment variable as a uint64, def if unset; a
// bad value is kept for validate to refuse, naming the variable.
func (o *natsOptions) envUint(name string, def uint64) uint64 {
	v := envDefault(o.env, name, "")
	if v == "" {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		o.envErr = fmt.Errorf("invalid %s %q: want a stream sequence number", name, v)
		return def
	}
	return n
}

// natsTransport is the jetstream or nats transport.
type natsTransport struct {
	*natsOptions
	jetstream bool
}

func (o *natsTransport) validate(publishing bool) error {
	if o.envErr != nil {
		return o.envErr
	}
	for _, u := range strings.Split(o.url, ",") {
		if pu, err := url.Parse(strings.TrimSpace(u)); err != nil || pu.Host == "" {
			return fmt.Errorf("invalid --nats-url (KEYBRAKE_NATS_URL) %q: want nats://host:port", o.url)
		}
	}
	switch {
	case strings.ContainsAny(o.subject, " \t") || strings.HasSuffix(o.subject, ".") || strings.HasPrefix(o.subject, "."):
		return fmt.Errorf("invalid --subject (KEYBRAKE_NATS_SUBJECT) %q", o.subject)
	case o.ackWait < 0 || o.ackWait > 0 && o.ackWait < time.Second:
		return errors.New("invalid --ack-wait (KEYBRAKE_ACK_WAIT): want a duration of at least 1s, like 60s")
	case o.ackWait < 0:
		return errors.New("invalid --ack-wait (KEYBRAKE_ACK_WAIT): want a duration like 60s")
	case o.maxDeliver < 0:
		return errors.New("invalid --max-deliver (KEYBRAKE_MAX_DELIVER): want at least 1")
	case o.duplicates <= 0:
		return errors.New("invalid --duplicate-window (KEYBRAKE_DUPLICATE_WINDOW): want a positive duration like 2m")
	}
	if !o.jetstream {
		if o.monitorURL != "" {
			if u, err := url.Parse(o.monitorURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
				return fmt.Errorf("invalid --nats-monitor-url (KEYBRAKE_NATS_MONITOR_URL) %q: want http://host:8222", o.monitorURL)
			}
		}
		return nil
	}
	if o.stream == "" || strings.ContainsAny(o.stream, ".*> \t") {
		return fmt.Errorf("invalid --stream (KEYBRAKE_STREAM) %q: a stream name without '.', '*', '>' or spaces", o.stream)
	}
	if strings.ContainsAny(o.durable, ".*> \t") {
		return fmt.Errorf("invalid --durable (KEYBRAKE_DURABLE) %q: a consumer name without '.', '*', '>' or spaces", o.durable)
	}
	o.start = jetstream.StartPolicy{Deliver: o.deliverPolicy, StartSequence: o.startSequence}
	if o.startTime != "" {
		t, err := time.Parse(time.RFC3339, o.startTime)
		if err != nil {
			return fmt.Errorf("invalid --start-time (KEYBRAKE_START_TIME) %q: want RFC 3339 like 2026-11-01T00:00:00Z", o.startTime)
		}
		o.start.StartTime = t
	}
	if err := o.start.Validate(); err != nil {
		return fmt.Errorf("invalid --deliver-policy (KEYBRAKE_DELIVER_POLICY): %v", err)
	}
	return nil
}

// connect connects to the servers, naming the connection after the command.
func (o *natsTransport) connect(name string, logger *slog.Logger) (*nats.Conn, error) {
	nc, err := nats.Connect(o.url, nats.Name(name), nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				logger.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { logger.Info("nats reconnected", "url", nc.ConnectedUrlRedacted()) }))
	if err != nil {
		return nil, fmt.Errorf("connect --nats-url (KEYBRAKE_NATS_URL) %q: %w", o.url, err)
	}
	return nc, nil
}

// ensureStream creates the stream capturing subject if it does not exist;
// an existing stream is left as it is.
func (o *natsTransport) ensureStream(ctx context.Context, js jsapi.JetStream, name, subject string) error {
	_, err := js.Stream(ctx, name)
	if errors.Is(err, jsapi.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, jsapi.StreamConfig{Name: name, Subjects: []string{subject}, Duplicates: o.duplicates,
			Description: "keybrake billing events"})
		if errors.Is(err, jsapi.ErrStreamNameAlreadyInUse) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", name, err)
	}
	return nil
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

func (o *natsTransport) consume(ctx context.Context, c consumeConfig) (io.Closer, error) {
	subject := firstNonEmpty(o.subject, c.Topic)
	dead := firstNonEmpty(o.deadLetterSubject, c.DeadLetterTopic, subject+".dead")
	maxDeliver := c.MaxAttempts
	if o.maxDeliver > 0 {
		maxDeliver = o.maxDeliver
	}
	nc, err := o.connect("keybrake worker", c.Logger)
	if err != nil {
		return nil, err
	}
	js, err := jsapi.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	var w interface {
		Open(context.Context) error
		Close() error
	}
	if o.jetstream {
		if err := o.ensureStream(ctx, js, o.stream, subject); err != nil {
			nc.Close()
			return nil, err
		}
		if err := o.ensureStream(ctx, js, firstNonEmpty(o.deadLetterStream, o.stream+"_DEAD"), dead); err != nil {
			nc.Close()
			return nil, err
		}
		ackWait := c.AckTimeout
		if o.ackWait > 0 {
			ackWait = o.ackWait
		}
		w = &jetstream.Worker{JS: js, Stream: o.stream, Durable: firstNonEmpty(o.durable, c.Channel), Subject: subject,
			Handler: c.Handler, Start: o.start, AckWait: ackWait, MaxDeliver: maxDeliver, DeadLetterSubject: dead,
			Concurrency: c.Concurrency, Logger: c.Logger}
	} else {
		w = &jetstream.QueueWorker{Conn: nc, Subject: subject, Queue: firstNonEmpty(o.queue, c.Channel), Handler: c.Handler,
			DeadLetterSubject: dead, MaxAttempts: maxDeliver, MonitorURL: o.monitorURL, Logger: c.Logger}
	}
	if err := w.Open(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	return closerFunc(func() error {
		err := w.Close()
		nc.Close()
		return err
	}), nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// namespace returns the billing namespace of the Nats-Msg-Id: the command's
// --namespace if it has one, else KEYBRAKE_NAMESPACE.
func (o *natsTransport) namespace() (string, error) {
	ns := o.env.Getenv("KEYBRAKE_NAMESPACE")
	if f := o.fs.Lookup("namespace"); f != nil {
		ns = f.Value.String()
	}
	if err := billing.ValidateNamespace(ns); err != nil {
		return "", fmt.Errorf("invalid --namespace (KEYBRAKE_NAMESPACE): the Nats-Msg-Id is the event's content key, which needs the workers' namespace: %s", keybrake.ErrorMessage(err))
	}
	return ns, nil
}

func (o *natsTransport) publisher(ctx context.Context, logger *slog.Logger) (eventPublisher, error) {
	ns, err := o.namespace()
	if err != nil {
		return nil, err
	}
	nc, err := o.connect("keybrake publish", logger)
	if err != nil {
		return nil, err
	}
	p := &natsPublisher{o: o, nc: nc, ns: ns, logger: logger}
	if o.jetstream {
		if p.js, err = jsapi.New(nc); err != nil {
			nc.Close()
			return nil, err
		}
	}
	return p, nil
}

// natsPublisher publishes through jetstream.Publisher or CorePublisher.
type natsPublisher struct {
	o      *natsTransport
	nc     *nats.Conn
	js     jsapi.JetStream
	ns     string
	logger *slog.Logger
}

func (p *natsPublisher) Publish(ctx context.Context, topic string, bodies [][]byte) error {
	subject := firstNonEmpty(p.o.subject, topic)
	if p.js == nil {
		cp := &jetstream.CorePublisher{Conn: p.nc, Subject: subject, Namespace: p.ns}
		for i, b := range bodies {
			if err := cp.Publish(ctx, b); err != nil {
				return fmt.Errorf("event %d: %w", i+1, err)
			}
		}
		return nil
	}
	if err := p.o.ensureStream(ctx, p.js, p.o.stream, subject); err != nil {
		return err
	}
	jp := &jetstream.Publisher{JS: p.js, Subject: subject, Namespace: p.ns}
	for i, b := range bodies {
		ack, err := jp.Publish(ctx, b)
		if errors.Is(err, jetstream.ErrDuplicate) {
			// Already in the stream: the broker has it, which is all Publish promises.
			p.logger.Warn("duplicate event not stored again (Nats-Msg-Id)", "event", i+1, "stream", ack.Stream, "sequence", ack.Sequence)
			continue
		}
		if err != nil {
			return fmt.Errorf("event %d: %w", i+1, err)
		}
	}
	return nil
}

func (p *natsPublisher) Close() error {
	err := p.nc.Drain()
	p.nc.Close()
	return err
}
