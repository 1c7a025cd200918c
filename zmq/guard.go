package zmq

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// The workers' TCP connections go through a transport of our own
// (guardScheme), because go-zeromq trusts its peers in three ways that let
// any one of them stop a worker for everybody (see docs/zmq.md, "Hostile
// peers"):
//
//   - Its accept loop runs each connection's ZMTP handshake itself, one at a
//     time and without a deadline: a peer that connects and sends nothing
//     (or half a greeting) stops every later producer from connecting.
//   - It allocates a frame's announced size before reading it: a header
//     announcing 2^62 bytes panics the worker process, 1 GiB is held for as
//     long as the peer likes, and a message may have any number of frames.
//   - Its writes have no deadline, and the ROUTER writes a reply while
//     holding the lock every reply needs: a peer that stops reading its
//     replies blocks every other peer's replies, then every handler, then
//     the receive loop.
//
// The guard runs each peer's handshake in its own goroutine under a
// deadline before go-zeromq sees the connection, refuses frames and
// messages over the worker's limits before their header reaches go-zeromq,
// and drops a connection whose write stalls.
const guardScheme = "keybrake-tcp"

// Limits of what a peer may send a worker in one message, beyond which its
// connection is closed: an envelope (MaxMessageBytes) in a frame, routing
// frames before it, and ZMTP commands.
const (
	maxFrames         = 16
	maxMessageWire    = MaxMessageBytes + 4<<10
	maxHandshakeFrame = 4 << 10 // a READY command: socket type and identity
	maxPendingAccepts = 1024    // handshakes in progress at once; more are closed
)

// zmtpNullGreeting is the greeting go-zeromq sends, byte for byte: ZMTP 3.0,
// the NULL mechanism, not as-server. The guard sends it for go-zeromq during
// the pre-handshake and swallows go-zeromq's own copy.
var zmtpNullGreeting = func() []byte {
	g := make([]byte, 64)
	g[0], g[9], g[10], g[11] = 0xFF, 0x7F, 3, 0
	copy(g[12:32], "NULL")
	return g
}()

// guardConfig is what a worker's guarded connections need; it travels in
// the socket's context, which go-zeromq hands to the transport.
type guardConfig struct {
	handshake time.Duration // the whole pre-handshake
	write     time.Duration // one write, blocked because the peer does not read
	maxPeers  int           // connections a listener keeps at once, in their handshake or established
	logger    *slog.Logger
}

type guardKey struct{}

// guardContext returns ctx carrying cfg for the transport.
func guardContext(ctx context.Context, sendTimeout time.Duration, maxPeers int, logger *slog.Logger) context.Context {
	return context.WithValue(ctx, guardKey{}, guardConfig{handshake: sendTimeout, write: sendTimeout, maxPeers: maxPeers, logger: logger})
}

func guardConfigOf(ctx context.Context) guardConfig {
	cfg, _ := ctx.Value(guardKey{}).(guardConfig)
	cfg.handshake = cmpOr(cfg.handshake, DefaultSendTimeout)
	cfg.write = cmpOr(cfg.write, DefaultSendTimeout)
	cfg.maxPeers = cmpOrInt(cfg.maxPeers, DefaultMaxPeers)
	cfg.logger = loggerOr(cfg.logger)
	return cfg
}

var registerGuard = sync.OnceValue(func() error {
	return zmq4.RegisterTransport(guardScheme, guardTransport{tcp: transport.New("tcp")})
})

// guardEndpoint returns the endpoint a worker's socket binds or connects:
// tcp endpoints through the guard, others (ipc, inproc: local peers) as
// they are.
func guardEndpoint(endpoint string) (string, error) {
	rest, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return endpoint, nil
	}
	if err := registerGuard(); err != nil {
		return "", err
	}
	return guardScheme + "://" + rest, nil
}

// guardTransport is the tcp transport with guarded connections.
type guardTransport struct{ tcp transport.Transport }

func (t guardTransport) Addr(ep string) (string, error) { return t.tcp.Addr(ep) }

// Dial connects and pre-handshakes in the caller's goroutine (go-zeromq's
// Dial is synchronous anyway), with the same deadline and limits: a hostile
// listener cannot hold a connecting worker's Open forever either.
func (t guardTransport) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	c, err := t.tcp.Dial(ctx, d, addr)
	if err != nil {
		return nil, err
	}
	return preHandshake(c, guardConfigOf(ctx))
}

// Listen returns a listener whose Accept hands go-zeromq only connections
// whose peer completed its half of the handshake.
func (t guardTransport) Listen(ctx context.Context, addr string) (net.Listener, error) {
	l, err := t.tcp.Listen(ctx, addr)
	if err != nil {
		return nil, err
	}
	cfg := guardConfigOf(ctx)
	g := &guardListener{Listener: l, cfg: cfg, ready: make(chan net.Conn),
		closed: make(chan struct{}), slots: make(chan struct{}, maxPendingAccepts), peers: make(chan struct{}, cfg.maxPeers)}
	go g.acceptLoop()
	return g, nil
}

// guardListener accepts connections and pre-handshakes each in its own
// goroutine; Accept returns them as they become ready, in that order.
type guardListener struct {
	net.Listener
	cfg       guardConfig
	ready     chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
	slots     chan struct{} // handshakes in progress
	peers     chan struct{} // connections kept, in their handshake or established: each may hold a message in go-zeromq's queue
}

func (g *guardListener) acceptLoop() {
	for {
		c, err := g.Listener.Accept()
		if err != nil {
			select {
			case <-g.closed:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			g.cfg.logger.Debug("zmq: accept", "err", err)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		select {
		case g.peers <- struct{}{}:
		default:
			g.cfg.logger.Warn("zmq: too many peers connected; connection refused", "peer", c.RemoteAddr().String(), "limit", g.cfg.maxPeers)
			c.Close()
			continue
		}
		release := func() { <-g.peers }
		select {
		case g.slots <- struct{}{}:
		default:
			g.cfg.logger.Warn("zmq: too many handshakes in progress; connection refused", "peer", c.RemoteAddr().String(), "limit", maxPendingAccepts)
			c.Close()
			release()
			continue
		}
		go func() {
			defer func() { <-g.slots }()
			gc, err := preHandshake(c, g.cfg)
			if err != nil {
				g.cfg.logger.Warn("zmq: peer did not complete the ZMTP handshake; connection closed", "peer", c.RemoteAddr().String(), "err", err)
				release()
				return
			}
			gc.(*guardConn).release = release
			select {
			case g.ready <- gc:
			case <-g.closed:
				gc.Close()
			}
		}()
	}
}

// Accept returns the next connection whose peer completed its handshake.
func (g *guardListener) Accept() (net.Conn, error) {
	select {
	case c := <-g.ready:
		return c, nil
	case <-g.closed:
		return nil, net.ErrClosed
	}
}

// Close stops accepting; connections in their handshake are closed by it.
func (g *guardListener) Close() error {
	err := net.ErrClosed
	g.closeOnce.Do(func() {
		close(g.closed)
		err = g.Listener.Close()
	})
	return err
}

// preHandshake plays go-zeromq's part of the ZMTP greeting and reads the
// peer's greeting and its first command (READY), all before the deadline.
// The returned connection replays those bytes to go-zeromq, whose own
// handshake then never waits on the network.
func preHandshake(c net.Conn, cfg guardConfig) (net.Conn, error) {
	fail := func(err error) (net.Conn, error) {
		c.Close()
		return nil, err
	}
	if err := c.SetDeadline(time.Now().Add(cfg.handshake)); err != nil {
		return fail(err)
	}
	if _, err := c.Write(zmtpNullGreeting); err != nil {
		return fail(fmt.Errorf("send greeting: %w", err))
	}
	pre := make([]byte, 64, 64+9+64)
	if _, err := io.ReadFull(c, pre); err != nil {
		return fail(fmt.Errorf("read greeting: %w", err))
	}
	if pre[0] != 0xFF || pre[9] != 0x7F {
		return fail(errors.New("not a ZMTP 3 greeting"))
	}
	hdr, size, err := readFrameHeader(c)
	if err != nil {
		return fail(fmt.Errorf("read handshake command: %w", err))
	}
	if hdr[0]&0x04 == 0 || hdr[0]&0x01 != 0 || size > maxHandshakeFrame {
		return fail(fmt.Errorf("handshake frame (flags %#x, %d bytes) is not a command of at most %d bytes", hdr[0], size, maxHandshakeFrame))
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(c, body); err != nil {
		return fail(fmt.Errorf("read handshake command: %w", err))
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		return fail(err)
	}
	pre = append(append(pre, hdr...), body...)
	return &guardConn{Conn: c, cfg: cfg, pre: pre, swallow: zmtpNullGreeting, ended: true}, nil
}

// readFrameHeader reads one ZMTP frame header: its bytes and the size it
// announces. Reserved flag bits are refused.
func readFrameHeader(r io.Reader) (hdr []byte, size uint64, err error) {
	var b [9]byte
	if _, err := io.ReadFull(r, b[:2]); err != nil {
		return nil, 0, err
	}
	if b[0]&^0x07 != 0 {
		return nil, 0, errPeerLimit{fmt.Sprintf("frame flags %#x have reserved bits set", b[0])}
	}
	if b[0]&0x02 == 0 {
		return b[:2], uint64(b[1]), nil
	}
	if _, err := io.ReadFull(r, b[2:9]); err != nil {
		return nil, 0, err
	}
	return b[:9], binary.BigEndian.Uint64(b[1:9]), nil
}

// errPeerLimit closes a connection whose peer broke a limit. It is a
// net.Error that is not a timeout, which is what makes go-zeromq drop the
// connection instead of reading from it again.
type errPeerLimit struct{ msg string }

func (e errPeerLimit) Error() string   { return "zmq: " + e.msg }
func (e errPeerLimit) Timeout() bool   { return false }
func (e errPeerLimit) Temporary() bool { return false }

// guardConn is a worker's connection as go-zeromq sees it: the handshake
// bytes already read (pre) first, then the peer's frames, each header
// checked against the limits before go-zeromq reads it; writes bounded by
// the write deadline.
type guardConn struct {
	net.Conn
	cfg     guardConfig
	pre     []byte // handshake bytes read ahead, replayed first
	swallow []byte // what go-zeromq writes first, already sent for it

	release   func() // gives back the listener's peer slot; nil for a dialled connection
	closeOnce sync.Once

	hdr    []byte // a checked header not yet returned
	body   uint64 // bytes left in the current frame's body
	frames int    // frames of the current message so far
	wire   uint64 // header and body bytes of the current message so far
	ended  bool   // the last frame had no MORE flag: the next starts a message
}

func (c *guardConn) Read(p []byte) (int, error) {
	switch {
	case len(p) == 0:
		return 0, nil
	case len(c.pre) > 0:
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	case len(c.hdr) > 0:
		n := copy(p, c.hdr)
		c.hdr = c.hdr[n:]
		return n, nil
	case c.body > 0:
		if uint64(len(p)) > c.body {
			p = p[:c.body]
		}
		n, err := c.Conn.Read(p)
		c.body -= uint64(n)
		return n, c.endedBy(err)
	}
	hdr, size, err := readFrameHeader(c.Conn)
	if err != nil {
		var lim errPeerLimit
		if errors.As(err, &lim) {
			return 0, c.refuse(lim.msg)
		}
		return 0, c.endedBy(err)
	}
	if c.ended {
		c.frames, c.wire = 0, 0
	}
	c.ended = hdr[0]&0x01 == 0
	c.frames++
	if size > maxMessageWire || c.wire+uint64(len(hdr))+size > maxMessageWire {
		return 0, c.refuse(fmt.Sprintf("a frame of %d bytes makes a message of more than %d bytes", size, maxMessageWire))
	}
	if c.frames > maxFrames {
		return 0, c.refuse(fmt.Sprintf("a message of more than %d frames", maxFrames))
	}
	c.wire += uint64(len(hdr)) + size
	c.body = size
	c.hdr = hdr
	return c.Read(p)
}

// endedBy closes the connection on an error after which go-zeromq counts
// it closed (end of file, or a network error that is not a timeout: its
// Conn.checkIO), and returns err. go-zeromq closes it too, but only once
// its reader has handed that error on (a queue send that waits while the
// worker is busy): the peer slot is given back at once.
func (c *guardConn) endedBy(err error) error {
	var ne net.Error
	if errors.Is(err, io.EOF) || errors.As(err, &ne) && !ne.Timeout() {
		c.Close()
	}
	return err
}

// Close closes the connection and gives back its peer slot, once.
func (c *guardConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() {
		if c.release != nil {
			c.release()
		}
	})
	return err
}

// refuse closes the connection and returns the error that makes go-zeromq
// forget it.
func (c *guardConn) refuse(msg string) error {
	c.cfg.logger.Warn("zmq: peer broke the message limits; connection closed", "peer", c.RemoteAddr().String(), "reason", msg)
	c.Close()
	return &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: errPeerLimit{msg}}
}

func (c *guardConn) Write(p []byte) (int, error) {
	if len(c.swallow) > 0 {
		n := min(len(p), len(c.swallow))
		if !bytes.Equal(p[:n], c.swallow[:n]) {
			c.Conn.Close()
			return 0, &net.OpError{Op: "write", Net: "tcp", Err: errPeerLimit{"go-zeromq's greeting is not the one the guard sent for it"}}
		}
		c.swallow = c.swallow[n:]
		if n == len(p) {
			return n, nil
		}
		m, err := c.Write(p[n:])
		return n + m, err
	}
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.cfg.write)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(p)
	var ne net.Error
	if err != nil && errors.As(err, &ne) && ne.Timeout() {
		// go-zeromq keeps a connection whose write timed out, with half a
		// frame on the wire; a peer that has not read for this long is
		// gone or hostile.
		c.cfg.logger.Warn("zmq: peer stopped reading; connection closed", "peer", c.RemoteAddr().String(), "after", c.cfg.write)
		c.Close()
		return n, &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: errPeerLimit{"peer stopped reading"}}
	}
	return n, c.endedBy(err)
}
