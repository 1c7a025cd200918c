package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/keybrake/keybrake/billing"
)

// transport is a message broker that `keybrake worker` consumes billing
// events from and `keybrake publish` publishes them to. Each transport
// registers itself by name from an init function in a file of its own
// (transport_nsq.go, …), so adding one touches no other file.
//
// Lifecycle: flags registers the transport's own flags on the command's
// FlagSet before parsing (every transport's flags are registered, since the
// --transport value is not known yet); after parsing, the command calls
// validate on the chosen transport's options, then consume or publisher.
type transport struct {
	summary string
	flags   func(fs *flag.FlagSet, env Env) transportOptions
}

// transports lists the transports by --transport name.
var transports = map[string]transport{}

// transportOptions are one transport's parsed flags.
type transportOptions interface {
	// validate returns an error naming the first bad flag; publishing
	// tells whether the options are for `keybrake publish`.
	validate(publishing bool) error
	// consume starts consuming c.Topic and returns once consuming; Close
	// on the result stops taking messages and waits for the in-flight ones.
	consume(ctx context.Context, c consumeConfig) (io.Closer, error)
	// publisher connects a publisher.
	publisher(ctx context.Context, logger *slog.Logger) (eventPublisher, error)
}

// billingHandler is what a transport hands each message body to;
// billing.Processor implements it.
type billingHandler interface {
	Process(ctx context.Context, body []byte) billing.Result
}

// consumeConfig is the transport-independent part of a consumer.
type consumeConfig struct {
	Topic           string
	Channel         string // NSQ channel, JetStream durable consumer name, …
	DeadLetterTopic string
	MaxAttempts     int
	Concurrency     int
	AckTimeout      time.Duration // NSQ msg-timeout, JetStream AckWait, …
	Handler         billingHandler
	Logger          *slog.Logger
}

// eventPublisher publishes message bodies to a topic.
type eventPublisher interface {
	// Publish returns nil once the broker has every body.
	Publish(ctx context.Context, topic string, bodies [][]byte) error
	Close() error
}

// transportNames returns the registered transports, sorted, for help texts.
func transportNames() string {
	names := make([]string, 0, len(transports))
	for name := range transports {
		names = append(names, name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// transportFlags registers --transport and every transport's flags on fs.
// The returned function, called after fs.Parse, returns the chosen
// transport's validated options.
func transportFlags(fs *flag.FlagSet, env Env, publishing bool) func() (string, transportOptions, error) {
	name := fs.String("transport", envDefault(env, "KEYBRAKE_TRANSPORT", "nsq"), "message broker: "+transportNames()+" (KEYBRAKE_TRANSPORT)")
	opts := map[string]transportOptions{}
	names := make([]string, 0, len(transports))
	for n := range transports {
		names = append(names, n)
	}
	sort.Strings(names) // a stable flag order for --help
	for _, n := range names {
		opts[n] = transports[n].flags(fs, env)
	}
	return func() (string, transportOptions, error) {
		o, ok := opts[*name]
		if !ok {
			return "", nil, fmt.Errorf("invalid --transport (KEYBRAKE_TRANSPORT) %q: want one of %s", *name, transportNames())
		}
		if err := o.validate(publishing); err != nil {
			return "", nil, err
		}
		return *name, o, nil
	}
}

// listFlag is a repeatable flag that also takes comma-separated lists; its
// default comes from an environment variable, which the first use of the
// flag replaces.
type listFlag struct {
	values []string
	set    bool
}

func newListFlag(env Env, name string) *listFlag {
	l := &listFlag{}
	l.values = splitList(env.Getenv(name))
	return l
}

// String implements flag.Value.
func (l *listFlag) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(l.values, ",")
}

// Set implements flag.Value.
func (l *listFlag) Set(v string) error {
	if !l.set {
		l.values, l.set = nil, true
	}
	l.values = append(l.values, splitList(v)...)
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
