package zmq

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/keybrake/keybrake/billing"
)

// Defaults of the zero fields of workers and clients.
const (
	DefaultTimeout     = 10 * time.Second // reply or ack timeout of a client
	DefaultMaxAttempts = 10               // sends of one envelope before a client gives up
	DefaultMaxDelay    = 30 * time.Second // cap on a StatusRetry wait
	DefaultSendTimeout = 10 * time.Second // how long a worker waits to queue a reply
	DefaultMaxPeers    = 1024             // connections a worker keeps at once; more are closed when they connect
	dialRetry          = 100 * time.Millisecond
)

// serve turns one request message into its reply: it verifies the envelope,
// hands the event to h, and maps the result. It never returns nil.
func serve(ctx context.Context, h Handler, namespace string, logger *slog.Logger, msg []byte) (rep *Reply) {
	env, bad := decodeEnvelope(msg, namespace)
	if bad != nil {
		logger.Warn("zmq: refused envelope", "key", bad.Key, "param", bad.Param, "reason", bad.Reason)
		return bad
	}
	// Runs last, after the recovery below: every reply echoes the token.
	defer func() {
		if rep != nil {
			rep.Token = env.Token
		}
	}()
	defer func() {
		if v := recover(); v != nil {
			logger.Error("zmq: handler panicked", "key", env.Key, "panic", fmt.Sprint(v))
			rep = &Reply{Status: StatusRetry, Key: env.Key, Outcome: billing.OutcomeTransient, Reason: "The worker failed; resend later."}
		}
	}()
	res := h.Process(ctx, env.Event)
	if res.Key != "" && res.Key != env.Key {
		// The worker's namespace differs from the processor's: the ledger
		// holds the event under another key. Refuse to confirm it under this
		// one, loudly, rather than let a producer correlate the wrong thing.
		logger.Error("zmq: processor key differs from the envelope key; the worker and processor namespaces differ",
			"envelope_key", env.Key, "processor_key", res.Key)
		return &Reply{Status: StatusRetry, Key: env.Key, Outcome: billing.OutcomeTransient,
			Reason: "The worker is misconfigured (namespace); resend later.", RetryAfterMS: DefaultMaxDelay.Milliseconds()}
	}
	rep = replyOf(env.Key, res)
	logger.Debug("zmq: processed", "key", env.Key, "status", rep.Status, "outcome", rep.Outcome, "charge_id", rep.ChargeID)
	return rep
}

// socketOptions are the options of every socket: logs through logger, a
// bounded send, and quick dial retries.
func socketOptions(logger *slog.Logger, sendTimeout time.Duration, extra ...zmq4.Option) []zmq4.Option {
	opts := []zmq4.Option{
		zmq4.WithLogger(log.New(slogWriter{logger}, "", 0)),
		zmq4.WithTimeout(sendTimeout),
		zmq4.WithDialerRetry(dialRetry),
	}
	return append(opts, extra...)
}

// slogWriter routes go-zeromq's log lines to slog at debug level: they are
// peer disconnects and handshake failures, which the protocol retries.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.l.Debug("zmq4: " + string(trimNewline(p)))
	return len(p), nil
}

func trimNewline(p []byte) []byte {
	for len(p) > 0 && (p[len(p)-1] == '\n' || p[len(p)-1] == '\r') {
		p = p[:len(p)-1]
	}
	return p
}

// attachWorker binds or connects a worker's socket to endpoint, a tcp
// endpoint through the guard (guard.go): the socket's context must come
// from guardContext.
func attachWorker(s zmq4.Socket, endpoint string, connect bool) error {
	guarded, err := guardEndpoint(endpoint)
	if err != nil {
		return err
	}
	if err := attach(s, guarded, connect); err != nil {
		return fmt.Errorf("%s: %w", endpoint, err)
	}
	return nil
}

// attach binds or connects s to endpoint.
func attach(s zmq4.Socket, endpoint string, connect bool) error {
	if connect {
		if err := s.Dial(endpoint); err != nil {
			return fmt.Errorf("connect %s: %w", endpoint, err)
		}
		return nil
	}
	if err := s.Listen(endpoint); err != nil {
		return fmt.Errorf("bind %s: %w", endpoint, err)
	}
	return nil
}

// boundEndpoint returns the endpoint s listens on, with the port the kernel
// chose for tcp://host:0, or endpoint itself.
func boundEndpoint(s zmq4.Socket, endpoint string) string {
	if a := s.Addr(); a != nil && a.Network() == "tcp" {
		return "tcp://" + a.String()
	}
	return endpoint
}

// loggerOr returns l, or a logger that discards for a nil l.
func loggerOr(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// sleepCtx waits d or until ctx is done, and reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// retryDelay is the wait before resending after a StatusRetry reply.
func retryDelay(r *Reply, max time.Duration) time.Duration {
	d := r.RetryAfter()
	if d <= 0 {
		d = 100 * time.Millisecond
	}
	return min(d, max)
}
