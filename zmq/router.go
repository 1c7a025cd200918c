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
	// SendTimeout bounds queueing a reply, a peer's ZMTP handshake, and a
	// write to a peer that does not read (whose connection is then closed:
	// see docs/zmq.md, "Hostile peers"). 0 means DefaultSendTimeout.
	SendTimeout time.Duration
	// MaxPeers bounds the connections the worker keeps at once, in their
	// handshake or established: each may hold one message of up to
	// MaxMessageBytes in go-zeromq's queue, so it bounds that memory. A
	// connection past it is closed when it connects (logged). 0 means
	// DefaultMaxPeers.
	MaxPeers int
	// Logger receives the worker's logs. nil discards them.
	Logger *slog.Logger

	sock   zmq4.Socket
	addr   string
	life   lifecycle
	sendMu sync.Mutex
}

// Open binds (or connects) the socket and starts serving.
func (w *RouterWorker) Open() error {
	if err := checkWorker(w.Endpoint, w.Handler, w.Namespace); err != nil {
		return err
	}
	w.Logger = loggerOr(w.Logger)
	send := cmpOr(w.SendTimeout, DefaultSendTimeout)
	ctx, cancel := context.WithCancel(guardContext(context.Background(), send, w.MaxPeers, w.Logger))
	w.sock = zmq4.NewRouter(ctx, socketOptions(w.Logger, send)...)
	if err := attachWorker(w.sock, w.Endpoint, w.Connect); err != nil {
		cancel()
		w.sock.Close()
		return err
	}
	w.addr = boundEndpoint(w.sock, w.Endpoint)
	w.life.start(cancel, func() { receiveLoop(ctx, w.sock, "router", w.Concurrency, w.Logger, w.handle) })
	return nil
}

// Addr returns the endpoint the worker serves, with the port the kernel
// chose when Endpoint asked for port 0.
func (w *RouterWorker) Addr() string { return w.addr }

// Close stops the worker and waits for the requests in progress.
func (w *RouterWorker) Close() error {
	return w.life.stop(func() error { return closeErr(w.sock.Close()) })
}

// handle processes one [identity, ("",) envelope] message and replies with
// the same routing frames.
func (w *RouterWorker) handle(ctx context.Context, msg zmq4.Msg) {
	frames := msg.Frames
	if len(frames) < 2 {
		w.Logger.Warn("zmq: router dropped a message without an envelope frame")
		return
	}
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
