package zmq

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/go-zeromq/zmq4"
)

// RepWorker serves lazy-pirate REQ clients (ReqClient, or pyzmq's REQ) on a
// REP socket: one envelope at a time, one reply each.
//
// If the worker dies after charging and before replying, the client times
// out, recreates its socket and resends the same envelope; the next worker
// finds the event's ledger entry final and replies with the same charge.
//
// Set the fields, then call Open; Close stops serving and waits for the
// request in progress, whose context it cancels.
type RepWorker struct {
	Endpoint  string  // required: tcp://host:port to bind (or connect to, with Connect)
	Connect   bool    // connect to Endpoint (a ROUTER/DEALER broker) instead of binding it
	Handler   Handler // required; billing.Processor in production
	Namespace string  // required: the billing namespace of the Processor, for the key check

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

	sock zmq4.Socket
	addr string
	life lifecycle
}

// Open binds (or connects) the socket and starts serving.
func (w *RepWorker) Open() error {
	if err := checkWorker(w.Endpoint, w.Handler, w.Namespace); err != nil {
		return err
	}
	w.Logger = loggerOr(w.Logger)
	send := cmpOr(w.SendTimeout, DefaultSendTimeout)
	ctx, cancel := context.WithCancel(guardContext(context.Background(), send, w.MaxPeers, w.Logger))
	w.sock = zmq4.NewRep(ctx, socketOptions(w.Logger, send)...)
	if err := attachWorker(w.sock, w.Endpoint, w.Connect); err != nil {
		cancel()
		w.sock.Close()
		return err
	}
	w.addr = boundEndpoint(w.sock, w.Endpoint)
	w.life.start(cancel, func() { w.run(ctx) })
	return nil
}

// Addr returns the endpoint the worker serves, with the port the kernel
// chose when Endpoint asked for port 0.
func (w *RepWorker) Addr() string { return w.addr }

// Close stops the worker and waits for the request in progress.
func (w *RepWorker) Close() error {
	return w.life.stop(func() error { return closeErr(w.sock.Close()) })
}

// run answers one request at a time: a REP socket must reply before it
// receives again.
func (w *RepWorker) run(ctx context.Context) {
	for {
		msg, err := w.sock.Recv()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			w.Logger.Debug("zmq: rep receive", "err", err)
			continue
		}
		rep := serve(ctx, w.Handler, w.Namespace, w.Logger, lastFrame(msg))
		if ctx.Err() != nil {
			// Closed mid-request: the client resends to the next worker.
			return
		}
		if err := w.sock.Send(zmq4.NewMsg(rep.Marshal())); err != nil {
			w.Logger.Warn("zmq: reply lost; the client will resend", "key", rep.Key, "err", err)
		}
	}
}

// lastFrame returns the message body: its only frame, or its last one
// when a peer sent extra envelope frames.
func lastFrame(m zmq4.Msg) []byte {
	if len(m.Frames) == 0 {
		return nil
	}
	return m.Frames[len(m.Frames)-1]
}

// checkWorker validates the fields every worker needs.
func checkWorker(endpoint string, h Handler, namespace string) error {
	switch {
	case endpoint == "":
		return errors.New("zmq: the worker needs an endpoint")
	case h == nil:
		return errors.New("zmq: the worker needs a handler")
	}
	return validNamespace(namespace)
}

// cmpOr returns d, or def when d is zero.
func cmpOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
