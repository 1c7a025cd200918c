package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

func init() {
	commands["publish"] = command{"validate billing events (JSON lines or CSV) and publish them to a broker", runPublish}
}

// Batches of `keybrake publish`: at most this many events, and this many
// bytes (under nsqd's default --max-body-size of 5 MiB).
const (
	publishBatchEvents = 100
	publishBatchBytes  = 1 << 20
)

// PublishConfig is the configuration of `keybrake publish`.
type PublishConfig struct {
	Transport string // --transport, KEYBRAKE_TRANSPORT
	Topic     string // --topic, KEYBRAKE_TOPIC
	Format    string // --format, KEYBRAKE_PUBLISH_FORMAT: jsonl or csv; "" guesses from the file name
	Input     string // the argument: a file, or "-" or nothing for stdin
}

func runPublish(ctx context.Context, args []string, env Env) error {
	var c PublishConfig
	fs := flagSet("publish", `Reads billing events, one JSON object a line (see billing.Event) or CSV with
a header row naming the event's JSON fields (and metadata.<key> columns),
from FILE or stdin, validates every one as the worker will, and publishes
them. Any invalid event stops the run before anything is published, with
the line number and the reason of every bad line. Publishing an event
twice is harmless: the worker charges it once.

Usage: keybrake publish [flags] [FILE|-]`, env)
	chosen := transportFlags(fs, env, true)
	fs.StringVar(&c.Topic, "topic", envDefault(env, "KEYBRAKE_TOPIC", "billing"), "topic to publish to (KEYBRAKE_TOPIC)")
	fs.String("namespace", envDefault(env, "KEYBRAKE_NAMESPACE", ""), "billing namespace of the workers (their --namespace): jetstream, nats and zmq producers put the event's content key, which includes it, on the wire (KEYBRAKE_NAMESPACE)")
	fs.StringVar(&c.Format, "format", envDefault(env, "KEYBRAKE_PUBLISH_FORMAT", ""), "jsonl or csv; default csv for a .csv file, else jsonl (KEYBRAKE_PUBLISH_FORMAT)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return fmt.Errorf("publish takes at most one FILE, got %q", fs.Args())
	}
	if fs.NArg() == 1 {
		c.Input = fs.Arg(0)
	}
	name, opts, err := chosen()
	if err != nil {
		return err
	}
	c.Transport = name
	if c.Topic == "" {
		return errors.New("invalid --topic (KEYBRAKE_TOPIC): empty")
	}
	if c.Format == "" {
		c.Format = "jsonl"
		if strings.EqualFold(filepath.Ext(c.Input), ".csv") {
			c.Format = "csv"
		}
	}
	if c.Format != "jsonl" && c.Format != "csv" {
		return fmt.Errorf("invalid --format (KEYBRAKE_PUBLISH_FORMAT) %q: want jsonl or csv", c.Format)
	}

	in, inName := io.Reader(os.Stdin), "stdin"
	if c.Input != "" && c.Input != "-" {
		f, err := os.Open(c.Input)
		if err != nil {
			return fmt.Errorf("open %s: %w", c.Input, err)
		}
		defer f.Close()
		in, inName = f, c.Input
	}
	events, err := readEvents(in, inName, c.Format)
	if err != nil {
		return fmt.Errorf("nothing published: %w", err)
	}
	logger := newLogger(env, "warn", "text")
	pub, err := opts.publisher(ctx, logger)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	defer pub.Close()
	n, err := publishEvents(ctx, pub, c.Topic, events)
	fmt.Fprintf(env.Stdout, "published %d of %d events to %s topic %s\n", n, len(events), name, c.Topic)
	if err != nil {
		return fmt.Errorf("publish to %s after %d events: %w (publishing again is safe: the worker charges each event once)", c.Topic, n, err)
	}
	return nil
}

// publishEvents publishes events in batches and returns how many the broker
// has.
func publishEvents(ctx context.Context, pub eventPublisher, topic string, events []eventRecord) (int, error) {
	done := 0
	for done < len(events) {
		if err := ctx.Err(); err != nil {
			return done, err
		}
		var batch [][]byte
		size := 0
		for _, e := range events[done:] {
			if len(batch) == publishBatchEvents || (len(batch) > 0 && size+len(e.Body) > publishBatchBytes) {
				break
			}
			batch = append(batch, e.Body)
			size += len(e.Body)
		}
		if err := pub.Publish(ctx, topic, batch); err != nil {
			return done, err
		}
		done += len(batch)
	}
	return done, nil
}
