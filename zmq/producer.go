package zmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Producer is the reliable PUSH side of a PUSH/PULL pipeline: it pushes
// envelopes to PullWorkers and waits for their acks on its own PULL socket
// at AckEndpoint, resending an envelope whose final ack does not come
// within AckTimeout.
//
// Acks are matched to envelopes by the content key they carry, and taken
// only with the random token each Send puts in its envelope (Envelope.Token;
// the worker echoes it): the ack port takes pushes from any peer that
// reaches it, and a content key is guessable, so a key alone let a forged
// "declined" end the resends of a bill never charged. A final ack is the
// ledger's outcome for that event, whichever of the Send's resends it
// answers; acks meant for another Send or a predecessor process (another
// token) are dropped, and its own resend is answered again from the ledger.
// Dropped acks are counted (StaleAcks).
//
// A Producer is safe for concurrent use.
type Producer struct {
	// Endpoint is where envelopes go: the PullWorker's endpoint, or with
	// Bind, the endpoint to bind for PullWorkers that connect. Required.
	Endpoint string
	Bind     bool
	// AckEndpoint is the endpoint the producer binds for acks; every
	// PullWorker connects its ack socket to it. Required.
	AckEndpoint string

	// AckTimeout is how long one send waits for its ack. 0 means
	// DefaultTimeout.
	AckTimeout time.Duration
	// MaxAttempts is how many sends of one envelope (including resends
	// after StatusRetry) Send makes before giving up. 0 means
	// DefaultMaxAttempts.
	MaxAttempts int
	// MaxDelay caps the wait a StatusRetry ack asks for. 0 means
	// DefaultMaxDelay.
	MaxDelay time.Duration
	// Logger receives the producer's logs. nil discards them.
	Logger *slog.Logger

	ctx     context.Context
	cancel  context.CancelFunc
	acks    zmq4.Socket
	ackAddr string
	done    chan struct{}
	stale   atomic.Int64
	once    sync.Once

	mu      sync.Mutex
	push    zmq4.Socket
	addr    string
	pushes  int
	waiters map[string]map[chan *Reply]string // by key, each Send's channel and token
}

// Open binds the ack socket (and the push socket with Bind) and starts
// reading acks. Without Bind, the push socket connects on the first Send.
func (p *Producer) Open() error {
	if p.Endpoint == "" {
		return errors.New("zmq: the producer needs an endpoint")
	}
	if p.AckEndpoint == "" {
		return errors.New("zmq: the producer needs an ack endpoint")
	}
	p.Logger = loggerOr(p.Logger)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.waiters = map[string]map[chan *Reply]string{}
	p.acks = zmq4.NewPull(p.ctx, socketOptions(p.Logger, cmpOr(p.AckTimeout, DefaultTimeout))...)
	if err := p.acks.Listen(p.AckEndpoint); err != nil {
		p.cancel()
		p.acks.Close()
		return fmt.Errorf("bind ack endpoint %s: %w", p.AckEndpoint, err)
	}
	p.ackAddr = boundEndpoint(p.acks, p.AckEndpoint)
	if p.Bind {
		if _, err := p.socket(); err != nil {
			p.cancel()
			p.acks.Close()
			return err
		}
	}
	p.done = make(chan struct{})
	go p.readAcks()
	return nil
}

// AckAddr returns the bound ack endpoint, with the port the kernel chose
// when AckEndpoint asked for port 0.
func (p *Producer) AckAddr() string { return p.ackAddr }

// Addr returns the bound push endpoint (with Bind), else Endpoint.
func (p *Producer) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.addr != "" {
		return p.addr
	}
	return p.Endpoint
}

// StaleAcks returns how many acks were dropped: for keys no Send waited
// for (duplicates of an answered one), or without the token of the Send
// waiting (a predecessor's, or forged).
func (p *Producer) StaleAcks() int64 { return p.stale.Load() }

// Sockets returns how many push sockets the producer has created: one,
// plus one per recreation after an ack timeout.
func (p *Producer) Sockets() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pushes
}

// Close closes both sockets; Sends in progress fail.
func (p *Producer) Close() error {
	var err error
	p.once.Do(func() {
		if p.cancel == nil {
			return
		}
		p.cancel()
		p.mu.Lock()
		if p.push != nil {
			err = p.push.Close()
			p.push = nil
		}
		p.mu.Unlock()
		err = errors.Join(err, p.acks.Close())
		<-p.done
	})
	return err
}

// Send pushes env and returns its final ack: StatusCharged, StatusDeclined
// or StatusDeadLetter. It resends after AckTimeout (on a new push socket
// when it connects, since a PUSH socket whose worker died drops messages
// silently) and after StatusRetry. Returns an error wrapping
// ErrNoFinalReply after MaxAttempts sends, and ctx's error if ctx ends
// first.
func (p *Producer) Send(ctx context.Context, env *Envelope) (*Reply, error) {
	ch := make(chan *Reply, 1)
	signed := *env
	signed.Token = newToken()
	if err := p.wait(env.Key, signed.Token, ch); err != nil {
		return nil, err
	}
	defer p.unwait(env.Key, ch)
	timeout := cmpOr(p.AckTimeout, DefaultTimeout)
	attempts := cmpOrInt(p.MaxAttempts, DefaultMaxAttempts)
	msg := signed.Marshal()
	var last error
	for attempt := 1; attempt <= attempts; attempt++ {
		s, err := p.socket()
		if err == nil {
			drain(ch)
			err = s.Send(zmq4.NewMsg(msg))
		}
		if err != nil {
			last = err
			p.reconnect(s)
			if !sleepCtx(ctx, dialRetry) {
				return nil, ctx.Err()
			}
			continue
		}
		t := time.NewTimer(timeout)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-p.ctx.Done():
			t.Stop()
			return nil, errors.New("zmq: the producer is closed")
		case <-t.C:
			last = errTimeout
			p.Logger.Info("zmq: no ack; resending", "key", env.Key, "attempt", attempt)
			p.reconnect(s)
		case rep := <-ch:
			t.Stop()
			if rep.Status.Final() {
				return rep, nil
			}
			last = fmt.Errorf("worker asked to retry: %s", rep.Reason)
			if !sleepCtx(ctx, retryDelay(rep, cmpOr(p.MaxDelay, DefaultMaxDelay))) {
				return nil, ctx.Err()
			}
		}
	}
	return nil, fmt.Errorf("send %s: %w after %d attempts: %v", env.Key, ErrNoFinalReply, attempts, last)
}

// socket returns the push socket, creating (and binding or connecting) it
// if there is none.
func (p *Producer) socket() (zmq4.Socket, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil {
		return nil, errors.New("zmq: the producer is closed")
	}
	if p.push != nil {
		return p.push, nil
	}
	timeout := cmpOr(p.AckTimeout, DefaultTimeout)
	s := zmq4.NewPush(p.ctx, socketOptions(p.Logger, timeout, zmq4.WithDialerMaxRetries(dialRetries(timeout)))...)
	p.pushes++
	if err := attach(s, p.Endpoint, !p.Bind); err != nil {
		s.Close()
		return nil, err
	}
	p.push = s
	if p.Bind {
		p.addr = boundEndpoint(s, p.Endpoint)
	}
	return s, nil
}

// reconnect drops a connecting push socket s if it is still the current
// one, so the next send connects afresh. A bound socket is kept: workers
// reconnect to it.
func (p *Producer) reconnect(s zmq4.Socket) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s != nil && p.push == s && !p.Bind {
		s.Close()
		p.push = nil
	}
}

// readAcks delivers acks to the Sends waiting for their key until Close.
func (p *Producer) readAcks() {
	defer close(p.done)
	for {
		m, err := p.acks.Recv()
		if p.ctx.Err() != nil {
			return
		}
		if err != nil {
			p.Logger.Debug("zmq: ack receive", "err", err)
			continue
		}
		rep, err := DecodeReply(lastFrame(m))
		if err != nil {
			p.Logger.Warn("zmq: dropped an ack", "err", err)
			continue
		}
		// Only the ack carrying a waiting Send's token answers it: the
		// ack port takes pushes from anyone who can reach it, and a key is
		// guessable, so an ack with the key alone could be a forged
		// "declined" that ends the resends of a bill never charged.
		p.mu.Lock()
		waiting, n := len(p.waiters[rep.Key]), 0
		for ch, token := range p.waiters[rep.Key] {
			if token == rep.Token {
				drain(ch)
				ch <- rep
				n++
			}
		}
		p.mu.Unlock()
		if n == 0 {
			p.stale.Add(1)
			if waiting > 0 {
				p.Logger.Warn("zmq: dropped an ack without the token of the send waiting for its key", "key", rep.Key, "status", rep.Status)
			} else {
				p.Logger.Debug("zmq: ack for no pending send", "key", rep.Key, "status", rep.Status)
			}
		}
	}
}

func (p *Producer) wait(key, token string, ch chan *Reply) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiters == nil || p.ctx.Err() != nil {
		return errors.New("zmq: the producer is not open")
	}
	if p.waiters[key] == nil {
		p.waiters[key] = map[chan *Reply]string{}
	}
	p.waiters[key][ch] = token
	return nil
}

func (p *Producer) unwait(key string, ch chan *Reply) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.waiters[key], ch)
	if len(p.waiters[key]) == 0 {
		delete(p.waiters, key)
	}
}

// newToken returns a random envelope token: 128 bits, hex.
func newToken() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}
