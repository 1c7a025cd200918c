package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/billing"
	"github.com/keybrake/keybrake/zmq"
)

// ZeroMQ has no broker: each pattern is a pair of socket types, the worker
// side for `keybrake worker` and the producer side for `keybrake publish`.
// The six names share one set of flags (registered once per FlagSet), and
// each refuses the command it does not serve, naming its counterpart.
var zmqKinds = []struct {
	name, peer string
	worker     bool
	summary    string
}{
	{"zmq-rep", "zmq-req", true, "ZeroMQ REP worker for lazy-pirate REQ clients"},
	{"zmq-pull", "zmq-push", true, "ZeroMQ PULL worker pushing acks to the producer"},
	{"zmq-router", "zmq-dealer", true, "ZeroMQ ROUTER worker for DEALER (and REQ) clients"},
	{"zmq-req", "zmq-rep", false, "ZeroMQ lazy-pirate REQ producer"},
	{"zmq-push", "zmq-pull", false, "ZeroMQ PUSH producer resending until acked"},
	{"zmq-dealer", "zmq-router", false, "ZeroMQ DEALER producer"},
}

func init() {
	for _, k := range zmqKinds {
		transports[k.name] = transport{summary: k.summary, flags: func(fs *flag.FlagSet, env Env) transportOptions {
			return &zmqOptions{kind: k.name, peer: k.peer, worker: k.worker, fs: fs, env: env, flags: zmqFlagsOnce(fs, env)}
		}}
	}
}

// zmqFlags are the ZeroMQ flags, shared by the six transports.
type zmqFlags struct {
	bind, connect, ack, namespace *string
	timeout                       *time.Duration
	attempts                      *int
}

// zmqRegistered remembers the flags registered on each FlagSet, since
// transportFlags asks every transport for its flags.
var zmqRegistered sync.Map // *flag.FlagSet → *zmqFlags

// zmqFlagsOnce registers the ZeroMQ flags on fs the first time and returns
// them.
func zmqFlagsOnce(fs *flag.FlagSet, env Env) *zmqFlags {
	if f, ok := zmqRegistered.Load(fs); ok {
		return f.(*zmqFlags)
	}
	f := &zmqFlags{
		bind:      fs.String("bind", envDefault(env, "KEYBRAKE_ZMQ_BIND", ""), "zmq: endpoint to bind, e.g. tcp://0.0.0.0:5555 (workers; zmq-push binds it for connecting workers) (KEYBRAKE_ZMQ_BIND)"),
		connect:   fs.String("connect", envDefault(env, "KEYBRAKE_ZMQ_CONNECT", ""), "zmq: endpoint to connect to, e.g. tcp://billing-worker:5555 (producers; workers behind a broker or a binding zmq-push) (KEYBRAKE_ZMQ_CONNECT)"),
		ack:       fs.String("ack-endpoint", envDefault(env, "KEYBRAKE_ZMQ_ACK_ENDPOINT", ""), "zmq-pull/zmq-push: the producer's ack endpoint, which zmq-push binds and zmq-pull connects to (KEYBRAKE_ZMQ_ACK_ENDPOINT)"),
		namespace: fs.String("zmq-namespace", envDefault(env, "KEYBRAKE_NAMESPACE", ""), "zmq producers: billing namespace of the keys, the workers' --namespace (KEYBRAKE_NAMESPACE)"),
		timeout:   fs.Duration("zmq-timeout", envDuration(env, "KEYBRAKE_ZMQ_TIMEOUT", zmq.DefaultTimeout), "zmq producers: reply or ack timeout, after which the same envelope is resent (on a new socket) (KEYBRAKE_ZMQ_TIMEOUT)"),
		attempts:  fs.Int("zmq-attempts", envInt(env, "KEYBRAKE_ZMQ_ATTEMPTS", zmq.DefaultMaxAttempts), "zmq producers: sends of one event before giving up (KEYBRAKE_ZMQ_ATTEMPTS)"),
	}
	zmqRegistered.Store(fs, f)
	return f
}

// zmqOptions are the parsed flags of one ZeroMQ transport.
type zmqOptions struct {
	kind, peer string
	worker     bool
	fs         *flag.FlagSet
	env        Env
	flags      *zmqFlags
}

func (o *zmqOptions) validate(publishing bool) error {
	f := o.flags
	zmqRegistered.Delete(o.fs) // parsed: the FlagSet is done with
	switch {
	case publishing && o.worker:
		return fmt.Errorf("invalid --transport (KEYBRAKE_TRANSPORT) %q: it is a worker; publish with %s", o.kind, o.peer)
	case !publishing && !o.worker:
		return fmt.Errorf("invalid --transport (KEYBRAKE_TRANSPORT) %q: it is a producer; run the worker with %s", o.kind, o.peer)
	case *f.bind != "" && *f.connect != "":
		return errors.New("invalid --connect (KEYBRAKE_ZMQ_CONNECT): set --bind or --connect, not both")
	case *f.bind == "" && *f.connect == "":
		return errors.New("invalid --bind (KEYBRAKE_ZMQ_BIND): set --bind or --connect")
	case (o.kind == "zmq-req" || o.kind == "zmq-dealer") && *f.bind != "":
		return fmt.Errorf("invalid --bind (KEYBRAKE_ZMQ_BIND): %s connects to the worker (lazy pirate recreates its socket); use --connect", o.kind)
	case (o.kind == "zmq-pull" || o.kind == "zmq-push") && *f.ack == "":
		return fmt.Errorf("invalid --ack-endpoint (KEYBRAKE_ZMQ_ACK_ENDPOINT): %s needs the producer's ack endpoint", o.kind)
	case o.kind != "zmq-pull" && o.kind != "zmq-push" && *f.ack != "":
		return fmt.Errorf("invalid --ack-endpoint (KEYBRAKE_ZMQ_ACK_ENDPOINT): only zmq-pull and zmq-push use acks, not %s", o.kind)
	}
	for _, ep := range []struct{ flag, env, v string }{
		{"--bind", "KEYBRAKE_ZMQ_BIND", *f.bind}, {"--connect", "KEYBRAKE_ZMQ_CONNECT", *f.connect},
		{"--ack-endpoint", "KEYBRAKE_ZMQ_ACK_ENDPOINT", *f.ack},
	} {
		if err := validEndpoint(ep.v); err != nil {
			return fmt.Errorf("invalid %s (%s) %q: %v", ep.flag, ep.env, ep.v, err)
		}
	}
	if !publishing {
		return nil
	}
	if fl := o.fs.Lookup("namespace"); fl != nil && *f.namespace == "" {
		ns := fl.Value.String() // publish's shared --namespace
		f.namespace = &ns
	}
	if err := billing.ValidateNamespace(*f.namespace); err != nil {
		return fmt.Errorf("invalid --zmq-namespace (KEYBRAKE_NAMESPACE): %s; it must be the workers' --namespace", keybrake.ErrorMessage(err))
	}
	switch {
	case *f.timeout <= 0:
		return errors.New("invalid --zmq-timeout (KEYBRAKE_ZMQ_TIMEOUT): want a positive duration like 10s")
	case *f.attempts < 1:
		return errors.New("invalid --zmq-attempts (KEYBRAKE_ZMQ_ATTEMPTS): want at least 1")
	}
	return nil
}

// validEndpoint accepts "" and the endpoints go-zeromq supports: tcp://host:port
// and ipc://path.
func validEndpoint(ep string) error {
	switch {
	case ep == "":
		return nil
	case strings.HasPrefix(ep, "tcp://"):
		if _, port, err := net.SplitHostPort(strings.TrimPrefix(ep, "tcp://")); err != nil || port == "" {
			return errors.New("want tcp://host:port")
		}
		return nil
	case strings.HasPrefix(ep, "ipc://") && len(ep) > len("ipc://"):
		return nil
	}
	return errors.New("want tcp://host:port or ipc://path")
}

// endpoint returns the endpoint and whether to connect to it.
func (o *zmqOptions) endpoint() (string, bool) {
	if *o.flags.connect != "" {
		return *o.flags.connect, true
	}
	return *o.flags.bind, false
}

// consume opens the worker. The topic, channel, attempts and dead-letter
// topic of consumeConfig have no ZeroMQ meaning: the producer resends, and
// a dead letter is the reply it gets.
func (o *zmqOptions) consume(ctx context.Context, c consumeConfig) (io.Closer, error) {
	ns, err := processorNamespace(c.Handler)
	if err != nil {
		return nil, err
	}
	ep, connect := o.endpoint()
	var w interface {
		Open() error
		Close() error
	}
	switch o.kind {
	case "zmq-rep":
		w = &zmq.RepWorker{Endpoint: ep, Connect: connect, Handler: c.Handler, Namespace: ns, Logger: c.Logger}
	case "zmq-pull":
		w = &zmq.PullWorker{Endpoint: ep, Connect: connect, AckEndpoint: *o.flags.ack, Handler: c.Handler, Namespace: ns,
			Concurrency: c.Concurrency, Logger: c.Logger}
	case "zmq-router":
		w = &zmq.RouterWorker{Endpoint: ep, Connect: connect, Handler: c.Handler, Namespace: ns, Concurrency: c.Concurrency, Logger: c.Logger}
	default:
		return nil, fmt.Errorf("%s is not a worker", o.kind)
	}
	if err := w.Open(); err != nil {
		return nil, err
	}
	return w, nil
}

// processorNamespace returns the namespace the worker's keys are checked
// against: the Processor's (the worker's --namespace).
func processorNamespace(h billingHandler) (string, error) {
	if p, ok := h.(*billing.Processor); ok {
		return p.Namespace, nil
	}
	return "", errors.New("the zmq workers need a billing.Processor to check keys against its namespace")
}

func (o *zmqOptions) publisher(ctx context.Context, logger *slog.Logger) (eventPublisher, error) {
	f := o.flags
	ep, _ := o.endpoint()
	p := &zmqPublisher{namespace: *f.namespace, logger: logger}
	switch o.kind {
	case "zmq-req":
		c := &zmq.ReqClient{Endpoint: ep, Timeout: *f.timeout, MaxAttempts: *f.attempts, Logger: logger}
		p.send, p.close, p.parallel = c.Send, c.Close, 1
	case "zmq-dealer":
		c := &zmq.DealerClient{Endpoint: ep, Timeout: *f.timeout, MaxAttempts: *f.attempts, Logger: logger}
		p.send, p.close, p.parallel = c.Send, c.Close, 16
	case "zmq-push":
		bind := *f.bind != ""
		pr := &zmq.Producer{Endpoint: ep, Bind: bind, AckEndpoint: *f.ack, AckTimeout: *f.timeout, MaxAttempts: *f.attempts, Logger: logger}
		if err := pr.Open(); err != nil {
			return nil, err
		}
		p.send, p.close, p.parallel = pr.Send, pr.Close, 16
	default:
		return nil, fmt.Errorf("%s is not a producer", o.kind)
	}
	return p, nil
}

// zmqPublisher sends each event in its envelope and waits for its final
// reply: for ZeroMQ, "the broker has it" means the worker settled it.
type zmqPublisher struct {
	namespace string
	logger    *slog.Logger
	send      func(context.Context, *zmq.Envelope) (*zmq.Reply, error)
	close     func() error
	parallel  int
}

// Publish sends bodies, parallel at a time; the topic has no ZeroMQ
// meaning. A refused event (dead letter) is an error naming its key and
// reason; a declined one is logged, since the ledger recorded it.
func (p *zmqPublisher) Publish(ctx context.Context, _ string, bodies [][]byte) error {
	errs := make([]error, len(bodies))
	slots := make(chan struct{}, p.parallel)
	var wg sync.WaitGroup
	for i, body := range bodies {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			errs[i] = p.publish(ctx, body)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (p *zmqPublisher) publish(ctx context.Context, body []byte) error {
	ev, err := billing.DecodeEvent(body)
	if err != nil {
		return err
	}
	env, err := zmq.NewEnvelope(p.namespace, ev)
	if err != nil {
		return err
	}
	rep, err := p.send(ctx, env)
	if err != nil {
		return err
	}
	switch rep.Status {
	case zmq.StatusDeadLetter:
		return fmt.Errorf("event %s refused: %s", env.Key, rep.Reason)
	case zmq.StatusDeclined:
		p.logger.Warn("declined", "key", env.Key, "customer_id", ev.CustomerID, "reason", rep.Reason)
	}
	return nil
}

func (p *zmqPublisher) Close() error { return p.close() }
