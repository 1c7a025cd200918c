package zmq

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// RouterWorker serves DEALER clients (DealerClient, pyzmq's DEALER) and REQ
// clients on a ROUTER socket, Concurrency envelopes at a time.
//
// ZeroMQ gives every DEALER socket a random identity, and a new one when
// the client recreates its socket to reconnect. The worker uses the
// identity frame only to route the reply; it never reaches the Handler, so
// the resend from the new identity carries the same key and the ledger
// answers it with the first delivery's charge. A reply to an identity that
// is gone is dropped by ZeroMQ; its client resends.
//
// Messages are [identity, "", envelope] (REQ and DEALER clients that
// imitate REQ) or [identity, envelope]; the reply mirrors the framing.
//
// Set the fields, then call Open; Close stops serving and waits for the
// requests in progress, whose context it cancels.
type RouterWorker struct {
	Endpoint  string  // required: tcp://host:port to bind (or connect to, with Connect)
	Connect   bool    // connect to Endpoint instead of binding it
	Handler   Handler // required; billing.Processor in production
	Namespace string  // required: the billing namespace of the Processor, for the key check

	// Concurrency is how many envelopes are processed at once. 0 means 1.
	Concurrency int
	// SendTimeout bounds queueing a reply. 0 means DefaultSendTimeout.
	SendTimeout time.Duration
	// Logger receives the worker's logs. nil discards them.
	Logger *slog.Logger

	sock   zmq4.Socket
	addr   string
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	sendMu sync.Mutex
}

// Open binds (or connects) the socket and starts serving.
func (w *RouterWorker) Open() error {
	if err := checkWorker(w.Endpoint, w.Handler, w.Namespace); err != nil {
		return err
	}
	w.Logger = loggerOr(w.Logger)
	ctx, cancel := context.WithCancel(context.Background())
	w.sock = zmq4.NewRouter(ctx, socketOptions(w.Logger, cmpOr(w.SendTimeout, DefaultSendTimeout))...)
	if err := attach(w.sock, w.Endpoint, w.Connect); err != nil {
		cancel()
		w.sock.Close()
		return err
	}
	w.addr = boundEndpoint(w.sock, w.Endpoint)
	w.cancel, w.done = cancel, make(chan struct{})
	go w.run(ctx)
	return nil
}

// Addr returns the endpoint the worker serves, with the port the kernel
// chose when Endpoint asked for port 0.
func (w *RouterWorker) Addr() string { return w.addr }

// Close stops the worker and waits for the requests in progress.
func (w *RouterWorker) Close() error {
	var err error
	w.once.Do(func() {
		if w.cancel == nil {
			return
		}
		w.cancel()
		err = closeErr(w.sock.Close())
		<-w.done
	})
	return err
}

func (w *RouterWorker) run(ctx context.Context) {
	defer close(w.done)
	var inflight sync.WaitGroup
	defer inflight.Wait()
	slots := make(chan struct{}, cmpOrInt(w.Concurrency, 1))
	for {
		msg, err := w.sock.Recv()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			w.Logger.Debug("zmq: router receive", "err", err)
			continue
		}
		if len(msg.Frames) < 2 {
			w.Logger.Warn("zmq: router dropped a message without an envelope frame")
			continue
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			defer func() { <-slots }()
			w.handle(ctx, msg.Frames)
		}()
	}
}

// handle processes one [identity, ("",) envelope] message and replies with
// the same routing frames.
func (w *RouterWorker) handle(ctx context.Context, frames [][]byte) {
	route := frames[:len(frames)-1] // the identity, and the delimiter if any
	rep := serve(ctx, w.Handler, w.Namespace, w.Logger, frames[len(frames)-1])
	if ctx.Err() != nil {
		return
	}
	out := make([][]byte, 0, len(route)+1)
	out = append(append(out, route...), rep.Marshal())
	w.sendMu.Lock()
	err := w.sock.SendMulti(zmq4.NewMsgFrom(out...))
	w.sendMu.Unlock()
	if err != nil {
		w.Logger.Warn("zmq: reply lost; the client will resend", "key", rep.Key, "err", err)
	}
}
