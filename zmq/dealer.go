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

// DealerClient sends envelopes to a RouterWorker over a DEALER socket, many
// at once, and matches each reply to its envelope by the key in the reply.
//
// When a reply does not come within Timeout, the client recreates its
// socket, which gives it a new random identity (as a reconnecting DEALER
// always gets), and resends the envelopes still waiting. The identity is
// the seed's third trap: a key that included it would change on every
// reconnect. Here the key is in the envelope, computed before the first
// send, and the worker never sees the identity, so every resend is the
// same charge.
//
// A DealerClient is safe for concurrent use.
type DealerClient struct {
	Endpoint string // required: the RouterWorker's endpoint

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
	waiters map[string]map[chan *Reply]struct{}
}

// Send sends env and returns the worker's final reply: StatusCharged,
// StatusDeclined or StatusDeadLetter. It resends after a reply timeout (on
// a new socket, with a new identity) and after StatusRetry. Returns an
// error wrapping ErrNoFinalReply after MaxAttempts sends, and ctx's error
// if ctx ends first.
func (c *DealerClient) Send(ctx context.Context, env *Envelope) (*Reply, error) {
	ch := make(chan *Reply, 1)
	if err := c.wait(env.Key, ch); err != nil {
		return nil, err
	}
	defer c.unwait(env.Key, ch)
	logger := loggerOr(c.Logger)
	timeout := cmpOr(c.Timeout, DefaultTimeout)
	// REQ framing (an empty delimiter), so a REP worker behind a broker and
	// a RouterWorker both read it.
	msg := zmq4.NewMsgFrom([]byte{}, env.Marshal())
	attempts := cmpOrInt(c.MaxAttempts, DefaultMaxAttempts)
	var last error
	for attempt := 1; attempt <= attempts; attempt++ {
		s, err := c.socket(timeout)
		if err == nil {
			drain(ch)
			err = s.SendMulti(msg)
		}
		if err != nil {
			last = err
			c.reconnect(s)
			continue
		}
		t := time.NewTimer(timeout)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
			last = errTimeout
			logger.Info("zmq: no reply; reconnecting with a new identity", "key", env.Key, "attempt", attempt)
			c.reconnect(s)
		case rep := <-ch:
			t.Stop()
			if rep.Status.Final() {
				return rep, nil
			}
			last = fmt.Errorf("worker asked to retry: %s", rep.Reason)
			if !sleepCtx(ctx, retryDelay(rep, cmpOr(c.MaxDelay, DefaultMaxDelay))) {
				return nil, ctx.Err()
			}
		}
	}
	return nil, fmt.Errorf("send %s: %w after %d attempts: %v", env.Key, ErrNoFinalReply, attempts, last)
}

// Sockets returns how many sockets (identities) the client has created.
func (c *DealerClient) Sockets() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sockets
}

// Close closes the socket; Sends in progress fail.
func (c *DealerClient) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.sock != nil {
		c.sock.Close()
		c.sock = nil
	}
	return nil
}

// socket returns the current socket, opening one (with a new random
// identity) and its reader if there is none.
func (c *DealerClient) socket(timeout time.Duration) (zmq4.Socket, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("zmq: the client is closed")
	}
	if c.sock != nil {
		return c.sock, nil
	}
	s := zmq4.NewDealer(context.Background(), socketOptions(loggerOr(c.Logger), timeout,
		zmq4.WithDialerMaxRetries(dialRetries(timeout)))...)
	c.sockets++
	if err := s.Dial(c.Endpoint); err != nil {
		s.Close()
		return nil, fmt.Errorf("connect %s: %w", c.Endpoint, err)
	}
	c.sock = s
	go c.read(s)
	return s, nil
}

// reconnect drops s if it is still the current socket; the next send opens
// a new one. Concurrent Sends that time out together recreate it once.
func (c *DealerClient) reconnect(s zmq4.Socket) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s != nil && c.sock == s {
		s.Close()
		c.sock = nil
	}
}

// read delivers the replies of s to the Sends waiting for their key, until
// s is closed. Replies nobody waits for (a resend already answered) are
// dropped.
func (c *DealerClient) read(s zmq4.Socket) {
	logger := loggerOr(c.Logger)
	for {
		m, err := s.Recv()
		if err != nil {
			c.mu.Lock()
			current := c.sock == s
			c.mu.Unlock()
			if !current {
				return
			}
			logger.Debug("zmq: dealer receive", "err", err)
			continue
		}
		rep, err := DecodeReply(lastFrame(m))
		if err != nil {
			logger.Warn("zmq: dealer dropped a reply", "err", err)
			continue
		}
		c.mu.Lock()
		for ch := range c.waiters[rep.Key] {
			drain(ch)
			ch <- rep
		}
		c.mu.Unlock()
	}
}

func (c *DealerClient) wait(key string, ch chan *Reply) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("zmq: the client is closed")
	}
	if c.waiters == nil {
		c.waiters = map[string]map[chan *Reply]struct{}{}
	}
	if c.waiters[key] == nil {
		c.waiters[key] = map[chan *Reply]struct{}{}
	}
	c.waiters[key][ch] = struct{}{}
	return nil
}

func (c *DealerClient) unwait(key string, ch chan *Reply) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.waiters[key], ch)
	if len(c.waiters[key]) == 0 {
		delete(c.waiters, key)
	}
}

// drain empties a one-slot channel.
func drain(ch chan *Reply) {
	select {
	case <-ch:
	default:
	}
}
