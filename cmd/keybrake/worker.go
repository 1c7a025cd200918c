package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/billing"
	"github.com/keybrake/keybrake/postgres"
	"github.com/keybrake/keybrake/sqlite"
)

func init() {
	commands["worker"] = command{"consume billing events from a broker and charge each exactly once", runWorker}
}

// WorkerConfig is the configuration of `keybrake worker`. Every field has a
// flag and an environment variable.
type WorkerConfig struct {
	Transport       string        // --transport, KEYBRAKE_TRANSPORT
	Topic           string        // --topic, KEYBRAKE_TOPIC
	Channel         string        // --channel, KEYBRAKE_CHANNEL
	Upstream        string        // --upstream, KEYBRAKE_WORKER_UPSTREAM: keybrake serve (or Stripe), without a path
	VaultKey        string        // --vault-key, KEYBRAKE_VAULT_KEY
	VaultKeyFile    string        // --vault-key-file, KEYBRAKE_VAULT_KEY_FILE
	Ledger          string        // --ledger, KEYBRAKE_LEDGER: a SQLite file path or a postgres:// DSN
	Namespace       string        // --namespace, KEYBRAKE_NAMESPACE
	MaxAttempts     int           // --max-attempts, KEYBRAKE_MAX_ATTEMPTS
	DeadLetterTopic string        // --dead-letter-topic, KEYBRAKE_DEAD_LETTER_TOPIC
	Concurrency     int           // --concurrency, KEYBRAKE_CONCURRENCY
	AckTimeout      time.Duration // --msg-timeout, KEYBRAKE_MSG_TIMEOUT
	Lease           time.Duration // --lease, KEYBRAKE_LEASE
	StripeTimeout   time.Duration // --stripe-timeout, KEYBRAKE_STRIPE_TIMEOUT
	LogLevel        string        // --log-level, KEYBRAKE_LOG_LEVEL
	LogFormat       string        // --log-format, KEYBRAKE_LOG_FORMAT
}

// WorkerMain is `keybrake worker`: ParseFlags, then Run, then Close.
type WorkerMain struct {
	Config WorkerConfig
	Env    Env

	// Processor is the billing processor Run built, for tests.
	Processor *billing.Processor

	transport transportOptions
	ledger    io.Closer
	consumer  io.Closer
	logger    *slog.Logger
}

// NewWorkerMain returns a WorkerMain with the defaults.
func NewWorkerMain(env Env) *WorkerMain {
	return &WorkerMain{Env: env, Config: WorkerConfig{
		Transport:     "nsq",
		Topic:         "billing",
		Channel:       "keybrake",
		Upstream:      "http://127.0.0.1:8080",
		Ledger:        "keybrake-ledger.db",
		MaxAttempts:   10,
		Concurrency:   1,
		AckTimeout:    60 * time.Second,
		Lease:         billing.DefaultLease,
		StripeTimeout: 30 * time.Second,
		LogLevel:      "info",
		LogFormat:     "text",
	}}
}

// ParseFlags reads the environment, then the flags, which win, and
// validates the configuration, naming the first bad field.
func (m *WorkerMain) ParseFlags(args []string) error {
	c, env := &m.Config, m.Env
	fs := flagSet("worker", `Consumes billing events (JSON, see billing.Event) from a broker and charges
each exactly once: a content key from the event's business fields, a ledger
entry claimed before Stripe is called, the same key on every redelivery, and
the vault key's caps at keybrake as the backstop. Acknowledges only once the
ledger holds the outcome; malformed events, conflicts and events still
failing after --max-attempts deliveries go to the dead-letter topic.
Stops on SIGTERM or SIGINT after the in-flight events are done.

Secrets: prefer KEYBRAKE_VAULT_KEY or --vault-key-file to --vault-key, which
other users can read in the process list.`, env)
	chosen := transportFlags(fs, env, false)
	fs.StringVar(&c.Topic, "topic", envDefault(env, "KEYBRAKE_TOPIC", c.Topic), "topic (subject, stream) of the billing events (KEYBRAKE_TOPIC)")
	fs.StringVar(&c.Channel, "channel", envDefault(env, "KEYBRAKE_CHANNEL", c.Channel), "NSQ channel (durable consumer name) shared by the workers of one billing stream (KEYBRAKE_CHANNEL)")
	fs.StringVar(&c.Upstream, "upstream", envDefault(env, "KEYBRAKE_WORKER_UPSTREAM", c.Upstream), "base URL of keybrake serve (or of Stripe), without a path (KEYBRAKE_WORKER_UPSTREAM)")
	fs.StringVar(&c.VaultKey, "vault-key", envDefault(env, "KEYBRAKE_VAULT_KEY", ""), "the vault key to charge with (KEYBRAKE_VAULT_KEY)")
	fs.StringVar(&c.VaultKeyFile, "vault-key-file", envDefault(env, "KEYBRAKE_VAULT_KEY_FILE", ""), "file holding the vault key (KEYBRAKE_VAULT_KEY_FILE)")
	fs.StringVar(&c.Ledger, "ledger", envDefault(env, "KEYBRAKE_LEDGER", c.Ledger), "billing ledger: a SQLite file path, or a postgres:// DSN shared by several workers (KEYBRAKE_LEDGER)")
	fs.StringVar(&c.Namespace, "namespace", envDefault(env, "KEYBRAKE_NAMESPACE", ""), "billing namespace, part of every idempotency key: 1-64 letters, digits, '_' or '-'; never change it for a stream (KEYBRAKE_NAMESPACE)")
	fs.IntVar(&c.MaxAttempts, "max-attempts", envInt(env, "KEYBRAKE_MAX_ATTEMPTS", c.MaxAttempts), "deliveries after which an event still failing goes to the dead-letter topic (KEYBRAKE_MAX_ATTEMPTS)")
	fs.StringVar(&c.DeadLetterTopic, "dead-letter-topic", envDefault(env, "KEYBRAKE_DEAD_LETTER_TOPIC", ""), "topic of the dead letters; default <topic>.dead (KEYBRAKE_DEAD_LETTER_TOPIC)")
	fs.IntVar(&c.Concurrency, "concurrency", envInt(env, "KEYBRAKE_CONCURRENCY", c.Concurrency), "events processed at once (KEYBRAKE_CONCURRENCY)")
	fs.DurationVar(&c.AckTimeout, "msg-timeout", envDuration(env, "KEYBRAKE_MSG_TIMEOUT", c.AckTimeout), "broker's redelivery timeout of an unacknowledged message; the worker keeps busy messages alive (KEYBRAKE_MSG_TIMEOUT)")
	fs.DurationVar(&c.Lease, "lease", envDuration(env, "KEYBRAKE_LEASE", c.Lease), "how long a claim holds a ledger entry, extended while Stripe is called; a dead worker's entry is taken over after it (KEYBRAKE_LEASE)")
	fs.DurationVar(&c.StripeTimeout, "stripe-timeout", envDuration(env, "KEYBRAKE_STRIPE_TIMEOUT", c.StripeTimeout), "timeout of one charge request (KEYBRAKE_STRIPE_TIMEOUT)")
	fs.StringVar(&c.LogLevel, "log-level", envDefault(env, "KEYBRAKE_LOG_LEVEL", c.LogLevel), "debug, info, warn or error (KEYBRAKE_LOG_LEVEL)")
	fs.StringVar(&c.LogFormat, "log-format", envDefault(env, "KEYBRAKE_LOG_FORMAT", c.LogFormat), "text or json (KEYBRAKE_LOG_FORMAT)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("worker takes no arguments, got %q", fs.Args())
	}
	name, opts, err := chosen()
	if err != nil {
		return err
	}
	c.Transport, m.transport = name, opts
	return m.validate()
}

// envInt returns the environment variable as an int, def if unset, or -1
// (refused with the field named by validate) if it is not a number.
func envInt(env Env, name string, def int) int {
	v := envDefault(env, name, "")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return -1
	}
	return n
}

// validate checks the configuration and names the first bad field.
func (m *WorkerMain) validate() error {
	c := &m.Config
	if c.Topic == "" {
		return errors.New("invalid --topic (KEYBRAKE_TOPIC): empty")
	}
	if c.Channel == "" {
		return errors.New("invalid --channel (KEYBRAKE_CHANNEL): empty")
	}
	if c.DeadLetterTopic == "" {
		c.DeadLetterTopic = c.Topic + ".dead"
	}
	if c.DeadLetterTopic == c.Topic {
		return fmt.Errorf("invalid --dead-letter-topic (KEYBRAKE_DEAD_LETTER_TOPIC) %q: must differ from --topic", c.DeadLetterTopic)
	}
	u, err := url.Parse(c.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("invalid --upstream (KEYBRAKE_WORKER_UPSTREAM) %q: want an http(s) URL like http://127.0.0.1:8080", c.Upstream)
	}
	if strings.Trim(u.Path, "/") != "" || u.RawQuery != "" {
		return fmt.Errorf("invalid --upstream (KEYBRAKE_WORKER_UPSTREAM) %q: give the base URL without a path (the Stripe client adds /v1/…)", c.Upstream)
	}
	if c.VaultKeyFile != "" {
		if c.VaultKey != "" {
			return errors.New("both --vault-key (KEYBRAKE_VAULT_KEY) and --vault-key-file are set; use one")
		}
		b, err := os.ReadFile(c.VaultKeyFile)
		if err != nil {
			return fmt.Errorf("invalid --vault-key-file (KEYBRAKE_VAULT_KEY_FILE): %v", err)
		}
		c.VaultKey = strings.TrimSpace(string(b))
	}
	if c.VaultKey == "" {
		return errors.New("invalid --vault-key (KEYBRAKE_VAULT_KEY): required; create one with POST /vault/keys on keybrake serve")
	}
	if c.Ledger == "" {
		return errors.New("invalid --ledger (KEYBRAKE_LEDGER): empty")
	}
	if err := billing.ValidateNamespace(c.Namespace); err != nil {
		return fmt.Errorf("invalid --namespace (KEYBRAKE_NAMESPACE): %s", keybrake.ErrorMessage(err))
	}
	switch {
	case c.MaxAttempts < 1 || c.MaxAttempts > 65535:
		return errors.New("invalid --max-attempts (KEYBRAKE_MAX_ATTEMPTS): want 1 to 65535")
	case c.Concurrency < 1:
		return errors.New("invalid --concurrency (KEYBRAKE_CONCURRENCY): want at least 1")
	case c.AckTimeout < time.Second:
		return errors.New("invalid --msg-timeout (KEYBRAKE_MSG_TIMEOUT): want a duration of at least 1s, like 60s")
	case c.Lease < time.Second:
		return errors.New("invalid --lease (KEYBRAKE_LEASE): want a duration of at least 1s, like 60s")
	case c.StripeTimeout <= 0:
		return errors.New("invalid --stripe-timeout (KEYBRAKE_STRIPE_TIMEOUT): want a positive duration like 30s")
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return fmt.Errorf("invalid --log-format (KEYBRAKE_LOG_FORMAT) %q: want text or json", c.LogFormat)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return fmt.Errorf("invalid --log-level (KEYBRAKE_LOG_LEVEL) %q: want debug, info, warn or error", c.LogLevel)
	}
	return nil
}

// Run opens the ledger, builds the Processor and starts consuming.
func (m *WorkerMain) Run(ctx context.Context) error {
	c := &m.Config
	m.logger = newLogger(m.Env, c.LogLevel, c.LogFormat)
	ledger, closer, err := openLedger(ctx, c.Ledger)
	if err != nil {
		return err
	}
	m.ledger = closer
	host, _ := os.Hostname()
	m.Processor = &billing.Processor{
		Ledger: ledger,
		Charger: &billing.StripeCharger{BaseURL: strings.TrimSuffix(c.Upstream, "/"), Key: c.VaultKey,
			HTTPClient: billing.HTTPClient(c.StripeTimeout)},
		Namespace: c.Namespace,
		Owner:     fmt.Sprintf("%s/%d", host, os.Getpid()),
		Lease:     c.Lease,
		Logger:    m.logger.With("component", "billing"),
	}
	m.consumer, err = m.transport.consume(ctx, consumeConfig{
		Topic: c.Topic, Channel: c.Channel, DeadLetterTopic: c.DeadLetterTopic,
		MaxAttempts: c.MaxAttempts, Concurrency: c.Concurrency, AckTimeout: c.AckTimeout,
		Handler: m.Processor, Logger: m.logger.With("component", c.Transport),
	})
	if err != nil {
		return fmt.Errorf("%s: %w", c.Transport, err)
	}
	m.logger.Info("keybrake worker running", "transport", c.Transport, "topic", c.Topic, "channel", c.Channel,
		"dead_letter_topic", c.DeadLetterTopic, "upstream", c.Upstream, "ledger", ledgerKind(c.Ledger), "namespace", c.Namespace)
	return nil
}

// Close stops consuming, waiting for in-flight events, then closes the
// ledger.
func (m *WorkerMain) Close() error {
	var errs []error
	if m.consumer != nil {
		errs = append(errs, m.consumer.Close())
	}
	if m.ledger != nil {
		errs = append(errs, m.ledger.Close())
	}
	return errors.Join(errs...)
}

// openLedger opens the billing ledger on SQLite or PostgreSQL.
func openLedger(ctx context.Context, dsn string) (keybrake.Ledger, io.Closer, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		s, err := postgres.Open(ctx, dsn)
		if err != nil {
			return nil, nil, fmt.Errorf("open --ledger (KEYBRAKE_LEDGER) postgres: %w", err)
		}
		return s, s, nil
	}
	if dir := filepath.Dir(dsn); dir != "." {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, nil, fmt.Errorf("invalid --ledger (KEYBRAKE_LEDGER) %q: %v", dsn, err)
		}
	}
	s, err := sqlite.Open(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("open --ledger (KEYBRAKE_LEDGER) %q: %w", dsn, err)
	}
	return s, s, nil
}

func ledgerKind(dsn string) string {
	if strings.HasPrefix(dsn, "postgres") {
		return "postgres"
	}
	return "sqlite:" + dsn
}

func runWorker(ctx context.Context, args []string, env Env) error {
	m := NewWorkerMain(env)
	if err := m.ParseFlags(args); err != nil {
		return err
	}
	if err := m.Run(ctx); err != nil {
		m.Close()
		return err
	}
	<-ctx.Done()
	m.logger.Info("shutting down: finishing in-flight events")
	return m.Close()
}
