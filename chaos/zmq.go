package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
)

const (
	zmqClients     = 32 // REQ or DEALER clients sending at once
	zmqConcurrency = 16 // messages a worker handles at once
	zmqWindow      = 16 // PUSH messages the producer has unacknowledged at once
)

func zmqOptions(extra ...zmq4.Option) []zmq4.Option {
	return append([]zmq4.Option{zmq4.WithTimeout(2 * time.Second), zmq4.WithDialerRetry(20 * time.Millisecond),
		zmq4.WithDialerMaxRetries(100)}, extra...)
}

// zmqWorker is the REP (or ROUTER) side of zmq-lazy-pirate and
// zmq-dealer-identity: a ROUTER socket that runs the strategy's worker for
// each request [identity, "", tag, body] and replies [identity, "", event,
// status], or not at all when the worker died.
type zmqWorker struct {
	r      *run
	dealer bool
	sock   zmq4.Socket
	sendMu sync.Mutex
	wg     sync.WaitGroup
}

func (w *zmqWorker) serve(ctx context.Context) {
	defer w.wg.Done()
	slots := make(chan struct{}, zmqConcurrency)
	for {
		msg, err := w.sock.Recv()
		if ctx.Err() != nil {
			return
		}
		if err != nil || len(msg.Frames) < 4 {
			continue
		}
		slots <- struct{}{}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer func() { <-slots }()
			w.handle(ctx, msg.Frames)
		}()
	}
}

func (w *zmqWorker) handle(ctx context.Context, frames [][]byte) {
	id, tag, body := frames[0], string(frames[len(frames)-2]), frames[len(frames)-1]
	if w.dealer {
		// The seed's ROUTER takes the routing identity frame as the
		// client's name.
		tag = hex.EncodeToString(id)
	}
	v := w.r.process(ctx, body, tag)
	status := "ok"
	switch v.kind {
	case crash:
		return // the worker died before replying
	case retry:
		status = "retry:" + strconv.FormatInt(min(v.delay, 2*time.Second).Milliseconds(), 10)
	}
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	w.sock.SendMulti(zmq4.NewMsgFrom(id, nil, []byte(strconv.Itoa(v.event)), []byte(status)))
}

// driveZMQRequest runs zmq-lazy-pirate (REQ clients; the tag is the
// socket's creation time) or zmq-dealer-identity (DEALER clients with a
// random identity; the tag is the identity the ROUTER sees): clients send
// their events one at a time, and on a reply timeout destroy the socket,
// open a new one, and resend.
func driveZMQRequest(ctx context.Context, r *run, dealer bool) error {
	wctx, cancel := context.WithCancel(ctx)
	w := &zmqWorker{r: r, dealer: dealer, sock: zmq4.NewRouter(wctx, zmqOptions()...)}
	defer func() {
		cancel()
		w.sock.Close()
		w.wg.Wait()
	}()
	if err := w.sock.Listen("tcp://127.0.0.1:0"); err != nil {
		return fmt.Errorf("zmq router: %w", err)
	}
	endpoint := "tcp://" + w.sock.Addr().String()
	w.wg.Add(1)
	go w.serve(wctx)
	// Past the run's deadline the ROUTER stops accepting; closing it then
	// resets the connections still waiting for its greeting, which a
	// client's Dial would otherwise wait for forever.
	go func() {
		<-wctx.Done()
		w.sock.Close()
	}()

	errc := make(chan error, zmqClients)
	var clients sync.WaitGroup
	for c := range zmqClients {
		clients.Add(1)
		go func() {
			defer clients.Done()
			cl := &zmqClient{endpoint: endpoint, dealer: dealer}
			defer cl.close()
			for i := c; i < len(r.events); i += zmqClients {
				if err := cl.send(ctx, i, r.events[i].body); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	clients.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return err
	}
	return r.quiet(ctx, "the workers to finish", func() bool { return true })
}

// zmqClient is a lazy-pirate REQ client, or a DEALER client that
// reconnects the same way.
type zmqClient struct {
	endpoint string
	dealer   bool
	sock     zmq4.Socket
	tag      string // the REQ socket's creation time, which the seed puts in the key
}

// open makes a new socket and dials the ROUTER. zmq4's Dial reads the
// peer's greeting with no deadline, so open gives up when ctx ends, leaving
// the dial to fail once the ROUTER closes.
func (c *zmqClient) open(ctx context.Context) error {
	var sock zmq4.Socket
	if c.dealer {
		id := make([]byte, 5)
		rand.Read(id[1:])
		sock = zmq4.NewDealer(context.Background(), zmqOptions(zmq4.WithID(zmq4.SocketIdentity(id)))...)
	} else {
		sock = zmq4.NewReq(context.Background(), zmqOptions()...)
	}
	dialed := make(chan error, 1)
	go func() { dialed <- sock.Dial(c.endpoint) }()
	select {
	case err := <-dialed:
		if err != nil {
			sock.Close()
			return err
		}
	case <-ctx.Done():
		go func() {
			<-dialed
			sock.Close()
		}()
		return ctx.Err()
	}
	c.sock, c.tag = sock, strconv.FormatInt(time.Now().UnixNano(), 10)
	return nil
}

func (c *zmqClient) close() {
	if c.sock != nil {
		c.sock.Close()
		c.sock = nil
	}
}

// send sends event i until the worker replies ok.
func (c *zmqClient) send(ctx context.Context, i int, body []byte) error {
	want := strconv.Itoa(i)
	for ctx.Err() == nil {
		if c.sock == nil {
			if err := c.open(ctx); err != nil {
				return fmt.Errorf("zmq connect: %w", err)
			}
		}
		frames := [][]byte{[]byte(c.tag), body}
		if c.dealer {
			frames = append([][]byte{nil}, frames...)
		}
		if err := c.sock.SendMulti(zmq4.NewMsgFrom(frames...)); err != nil {
			c.close()
			continue
		}
		status, err := c.reply(ctx, want)
		if err != nil {
			// Lazy pirate: no reply in time; destroy the socket, open a
			// new one, resend.
			c.close()
			continue
		}
		if status == "ok" {
			return nil
		}
		if ms, ok := strings.CutPrefix(status, "retry:"); ok {
			n, _ := strconv.Atoi(ms)
			sleep(ctx, time.Duration(n)*time.Millisecond)
		}
	}
	return ctx.Err()
}

// reply waits zmqTimeout for the reply about event want; on timeout it
// closes the socket, which ends the receive.
func (c *zmqClient) reply(ctx context.Context, want string) (string, error) {
	s := c.sock
	type result struct {
		status string
		err    error
	}
	ch := make(chan result, 1)
	go func() {
		for {
			m, err := s.Recv()
			if err != nil {
				ch <- result{err: err}
				return
			}
			f := m.Frames
			if len(f) >= 2 && string(f[len(f)-2]) == want {
				ch <- result{status: string(f[len(f)-1])}
				return
			}
		}
	}()
	t := time.NewTimer(zmqTimeout)
	defer t.Stop()
	select {
	case res := <-ch:
		return res.status, res.err
	case <-t.C:
		s.Close()
		<-ch
		return "", errors.New("reply timeout")
	case <-ctx.Done():
		s.Close()
		<-ch
		return "", ctx.Err()
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// pullWorker is one PULL worker process with the seed's in-process ack
// counter, which starts at 0 with every process.
type pullWorker struct {
	pull, ack zmq4.Socket
	counter   atomic.Int64
	ackMu     sync.Mutex
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// driveZMQPipeline runs zmq-ack-counter: a producer PUSHes every event and
// resends those without an application ack after zmqTimeout; a PULL worker
// numbers what it receives with its counter, runs the strategy's worker,
// and PUSHes the ack back. A crash kills the worker process (both sockets
// closed, nothing acknowledged) and starts a new one, counter at 0.
func driveZMQPipeline(ctx context.Context, r *run) error {
	push := zmq4.NewPush(context.Background(), zmqOptions()...)
	acks := zmq4.NewPull(context.Background(), zmqOptions()...)
	defer push.Close()
	defer acks.Close()
	if err := push.Listen("tcp://127.0.0.1:0"); err != nil {
		return fmt.Errorf("zmq push: %w", err)
	}
	if err := acks.Listen("tcp://127.0.0.1:0"); err != nil {
		return fmt.Errorf("zmq ack pull: %w", err)
	}
	pushAddr, ackAddr := "tcp://"+push.Addr().String(), "tcp://"+acks.Addr().String()

	crashes := make(chan struct{}, 1)
	var mu sync.Mutex
	var current *pullWorker
	start := func() error {
		wctx, cancel := context.WithCancel(ctx)
		w := &pullWorker{pull: zmq4.NewPull(wctx, zmqOptions()...), ack: zmq4.NewPush(wctx, zmqOptions()...), cancel: cancel}
		if err := w.pull.Dial(pushAddr); err != nil {
			cancel()
			return err
		}
		if err := w.ack.Dial(ackAddr); err != nil {
			cancel()
			w.pull.Close()
			return err
		}
		w.wg.Add(1)
		go w.serve(wctx, r, crashes)
		mu.Lock()
		current = w
		mu.Unlock()
		return nil
	}
	kill := func(w *pullWorker) {
		w.cancel()
		w.pull.Close()
		w.ackMu.Lock()
		w.ack.Close()
		w.ackMu.Unlock()
	}
	if err := start(); err != nil {
		return fmt.Errorf("zmq pull worker: %w", err)
	}
	var old []*pullWorker
	defer func() {
		mu.Lock()
		all := append(old, current)
		mu.Unlock()
		for _, w := range all {
			kill(w)
			w.wg.Wait()
		}
	}()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-crashes:
			}
			mu.Lock()
			w := current
			old = append(old, w)
			mu.Unlock()
			kill(w)
			if err := start(); err != nil {
				r.log.Warn("chaos: zmq worker restart", "err", err)
			}
		}
	}()

	acked := make(chan int, 64)
	go func() {
		for {
			m, err := acks.Recv()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				continue
			}
			if i, err := strconv.Atoi(string(m.Frames[len(m.Frames)-1])); err == nil {
				select {
				case acked <- i:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	if err := produce(ctx, r, push, acked); err != nil {
		return err
	}
	return r.quiet(ctx, "the workers to finish", func() bool { return true })
}

// produce sends every event, at most zmqWindow unacknowledged at once, and
// resends after zmqTimeout without an ack, until every event is acked.
func produce(ctx context.Context, r *run, push zmq4.Socket, acked <-chan int) error {
	pending := map[int]time.Time{}
	done := make([]bool, len(r.events))
	next, left := 0, len(r.events)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	send := func(i int) {
		pending[i] = time.Now()
		push.Send(zmq4.NewMsg(r.events[i].body))
	}
	for left > 0 {
		for next < len(r.events) && len(pending) < zmqWindow {
			send(next)
			next++
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("producer: %d events unacknowledged: %w", left, ctx.Err())
		case i := <-acked:
			if i >= 0 && i < len(done) && !done[i] {
				done[i] = true
				delete(pending, i)
				left--
			}
		case <-tick.C:
			for i, at := range pending {
				if time.Since(at) > zmqTimeout {
					send(i)
				}
			}
		}
	}
	return nil
}

func (w *pullWorker) serve(ctx context.Context, r *run, crashes chan<- struct{}) {
	defer w.wg.Done()
	slots := make(chan struct{}, zmqConcurrency)
	var inflight sync.WaitGroup
	defer inflight.Wait()
	for {
		m, err := w.pull.Recv()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			continue
		}
		seq := w.counter.Add(1) - 1
		body := m.Frames[len(m.Frames)-1]
		slots <- struct{}{}
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			defer func() { <-slots }()
			v := r.process(ctx, body, strconv.FormatInt(seq, 10))
			switch v.kind {
			case crash:
				select {
				case crashes <- struct{}{}:
				default:
				}
			case ack:
				w.ackMu.Lock()
				w.ack.Send(zmq4.NewMsgString(strconv.Itoa(v.event)))
				w.ackMu.Unlock()
			}
			// A retry sends no ack: the producer resends after its timeout.
		}()
	}
}
