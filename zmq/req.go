package zmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// ErrNoFinalReply is returned, wrapped, when a client gave up on an envelope
// after MaxAttempts sends without a final reply. The event may or may not be
// charged; sending the same envelope again later is always safe.
var ErrNoFinalReply = errors.New("zmq: no final reply")

// ReqClient is the lazy-pirate REQ client of the ZeroMQ Guide, made safe
// for billing: when no reply comes within Timeout, it destroys the socket
// (a REQ socket that sent and got nothing is stuck), creates a new one and
// resends the same envelope. The key travels in the envelope, computed
// before the first send, so the new socket changes nothing the worker
// keys on; nothing about the socket (its creation time, its identity) is
// ever part of the key.
//
// A ReqClient sends one envelope at a time; Send calls are serialized.
type ReqClient struct {
	Endpoint string // required: the RepWorker's (or RouterWorker's) endpoint

	// Timeout is how long one send waits for its reply. 0 means
	// DefaultTimeout.
	Timeout time.Duration
	// MaxAttempts is how many sends of one envelope (including resends
	// after StatusRetry) Send makes before giving up. 0 means
	// DefaultMaxAttempts.
	MaxAttempts int
	// MaxDelay caps the wait a StatusRetry reply asks for. 0 means
	// DefaultMaxDelay.
	MaxDelay time.Duration
	// Logger receives the client's logs. nil discards them.
	Logger *slog.Logger

	mu      sync.Mutex
	sock    zmq4.Socket
	sockets int
	closed  bool
}

// Send sends env and returns the worker's final reply: StatusCharged,
// StatusDeclined or StatusDeadLetter. It resends after a reply timeout (on
// a new socket) and after StatusRetry (after the reply's RetryAfterMS).
// Returns an error wrapping ErrNoFinalReply after MaxAttempts sends, and
// ctx's error if ctx ends first.
func (c *ReqClient) Send(ctx context.Context, env *Envelope) (*Reply, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("zmq: the client is closed")
	}
	logger := loggerOr(c.Logger)
	msg := env.Marshal()
	var last error
	for attempt := 1; attempt <= cmpOrInt(c.MaxAttempts, DefaultMaxAttempts); attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rep, err := c.roundTrip(ctx, msg)
		switch {
		case err != nil:
			// Lazy pirate: the socket is stuck or dead; the next attempt
			// creates a new one and resends the same envelope.
			c.discard()
			last = err
			logger.Info("zmq: no reply; resending on a new socket", "key", env.Key, "attempt", attempt, "err", err)
		case rep.Key != env.Key && rep.Key != "":
			c.discard()
			last = fmt.Errorf("reply for another key %q", rep.Key)
		case rep.Status == StatusRetry:
			last = fmt.Errorf("worker asked to retry: %s", rep.Reason)
			if !sleepCtx(ctx, retryDelay(rep, cmpOr(c.MaxDelay, DefaultMaxDelay))) {
				return nil, ctx.Err()
			}
		default:
			return rep, nil
		}
	}
	return nil, fmt.Errorf("send %s: %w after %d attempts: %v", env.Key, ErrNoFinalReply, cmpOrInt(c.MaxAttempts, DefaultMaxAttempts), last)
}

// Sockets returns how many sockets the client has created: one, plus one
// per lazy-pirate recreation.
func (c *ReqClient) Sockets() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sockets
}

// Close closes the socket.
func (c *ReqClient) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.discard()
	return nil
}

// roundTrip sends msg and waits Timeout for the reply, opening a socket
// first if there is none.
func (c *ReqClient) roundTrip(ctx context.Context, msg []byte) (*Reply, error) {
	timeout := cmpOr(c.Timeout, DefaultTimeout)
	if c.sock == nil {
		s := zmq4.NewReq(context.Background(), socketOptions(loggerOr(c.Logger), timeout,
			zmq4.WithDialerMaxRetries(dialRetries(timeout)))...)
		c.sockets++
		if err := s.Dial(c.Endpoint); err != nil {
			s.Close()
			return nil, fmt.Errorf("connect %s: %w", c.Endpoint, err)
		}
		c.sock = s
	}
	if err := c.sock.Send(zmq4.NewMsg(msg)); err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	b, err := recvTimeout(ctx, c.sock, timeout)
	if err != nil {
		return nil, err
	}
	return DecodeReply(b)
}

// discard closes the socket, if any, so the next attempt opens a new one.
func (c *ReqClient) discard() {
	if c.sock != nil {
		c.sock.Close()
		c.sock = nil
	}
}

// errTimeout is a receive that got nothing in time.
var errTimeout = errors.New("timed out waiting for the reply")

// recvTimeout receives one message from s within timeout. On timeout or
// when ctx ends it closes s, which unblocks the receive.
func recvTimeout(ctx context.Context, s zmq4.Socket, timeout time.Duration) ([]byte, error) {
	type result struct {
		msg zmq4.Msg
		err error
	}
	ch := make(chan result, 1)
	go func() {
		m, err := s.Recv()
		ch <- result{m, err}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("receive: %w", r.err)
		}
		return lastFrame(r.msg), nil
	case <-t.C:
		s.Close()
		return nil, errTimeout
	case <-ctx.Done():
		s.Close()
		return nil, ctx.Err()
	}
}

// dialRetries is how many dial retries fit in timeout.
func dialRetries(timeout time.Duration) int {
	return max(1, int(timeout/dialRetry))
}

// cmpOrInt returns n, or def when n is not positive.
func cmpOrInt(n, def int) int {
	if n <= 0 {
		return def
	}
	return n
}
