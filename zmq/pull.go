package zmq

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// PullWorker takes envelopes from a PULL socket and, for each, pushes an
// application ack (a Reply) to the producer's ack socket at AckEndpoint:
// PUSH/PULL has no acknowledgement of its own, so the Producer resends
// whatever is not acked in time.
//
// The ack carries the envelope's content key and the Producer matches acks
// by it. Nothing is numbered: the seed's ack counter restarts at zero with
// the worker (or the producer), and a key built from it charges the resend
// again; a key from the content does not change, and the ledger answers
// the resend with the first charge.
//
// Set the fields, then call Open; Close stops taking envelopes and waits
// for those in progress, whose context it cancels. An envelope in progress
// at Close is not acked, and the producer resends it.
type PullWorker struct {
	Endpoint    string  // required: tcp://host:port to bind (or connect to, with Connect) for envelopes
	Connect     bool    // connect to Endpoint (a binding Producer) instead of binding it
	AckEndpoint string  // required: the Producer's ack endpoint, which the worker connects to
	Handler     Handler // required; billing.Processor in production
	Namespace   string  // required: the billing namespace of the Processor, for the key check

	// Concurrency is how many envelopes are processed at once. 0 means 1.
	Concurrency int
	// SendTimeout bounds queueing an ack (while the producer is away), a
	// peer's ZMTP handshake, and a write to a peer that does not read (see
	// docs/zmq.md, "Hostile peers"). 0 means DefaultSendTimeout.
	SendTimeout time.Duration
	// MaxPeers bounds the connections the worker keeps at once, in their
	// handshake or established: each may hold one message of up to
	// MaxMessageBytes in go-zeromq's queue, so it bounds that memory. A
	// connection past it is closed when it connects (logged). 0 means
	// DefaultMaxPeers.
	MaxPeers int
	// Logger receives the worker's logs. nil discards them.
	Logger *slog.Logger

	ctx       context.Context
	pull, ack zmq4.Socket
	addr      string
	life      lifecycle
	ackMu     sync.Mutex
}

// Open binds (or connects) the PULL socket, starts connecting the ack socket
// (retrying until the producer is there), and starts serving.
func (w *PullWorker) Open() error {
	if err := checkWorker(w.Endpoint, w.Handler, w.Namespace); err != nil {
		return err
	}
	if w.AckEndpoint == "" {
		return errors.New("zmq: the pull worker needs an ack endpoint")
	}
	w.Logger = loggerOr(w.Logger)
	send := cmpOr(w.SendTimeout, DefaultSendTimeout)
	ctx, cancel := context.WithCancel(guardContext(context.Background(), send, w.MaxPeers, w.Logger))
	w.pull = zmq4.NewPull(ctx, socketOptions(w.Logger, send,
		zmq4.WithAutomaticReconnect(w.Connect), zmq4.WithDialerMaxRetries(-1))...)
	if err := attachWorker(w.pull, w.Endpoint, w.Connect); err != nil {
		cancel()
		w.pull.Close()
		return err
	}
	w.addr = boundEndpoint(w.pull, w.Endpoint)
	w.ctx = ctx
	w.ackMu.Lock()
	w.ackSocket()
	w.ackMu.Unlock()
	w.life.start(cancel, func() { receiveLoop(ctx, w.pull, "pull", w.Concurrency, w.Logger, w.handle) })
	return nil
}

// Addr returns the endpoint the worker pulls from, with the port the kernel
// chose when Endpoint asked for port 0.
func (w *PullWorker) Addr() string { return w.addr }

// Close stops the worker and waits for the envelopes in progress.
func (w *PullWorker) Close() error {
	return w.life.stop(func() error {
		err := closeErr(w.pull.Close())
		w.ackMu.Lock()
		w.dropAck()
		w.ackMu.Unlock()
		return err
	})
}

// handle processes one envelope and pushes its ack.
func (w *PullWorker) handle(ctx context.Context, msg zmq4.Msg) {
	rep := serve(ctx, w.Handler, w.Namespace, w.Logger, lastFrame(msg))
	if ctx.Err() != nil {
		return
	}
	w.sendAck(rep)
}

// sendAck pushes rep to the producer. A send that fails (the producer went
// away) recreates the ack socket, which reconnects until the producer is
// back, and sends once more; an ack lost anyway is made good by the
// producer's resend.
//
// The socket is recreated by hand rather than with go-zeromq's automatic
// reconnect, which redials from inside the failed write while holding the
// socket's writer lock and so stalls the send for its whole timeout.
func (w *PullWorker) sendAck(rep *Reply) {
	msg := zmq4.NewMsg(rep.Marshal())
	w.ackMu.Lock()
	defer w.ackMu.Unlock()
	for try := 0; try < 2 && w.ctx.Err() == nil; try++ {
		err := w.ackSocket().Send(msg)
		if err == nil {
			return
		}
		w.Logger.Info("zmq: ack send failed; reconnecting the ack socket", "key", rep.Key, "err", err)
		w.dropAck()
	}
	w.Logger.Warn("zmq: ack lost; the producer will resend", "key", rep.Key)
}

// ackSocket returns the ack socket, creating one that connects to
// AckEndpoint in the background (for as long as it takes) if there is
// none. The caller holds ackMu.
func (w *PullWorker) ackSocket() zmq4.Socket {
	if w.ack == nil {
		s := zmq4.NewPush(w.ctx, socketOptions(w.Logger, cmpOr(w.SendTimeout, DefaultSendTimeout),
			zmq4.WithDialerMaxRetries(-1))...)
		go func() {
			if err := attachWorker(s, w.AckEndpoint, true); err != nil && w.ctx.Err() == nil {
				w.Logger.Debug("zmq: ack connect", "endpoint", w.AckEndpoint, "err", err)
			}
		}()
		w.ack = s
	}
	return w.ack
}

// dropAck closes the ack socket. The caller holds ackMu.
func (w *PullWorker) dropAck() {
	if w.ack != nil {
		w.ack.Close()
		w.ack = nil
	}
}
